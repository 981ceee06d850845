package store

import (
	"context"
	"fmt"
	"time"
)

// DrainParams bounds one drain batch. DrainRollupRechecks, the drain's
// second step, takes the same struct and reads Lo, Hi and Limit.
type DrainParams struct {
	Lo, Hi    int
	Limit     int
	RetryBase time.Duration // first transient retry delay (jittered, doubled per attempt)
	RetryMax  time.Duration // cap on the retry delay
}

// Drain applies up to p.Limit queued outcomes and returns how many it applied.
func (s *Store) Drain(ctx context.Context, p DrainParams) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, $4, $5)`,
		p.Lo, p.Hi, p.Limit, int(p.RetryBase/time.Millisecond), int(p.RetryMax/time.Millisecond)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("drain outbox: %w", err)
	}
	return n, nil
}

// DrainRollupRechecks re-evaluates up to p.Limit composite roots in
// [p.Lo, p.Hi] armed by a concurrent drain. It does not retry, so
// p.RetryBase and p.RetryMax do not apply.
func (s *Store) DrainRollupRechecks(ctx context.Context, p DrainParams) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3)`, p.Lo, p.Hi, p.Limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("drain rollup rechecks: %w", err)
	}
	return n, nil
}
