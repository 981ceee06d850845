package health_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/health"
	"github.com/convergeplane/converge/dispatch/registry"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestProber runs the prober against a signed-checking endpoint whose
// answer the test changes: a failing answer parks the kind with the reason,
// a good one makes it ready again.
func TestProber(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	box, err := store.NewSecretBox(bytes.Repeat([]byte{5}, store.SecretKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	var mode atomic.Value
	mode.Store("500")
	var secret atomic.Value
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sec, err := webhooksdk.ParseSecret(secret.Load().(string))
		if err != nil || webhooksdk.Verify([]webhooksdk.Secret{sec}, r.Header, body, time.Now(), 0) != nil || string(body) != `{"type":"health"}` {
			http.Error(w, "bad probe", http.StatusUnauthorized)
			return
		}
		probes.Add(1)
		switch mode.Load().(string) {
		case "500":
			http.Error(w, "on fire", http.StatusInternalServerError)
		case "garbage":
			_, _ = io.WriteString(w, "<html>")
		default:
			_, _ = io.WriteString(w, `{"kinds":[{"kind":"leaf","kind_version":1,"ready":true}]}`)
		}
	}))
	t.Cleanup(srv.Close)
	_, sec, err := st.CreateEndpoint(t.Context(), box, store.PutEndpointParams{Name: "a",
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: srv.URL + "/task"},
		Health: store.EndpointHealth{URL: srv.URL + "/health", IntervalSecs: 1, HealthyThreshold: 1, UnhealthyThreshold: 1}})
	if err != nil {
		t.Fatal(err)
	}
	secret.Store(sec.Reveal())
	reg, err := registry.New(registry.Config{Box: box, Egress: egress.Policy{DevMode: true}}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	p := health.New(health.Config{Timeout: time.Second}, reg)
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)

	wait := func(ready bool, reason string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ok, why := reg.PairStatus("leaf", 1)
			if ok == ready && strings.Contains(why, reason) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("PairStatus = %v, %q; want %v containing %q", ok, why, ready, reason)
			}
			tick := time.NewTimer(10 * time.Millisecond)
			<-tick.C
		}
	}
	wait(false, "health probe failed: answered 500 Internal Server Error: on fire")
	mode.Store("ok")
	wait(true, "")
	mode.Store("garbage")
	wait(false, "unreadable answer")
	if probes.Load() < 3 {
		t.Errorf("%d probes answered", probes.Load())
	}
}
