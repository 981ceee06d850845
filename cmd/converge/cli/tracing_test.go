package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestTracingFollowsTheOTelEnvironment: no OTLP endpoint, no tracer (and
// no exporter); with one, spans reach it over OTLP/HTTP.
func TestTracingFollowsTheOTelEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if tp, err := startTracing(t.Context(), "test"); tp != nil || err != nil {
		t.Fatalf("without an endpoint: %v, %v; want no tracer", tp, err)
	}

	var exports atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			exports.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	tp, err := startTracing(t.Context(), "test")
	if err != nil || tp == nil {
		t.Fatalf("with an endpoint: %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "span")
	span.End()
	if err := tp.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if exports.Load() == 0 {
		t.Error("the collector received no OTLP trace export")
	}
}
