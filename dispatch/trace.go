package dispatch

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Spans, when Config.Tracer is set: one per delivery (a task, or a batch),
// "converge.deliver", with an "outcome" event per task. A task carries the
// trace context of the API request that scheduled it (model.Task.TraceParent,
// stored with its work row): a single task's delivery is a child of that
// request's span, so the apply and its deliveries, retries included, are one
// trace even when another pod claims the task; a batch's delivery links to
// each of its tasks' requests. A task with none starts a trace. Under the
// delivery, one client
// span per HTTP attempt, "converge.deliver.attempt" (a failover makes
// several). Each attempt's request carries that span's W3C traceparent, so
// the provider's spans, and its callback's (package callback), join the
// trace. Without a tracer no span is made and the traceparent carries
// fresh random ids, not sampled: a provider can still correlate its logs.

// tracerName names the dispatcher's spans' instrumentation scope.
const tracerName = "github.com/convergeplane/converge/dispatch"

// noSpan is what the span helpers return with tracing off: every method a
// no-op.
var noSpan = trace.SpanFromContext(context.Background())

// startDelivery opens the span of one delivery of items.
func (d *Dispatcher) startDelivery(items []*item) trace.Span {
	if d.tracer == nil {
		return noSpan
	}
	t := items[0].task
	attrs := []attribute.KeyValue{attribute.String("converge.kind", t.Kind), attribute.Int("converge.kind_version", t.KindVersion),
		attribute.Int("converge.tasks", len(items))}
	if len(items) == 1 {
		attrs = append(attrs, attribute.String("converge.task_id", t.ID), attribute.Int64("converge.claim_epoch", t.ClaimEpoch))
	}
	ctx, opts := context.Background(), []trace.SpanStartOption{trace.WithAttributes(attrs...)}
	if len(items) == 1 {
		ctx = storedContext(t.TraceParent)
	} else {
		for _, it := range items {
			if it.task.TraceParent != "" {
				opts = append(opts, trace.WithLinks(trace.LinkFromContext(storedContext(it.task.TraceParent))))
			}
		}
	}
	_, span := d.tracer.Start(ctx, "converge.deliver", opts...)
	return span
}

// storedContext is a context whose remote parent is the span of the W3C
// traceparent stored with a task; an empty or malformed one yields none.
func storedContext(traceparent string) context.Context {
	if traceparent == "" {
		return context.Background()
	}
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
}

// startAttempt opens the span of one HTTP attempt under the delivery's and
// returns the traceparent its request carries.
func (d *Dispatcher) startAttempt(delivery trace.Span, endpoint string) (trace.Span, string) {
	if d.tracer == nil {
		return noSpan, traceParent(trace.SpanContext{})
	}
	_, span := d.tracer.Start(trace.ContextWithSpan(context.Background(), delivery), "converge.deliver.attempt",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("converge.endpoint", endpoint)))
	return span, traceParent(span.SpanContext())
}

// endAttempt records the attempt's verdict and ends its span.
func endAttempt(span trace.Span, v verdict) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("converge.result", v.result))
	if v.status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", v.status))
	}
	if v.failed {
		span.SetStatus(codes.Error, v.result)
	}
}

// traceOutcome adds a task's verdict to its delivery's span.
func traceOutcome(span trace.Span, it *item, endpoint string, v verdict) {
	if !span.IsRecording() {
		return
	}
	span.AddEvent("outcome", trace.WithAttributes(attribute.String("converge.task_id", it.task.ID),
		attribute.String("converge.endpoint", endpoint), attribute.String("converge.result", v.result)))
}

// traceParent is the W3C traceparent header of sc, or, for an invalid sc
// (tracing off), of fresh random ids with the sampled flag clear.
func traceParent(sc trace.SpanContext) string {
	if sc.IsValid() {
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
	}
	// Written in place, one allocation: this is every attempt's header
	// with tracing off.
	var ids [24]byte // trace id, then span id
	binary.BigEndian.PutUint64(ids[:8], rand.Uint64())
	binary.BigEndian.PutUint64(ids[8:16], rand.Uint64()|1) // never all zeros, which is invalid
	binary.BigEndian.PutUint64(ids[16:], rand.Uint64()|1)
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], ids[:16])
	b[35] = '-'
	hex.Encode(b[36:52], ids[16:])
	copy(b[52:], "-00")
	return string(b[:])
}
