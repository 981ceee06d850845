package integration

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// echoProvider is a leaf served over HTTP with webhooksdk; ready toggles its
// readiness and fail makes Work fail transiently.
type echoProvider struct {
	ready, fail atomic.Bool
	runs        atomic.Int32
}

func (p *echoProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "echo", Version: 1}
}
func (p *echoProvider) Ready() bool { return p.ready.Load() }
func (p *echoProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.runs.Add(1)
	if p.fail.Load() {
		return webhooksdk.Outcome{}, io.ErrUnexpectedEOF
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{"echoed":` + string(req.Resource.Spec) + `}`)}, nil
}

// startAll starts the whole product in one process (ROLE all, dev mode) on
// its own database.
func startAll(t testing.TB) *server { return startAllWith(t, nil) }

// startAllWith is startAll with the server's config adjusted by tune.
func startAllWith(t testing.TB, tune func(*convergecli.Config)) *server {
	t.Helper()
	e := newEngine(t, engineOpts{noDrain: true})
	key := func() []byte { b := make([]byte, 32); _, _ = rand.Read(b); return b }
	cfg := convergecli.Config{DatabaseURL: e.db.DSN, Role: convergecli.RoleAll, ListenAddr: "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, MemberID: "e2e-all", Dev: true,
		SecretKey: key(), CallbackKey: key()}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := convergecli.Start(t.Context(), cfg, e.log)
	must(t, err)
	t.Cleanup(func() { must(t, srv.Stop()) })
	return &server{t: t, db: e.db, base: "http://" + srv.Addr(), engine: e}
}

// serveProvider registers an endpoint named name through the API for the
// providers' kinds, and serves them there over real HTTP with webhooksdk,
// signed with the secret the API returned (once).
func (s *server) serveProvider(name string, providers ...webhooksdk.Provider) {
	s.t.Helper()
	s.serveProviderWith(name, endpointExtras{}, nil, providers...)
}

// endpointExtras are settings serveProviderWith adds to the endpoint it
// registers: target holds the target's, fields the endpoint's own; sdk are
// options of the provider's webhooksdk handler.
type endpointExtras struct {
	target, fields map[string]any
	sdk            []webhooksdk.Option
}

// serveProviderWith is serveProvider with extra endpoint settings, and wrap
// (if not nil) around the SDK's handler.
func (s *server) serveProviderWith(name string, extra endpointExtras, wrap func(http.Handler) http.Handler, providers ...webhooksdk.Provider) {
	t := s.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	url := "http://" + ln.Addr().String() + "/"
	kinds := make([]map[string]any, len(providers))
	for i, p := range providers {
		kinds[i] = map[string]any{"kind": p.Kind().Kind, "kind_version": p.Kind().Version}
	}
	tgt := map[string]any{"type": "https", "url": url}
	maps.Copy(tgt, extra.target)
	ep := map[string]any{"name": name, "kinds": kinds, "target": tgt,
		"health": map[string]any{"url": url, "interval_secs": 1, "healthy_threshold": 1, "unhealthy_threshold": 1}}
	maps.Copy(ep, extra.fields)
	code, body := s.call("POST", "/endpoints", ep)
	var created struct {
		Secret string `json:"secret"`
	}
	if code != 201 || json.Unmarshal(body, &created) != nil || !strings.HasPrefix(created.Secret, "whsec_") {
		t.Fatalf("create endpoint = %d %s", code, body)
	}
	if _, body := s.call("GET", "/endpoints/"+name, nil); strings.Contains(string(body), created.Secret) {
		t.Fatal("GET returned the secret again")
	}
	h, err := webhooksdk.Handler(providers, append([]webhooksdk.Option{webhooksdk.WithSecrets(created.Secret)}, extra.sdk...)...)
	must(t, err)
	var handler http.Handler = h
	if wrap != nil {
		handler = wrap(h)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
}

// TestDispatchThroughTheServer runs the whole product in one process (ROLE
// all, dev mode): a provider registered through the API receives signed
// deliveries; a resource of an unready kind parks visibly and resumes;
// failed deliveries are readable per endpoint and per resource; /metrics
// counts them.
func TestDispatchThroughTheServer(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/echo/manifest", map[string]any{"kind": "echo", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &echoProvider{}
	s.serveProvider("echo", p)

	// Unready provider: the resource parks and its detail says why.
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "echo", "kind_version": 1, "name": "e1", "spec": map[string]any{"n": 1}}); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	var detail struct {
		Phase      string                   `json:"phase"`
		Parked     string                   `json:"parked"`
		Status     json.RawMessage          `json:"status"`
		Deliveries []map[string]interface{} `json:"recent_failed_deliveries"`
	}
	waitFor(t, 20*time.Second, "e1 to park with a reason", func() bool {
		_, body := s.call("GET", "/resources/echo/e1", nil)
		return json.Unmarshal(body, &detail) == nil && detail.Parked != ""
	})
	t.Logf("parked: %s", detail.Parked)
	if p.runs.Load() != 0 {
		t.Fatalf("an unready provider received %d tasks", p.runs.Load())
	}

	// Ready but failing: deliveries fail transiently and are recorded.
	p.fail.Store(true)
	p.ready.Store(true)
	waitFor(t, 30*time.Second, "a recorded failed delivery", func() bool {
		_, body := s.call("GET", "/resources/echo/e1", nil)
		return json.Unmarshal(body, &detail) == nil && len(detail.Deliveries) > 0
	})
	var ds struct{ Items []map[string]any }
	if code, body := s.call("GET", "/endpoints/echo/deliveries", nil); code != 200 || json.Unmarshal(body, &ds) != nil || len(ds.Items) == 0 {
		t.Errorf("deliveries = %d %s", code, body)
	}

	// Healed: it converges.
	p.fail.Store(false)
	waitFor(t, 30*time.Second, "e1 Ready", func() bool {
		_, body := s.call("GET", "/resources/echo/e1", nil)
		return json.Unmarshal(body, &detail) == nil && detail.Phase == string(model.PhaseReady)
	})
	var st struct {
		Echoed struct{ N int } `json:"echoed"`
	}
	if json.Unmarshal(detail.Status, &st) != nil || st.Echoed.N != 1 {
		t.Errorf("status = %s, want the echoed spec", detail.Status)
	}
	resp, err := http.Get(s.base + "/metrics")
	must(t, err)
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `converge_dispatch_deliveries_total{endpoint="echo",result="ok"}`) {
		t.Errorf("/metrics lacks the endpoint's successful deliveries")
	}
	if !strings.Contains(string(m), "\nconverge_reaper_event_prune_lag ") {
		t.Errorf("/metrics lacks the reaper's event prune lag")
	}
	// The egress policy refuses a metadata address even in the API.
	if code, body := s.call("POST", "/endpoints", map[string]any{"name": "evil", "kinds": []map[string]any{{"kind": "echo", "kind_version": 1}},
		"target": map[string]any{"type": "https", "url": "ftp://169.254.169.254/"}}); code != 422 || !strings.Contains(string(body), "target.url") {
		t.Errorf("bad target = %d %s", code, body)
	}
	s.checkInvariants()
}
