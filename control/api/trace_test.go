package api_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/api"
)

// TestRequestSpans: with a Tracer, each API request is a server span named
// by its method and route template (never the raw path, which names a
// resource), with its status, a child of the traceparent the client sent;
// a path no route serves is "unrouted"; routes outside /api/v1 (the
// callback receiver's, /metrics) are not traced here.
func TestRequestSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, api.Config{Tracer: tp, Metrics: metricsHandler})

	const client = "4bf92f3577b34da6a3ce929d0e0e4736"
	b.do(http.MethodGet, "/api/v1/resources/widget/w1", nil, "traceparent: 00-"+client+"-00f067aa0ba902b7-01")
	b.do(http.MethodGet, "/api/v1/no-such-thing", nil)
	b.do(http.MethodGet, "/metrics", nil)

	spans := exp.GetSpans()
	if len(spans) != 2 {
		names := make([]string, len(spans))
		for i, sp := range spans {
			names[i] = sp.Name
		}
		t.Fatalf("spans = %q, want the two /api/v1 requests'", names)
	}
	get, unrouted := spans[0], spans[1]
	if get.Name != "GET /api/v1/resources/{kind}/{name}" || get.SpanKind != trace.SpanKindServer {
		t.Errorf("span %q (%s), want GET /api/v1/resources/{kind}/{name} (server)", get.Name, get.SpanKind)
	}
	if get.SpanContext.TraceID().String() != client || get.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span in trace %s under %s, want the client's %s under 00f067aa0ba902b7",
			get.SpanContext.TraceID(), get.Parent.SpanID(), client)
	}
	attrs := attribute.NewSet(get.Attributes...)
	if v, _ := attrs.Value("http.route"); v.AsString() != "/api/v1/resources/{kind}/{name}" {
		t.Errorf("http.route = %q", v.AsString())
	}
	if v, _ := attrs.Value("http.response.status_code"); v.AsInt64() != http.StatusNotFound {
		t.Errorf("http.response.status_code = %d, want 404 (no such resource)", v.AsInt64())
	}
	if unrouted.Name != "GET unrouted" || unrouted.Parent.IsValid() {
		t.Errorf("span %q with parent %v, want a root GET unrouted", unrouted.Name, unrouted.Parent.SpanID())
	}
}
