package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
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

// TestOTelErrorsGoToTheJSONLog: OpenTelemetry's own errors (here an export
// the collector refuses) are lines of the pod's JSON log, not plain text on
// stderr through the standard library's logger.
func TestOTelErrorsGoToTheJSONLog(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusBadRequest) // not retryable: the export fails at once
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	var out logbuf.Buffer
	logOTelErrors(slog.New(slog.NewJSONHandler(&out, nil)))
	tp, err := startTracing(t.Context(), "test")
	if err != nil || tp == nil {
		t.Fatalf("with an endpoint: %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "span")
	span.End()
	_ = tp.Shutdown(t.Context()) // its last export fails, and the batcher hands the error to OpenTelemetry's handler

	for line := range strings.Lines(out.String()) {
		var rec struct{ Level, Msg, Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec.Msg == "opentelemetry" && rec.Level == "WARN" && strings.Contains(rec.Err, "400") {
			return
		}
	}
	t.Fatalf("no JSON log line for the failed export; the log holds:\n%s", out.String())
}
