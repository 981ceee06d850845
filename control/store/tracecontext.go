package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContextSQL makes the request's trace context the transaction's: every
// work row the transaction inserts stores it (work_queue.traceparent's
// default reads converge.traceparent, migration 00031), so the dispatcher
// that claims the task continues the request's trace. is_local: it ends
// with the transaction and never leaks to the pooled session's next user.
const traceContextSQL = `SELECT set_config('converge.traceparent', $1, true)`

// traceParentOf is the W3C traceparent of ctx's span, or "" when ctx carries
// none (an untraced request: nothing is stored and nothing costs).
func traceParentOf(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// queueTraceContext queues traceContextSQL into b, first, for a traced
// request and reports whether it did: the caller then reads its result
// first.
func queueTraceContext(ctx context.Context, b *pgx.Batch) bool {
	tp := traceParentOf(ctx)
	if tp == "" {
		return false
	}
	b.Queue(traceContextSQL, tp)
	return true
}

// setTraceContext runs traceContextSQL in tx for a traced request; an
// untraced one costs nothing.
func setTraceContext(ctx context.Context, tx pgx.Tx) error {
	tp := traceParentOf(ctx)
	if tp == "" {
		return nil
	}
	_, err := tx.Exec(ctx, traceContextSQL, tp)
	return err
}
