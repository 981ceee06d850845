package engine

import (
	"context"
	"fmt"

	"github.com/convergeplane/converge/internal/pgrun"
)

// DrainParams bounds one drain batch. RollupRecheckDrain, the drain's
// second step, takes the same struct.
type DrainParams struct {
	Lo, Hi int
	Limit  int
}

// OutboxDrain applies up to p.Limit queued outcomes (those that compose)
// and returns how many it applied. A transient failure among them backs off
// as Config.RetryBase and RetryMax say. A deadlock runs the batch again: a
// compose locks the upstreams of its new edges, which a completion may
// hold.
func (e *Engine) OutboxDrain(ctx context.Context, p DrainParams) (int, error) {
	var n int
	base, limit := e.retryMillis()
	err := pgrun.RetryDeadlock(func() error {
		return e.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, $4, $5)`, p.Lo, p.Hi, p.Limit, base, limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("drain outbox: %w", err)
	}
	return n, nil
}
