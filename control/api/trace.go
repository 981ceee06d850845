package api

import (
	"strings"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the API's spans' instrumentation scope.
const tracerName = "github.com/convergeplane/converge/control/api"

// tracing gives every request a server span named by its method and route
// template ("POST /api/v1/resources"; "unrouted" when no route answered, as
// the metrics say), a child of the request's W3C traceparent when it sent
// one. The span is the request's context: a write that schedules work
// stores it with the task (see store's tracecontext.go), and the dispatcher
// continues it. Like the metrics middleware it renders a handler's error
// through onError itself, so the status it records is the one the client
// gets.
func tracing(tp trace.TracerProvider, onError fiber.ErrorHandler) fiber.Handler {
	tracer := tp.Tracer(tracerName)
	return func(c *fiber.Ctx) error {
		// Cloned: fasthttp reuses the request's buffers once it is answered,
		// and tracestate keeps substrings of its header.
		carrier := propagation.MapCarrier{
			"traceparent": strings.Clone(c.Get("traceparent")),
			"tracestate":  strings.Clone(c.Get("tracestate")),
		}
		ctx := propagation.TraceContext{}.Extract(c.UserContext(), carrier)
		method := methodLabel(c.Method())
		ctx, span := tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("url.path", strings.Clone(c.Path()))))
		defer span.End()
		c.SetUserContext(ctx)
		if err := c.Next(); err != nil {
			if err := onError(c, err); err != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError) // as Fiber answers an error handler that fails
			}
		}
		route, status := routeLabel(c.Route()), c.Response().StatusCode()
		span.SetName(method + " " + route)
		span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", status))
		if status >= fiber.StatusInternalServerError {
			span.SetStatus(codes.Error, fiber.ErrInternalServerError.Message)
		}
		return nil
	}
}
