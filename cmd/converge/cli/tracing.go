package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// startTracing returns the tracer provider that exports the pod's spans
// (the API's and the dispatcher's) over OTLP/HTTP when the standard OpenTelemetry environment names a
// collector (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and nil otherwise: tracing is off
// unless asked for. The exporter and the sampler read the rest of the
// standard variables themselves (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_TRACES_SAMPLER, …); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// override the service name "converge".
func startTracing(ctx context.Context, version string) (*sdktrace.TracerProvider, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "converge"),
		attribute.String("service.version", version)), env)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// logOTelErrors sends OpenTelemetry's own errors (an export that failed, a
// full span queue, a malformed OTEL_* variable) to log, the pod's log (JSON
// with LOG_FORMAT=json), instead of the standard library's logger on
// stderr, which writes plain text whatever the format. OpenTelemetry keeps
// one handler per process.
func logOTelErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "err", err)
	}))
}
