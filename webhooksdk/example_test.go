package webhooksdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
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

// account is a leaf provider: it reads the spec, reconciles, returns status. One
// reaction, no config hook, always ready: a WorkFunc is the whole provider.
func account(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
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

func ExampleWorkFunc() {
	p := webhooksdk.WorkFunc("account", 1, account)
	out, err := p.Work(context.Background(), webhooksdk.Request{
		Reaction: "work",
		Resource: webhooksdk.Resource{Kind: "account", KindVersion: 1, Name: "blue", Spec: json.RawMessage(`{"team_name":"blue"}`)},
	})
	fmt.Println(p.Kind(), string(out.Status), err)

	_, err = p.Work(context.Background(), webhooksdk.Request{Resource: webhooksdk.Resource{Spec: json.RawMessage(`[]`)}})
	fmt.Println(webhooksdk.IsTerminal(err))
	// Output:
	// account/v1 {"account_id":"acc-blue"} <nil>
	// true
}

// A provider process's main: serve until SIGINT or SIGTERM, then drain. PROVIDER_ADDR
// and PROVIDER_SECRETS are this program's choice of names, as are the files' paths.
func ExampleListenAndServe() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	err := webhooksdk.ListenAndServe(context.Background(), os.Getenv("PROVIDER_ADDR"),
		[]webhooksdk.Provider{webhooksdk.WorkFunc("account", 1, account)},
		webhooksdk.WithSecrets(strings.Split(os.Getenv("PROVIDER_SECRETS"), ",")...), // both during a rotation
		webhooksdk.WithTLS("/etc/provider/tls.crt", "/etc/provider/tls.key"),
		webhooksdk.WithDrainTimeout(50*time.Second), // within the pod's termination grace period
		webhooksdk.WithLogger(log),
	)
	if err != nil {
		log.Error("provider stopped", "err", err)
		os.Exit(1)
	}
}

// Serve on a listener of one's own, probed the way the dispatcher probes, and stopped
// by its context.
func ExampleServe() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // from a secret store, not code
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- webhooksdk.Serve(ctx, ln, []webhooksdk.Provider{webhooksdk.WorkFunc("account", 1, account)},
			webhooksdk.WithSecrets(secret), webhooksdk.WithLogger(slog.New(slog.DiscardHandler)))
	}()

	fmt.Println(probe("http://"+ln.Addr().String()+"/", secret))
	stop()
	fmt.Println(<-served)
	// Output:
	// 200 {"kinds":[{"kind":"account","kind_version":1,"ready":true}]}
	// <nil>
}

// probe POSTs a signed health probe to url and returns the answer's status and body.
func probe(url, secret string) string {
	signer, err := webhooksdk.NewSigner(secret)
	if err != nil {
		return err.Error()
	}
	body := []byte(`{"type":"health"}`)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	signer.SetHeaders(req.Header, "msg_probe", time.Now(), body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(resp.StatusCode, " ", string(answer))
}

// The Endpoint in a server of one's own (Serve does all of this): mount it where the
// registered endpoint's target and health URLs point, and stop the server before the
// Endpoint, so that inline answers finish before asynchronous work is cut off.
func ExampleHandler() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ep, err := webhooksdk.Handler([]webhooksdk.Provider{webhooksdk.WorkFunc("account", 1, account)},
		webhooksdk.WithSecrets(secret))
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("POST /converge", ep)        // the endpoint's target URL
	mux.Handle("POST /converge/health", ep) // its health URL
	srv := httptest.NewServer(mux)

	fmt.Println(probe(srv.URL+"/converge/health", secret))
	srv.Close()
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(ep.Shutdown(drain))
	// Output:
	// 200 {"kinds":[{"kind":"account","kind_version":1,"ready":true}]}
	// <nil>
}
