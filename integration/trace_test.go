package integration

import (
	"bytes"
	"context"
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
// are one trace: POST /api/v1/resources continues the client's
// traceparent, the task stores the request's context, the dispatcher's
// delivery is its child, the provider starts its span from the request's
// traceparent, and the SDK's callback (asynchronous: answered 202 at once)
// carries it back to the callback route.
func TestOneTraceFromApplyToProvider(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := startAllWith(t, func(c *convergecli.Config) { c.Tracer = tp })
	if code, body := s.call("PUT", "/kinds/echo/manifest", map[string]any{"kind": "echo", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &echoProvider{}
	p.ready.Store(true)
	// The provider traces as protocol.md §17 asks: a server span, a child
	// of the request's traceparent.
	provider := tp.Tracer("provider")
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
	s.engine.waitPhase("echo", "traced", string(model.PhaseReady), 60*time.Second)

	// The SDK batches its callbacks (POST /v1/tasks/outcomes) unless told
	// otherwise. Once its span has ended (in whichever trace), every span
	// of the client's trace, by name.
	const callback = "converge.callback POST /v1/tasks/outcomes"
	waitFor(t, 20*time.Second, "the callback's span", func() bool {
		for _, sp := range exp.GetSpans() {
			if sp.Name == callback {
				return true
			}
		}
		return false
	})
	spans := map[string]tracetest.SpanStub{}
	for _, sp := range exp.GetSpans() {
		if sp.SpanContext.TraceID() == client.TraceID() {
			spans[sp.Name] = sp
		}
	}
	for name := range spans {
		t.Logf("in the client's trace: %s", name)
	}
	// Each span is the child of the one before it.
	chain := []struct{ name, parent string }{
		{"POST /api/v1/resources", ""},
		{"converge.deliver", "POST /api/v1/resources"},
		{"converge.deliver.attempt", "converge.deliver"},
		{"provider POST", "converge.deliver.attempt"},
		{callback, "converge.deliver.attempt"},
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
	}
	if api := spans["POST /api/v1/resources"]; api.SpanKind != trace.SpanKindServer {
		t.Errorf("the API's span is %s, want server", api.SpanKind)
	}
}
