package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestOneTraceFromApplyToProvider: with tracing on, a client's apply, the
// delivery it causes, the provider's own span and the provider's callback
// are one trace, across two pods sharing one database: POST
// /api/v1/resources on the control pod continues the client's traceparent,
// the task stores the request's context, the dispatch pod's delivery is its
// child, the provider starts its span from the request's traceparent, and
// the SDK's callback (asynchronous: answered 202 at once) carries it back to
// the dispatch pod's callback route. Each pod exports to its own in-memory
// exporter, as two processes would.
func TestOneTraceFromApplyToProvider(t *testing.T) {
	t.Parallel()
	newPod := func() (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return exp, tp
	}
	controlExp, controlTP := newPod()
	dispatchExp, dispatchTP := newPod()
	e := newEngine(t, engineOpts{noDrain: true})
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	start := func(role convergecli.Role, tp trace.TracerProvider) *convergecli.Server {
		cfg := convergecli.Config{DatabaseURL: e.db.DSN, Role: role, ListenAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0",
			ReaperRetryWindow: 30 * time.Second, MemberID: "trace-" + string(role), Dev: true, SecretKey: key, CallbackKey: key, Tracer: tp}
		srv, err := convergecli.Start(t.Context(), cfg, e.log)
		must(t, err)
		t.Cleanup(func() { must(t, srv.Stop()) })
		return srv
	}
	control := start(convergecli.RoleControl, controlTP)
	start(convergecli.RoleDispatch, dispatchTP)
	s := &server{t: t, db: e.db, base: "http://" + control.Addr(), engine: e}
	if code, body := s.call("PUT", "/kinds/echo/manifest", map[string]any{"kind": "echo", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &echoProvider{}
	p.ready.Store(true)
	// The provider traces as protocol.md §17 asks: a server span, a child
	// of the request's traceparent.
	providerExp, providerTP := newPod()
	provider := providerTP.Tracer("provider")
	traced := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := provider.Start(ctx, "provider "+r.Method, trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			h.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	s.serveProviderWith("echo", endpointExtras{sdk: []webhooksdk.Option{webhooksdk.WithSyncBudget(0)}}, traced, p)

	// The client's own trace: the apply continues it.
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0x0f, 1},
		TraceFlags: trace.FlagsSampled})
	body, _ := json.Marshal(map[string]any{"kind": "echo", "kind_version": 1, "name": "traced", "spec": map[string]any{"n": 1}})
	req, err := http.NewRequestWithContext(t.Context(), "POST", s.base+"/api/v1/resources", bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+client.TraceID().String()+"-"+client.SpanID().String()+"-01")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("apply = %d", resp.StatusCode)
	}
	s.waitPhase("echo", "traced", string(model.PhaseReady), 60*time.Second)

	// The SDK batches its callbacks (POST /v1/tasks/outcomes) unless told
	// otherwise. Once its span has ended (in whichever trace), every span
	// of the client's trace, by name, and the pod that made it.
	const callback = "converge.callback POST /v1/tasks/outcomes"
	waitFor(t, 20*time.Second, "the callback's span", func() bool {
		for _, sp := range dispatchExp.GetSpans() {
			if sp.Name == callback {
				return true
			}
		}
		return false
	})
	spans, pod := map[string]tracetest.SpanStub{}, map[string]string{}
	for name, exp := range map[string]*tracetest.InMemoryExporter{"control": controlExp, "dispatch": dispatchExp, "provider": providerExp} {
		for _, sp := range exp.GetSpans() {
			if sp.SpanContext.TraceID() == client.TraceID() {
				spans[sp.Name], pod[sp.Name] = sp, name
			}
		}
	}
	for name := range spans {
		t.Logf("in the client's trace: %s (%s)", name, pod[name])
	}
	// Each span is the child of the one before it.
	chain := []struct{ name, parent, pod string }{
		{"POST /api/v1/resources", "", "control"},
		{"converge.deliver", "POST /api/v1/resources", "dispatch"},
		{"converge.deliver.attempt", "converge.deliver", "dispatch"},
		{"provider POST", "converge.deliver.attempt", "provider"},
		{callback, "converge.deliver.attempt", "dispatch"},
	}
	for _, c := range chain {
		sp, ok := spans[c.name]
		if !ok {
			t.Errorf("no span %q in the client's trace %s", c.name, client.TraceID())
			continue
		}
		want := client.SpanID()
		if c.parent != "" {
			want = spans[c.parent].SpanContext.SpanID()
		}
		if sp.Parent.SpanID() != want {
			t.Errorf("span %q has parent %s, want %q's %s", c.name, sp.Parent.SpanID(), c.parent, want)
		}
		if pod[c.name] != c.pod {
			t.Errorf("span %q was made by %s, want %s", c.name, pod[c.name], c.pod)
		}
	}
	if api := spans["POST /api/v1/resources"]; api.SpanKind != trace.SpanKindServer {
		t.Errorf("the API's span is %s, want server", api.SpanKind)
	}
}
