package webhooksdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// The Standard Webhooks specification's test vector.
func ExampleSign() {
	secret, err := webhooksdk.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(webhooksdk.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`)))
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// During a secret rotation the dispatcher signs with both secrets; a provider holding
// either one accepts the request.
func ExampleSigner() {
	signer, err := webhooksdk.NewSigner(
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",     // old
		"whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n", // new
	)
	if err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"type":"health"}`)
	h := http.Header{}
	signer.SetHeaders(h, "msg_1", time.Unix(1614265330, 0), body)
	fmt.Println(h.Get(webhooksdk.HeaderSignature))

	newOnly, err := webhooksdk.ParseSecret("whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(webhooksdk.Verify([]webhooksdk.Secret{newOnly}, h, body, time.Unix(1614265330, 0), 0))
	// Output:
	// v1,yx54M0FtZAIF1eg8NQ9DG8Nx1fq/wQwQ0ahyu9p9owc= v1,G/7LJUXzOOkxN+x/0Tc7sSRfBmE9J2m/261+6GPnPSA=
	// <nil>
}

// accountProvider is a leaf provider: it reads the spec, reconciles, returns status.
type accountProvider struct{}

func (accountProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "account", Version: 1}
}

func (accountProvider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec struct {
		TeamName string `json:"team_name"`
	}
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		// A malformed spec cannot be fixed by a retry.
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("decode account spec: %w", err))
	}
	// …reconcile against the real world, honouring ctx…
	status, err := json.Marshal(map[string]string{"account_id": "acc-" + spec.TeamName})
	if err != nil {
		return webhooksdk.Outcome{}, err // transient: retried
	}
	return webhooksdk.Outcome{Status: status}, nil
}

// Serve providers over HTTPS and drain on SIGTERM: first the HTTP server (inline
// requests), then the Endpoint (asynchronous work and callbacks).
func ExampleHandler() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	ep, err := webhooksdk.Handler(
		[]webhooksdk.Provider{accountProvider{}},
		webhooksdk.WithSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), // from a secret store, not code
	)
	if err != nil {
		log.Print(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("POST /converge", ep)        // the endpoint's target URL
	mux.Handle("POST /converge/health", ep) // its health URL
	srv := &http.Server{Addr: ":8443", Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	go func() {
		if err := srv.ListenAndServeTLS("tls.crt", "tls.key"); !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
			stop()
		}
	}()
	<-ctx.Done()
	drain, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		log.Print(err)
	}
	if err := ep.Shutdown(drain); err != nil {
		log.Print(err)
	}
}
