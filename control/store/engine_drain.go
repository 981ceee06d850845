package store

import (
	"context"
	"fmt"
)

// DrainParams bounds one drain batch. DrainRollupRechecks, the drain's
// second step, takes the same struct.
type DrainParams struct {
	Lo, Hi int
	Limit  int
}

// Drain applies up to p.Limit queued outcomes (those that compose) and
// returns how many it applied. A transient failure among them backs off as
// Config.RetryBase and RetryMax say. A deadlock runs the batch again: a
// compose locks the upstreams of its new edges, which a completion may hold.
func (s *Store) Drain(ctx context.Context, p DrainParams) (int, error) {
	var n int
	base, limit := s.retryMillis()
	err := retryDeadlock(func() error {
		return s.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, $4, $5)`, p.Lo, p.Hi, p.Limit, base, limit).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("drain outbox: %w", err)
	}
	return n, nil
}

// DrainRollupRechecks re-evaluates up to p.Limit composite roots in
// [p.Lo, p.Hi] armed by a concurrent drain.
func (s *Store) DrainRollupRechecks(ctx context.Context, p DrainParams) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3)`, p.Lo, p.Hi, p.Limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("drain rollup rechecks: %w", err)
	}
	return n, nil
}
