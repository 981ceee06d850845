package store

import (
	"context"
	"fmt"
	"time"
)

// ReapExpiredLeases re-pends claims in [lo, hi] whose lease lapsed.
func (s *Store) ReapExpiredLeases(ctx context.Context, lo, hi, limit int) (int, error) {
	return s.scalarInt(ctx, "reap expired leases", `SELECT reap_expired_leases($1, $2, $3)`, lo, hi, limit)
}

// RequeueLagging re-schedules lagging resources in [lo, hi] that have no live
// task and have not moved for window: the crash-recovery backstop.
func (s *Store) RequeueLagging(ctx context.Context, lo, hi int, window time.Duration, limit int) (int, error) {
	return s.scalarInt(ctx, "requeue lagging", `SELECT requeue_lagging($1, $2, $3, $4)`, lo, hi, int(window/time.Second), limit)
}

// DeleteUnclaimedWork drops tasks never claimed within window.
func (s *Store) DeleteUnclaimedWork(ctx context.Context, lo, hi int, window time.Duration, limit int) (int, error) {
	return s.scalarInt(ctx, "delete unclaimed work", `SELECT delete_unclaimed_work($1, $2, $3, $4)`, lo, hi, int(window/time.Second), limit)
}

// RecountInflight rewrites the per-kind in-flight partials for [lo, hi].
func (s *Store) RecountInflight(ctx context.Context, lo, hi int) error {
	if _, err := s.pool.Exec(ctx, `SELECT recount_inflight($1, $2)`, lo, hi); err != nil {
		return fmt.Errorf("recount inflight: %w", err)
	}
	return nil
}

// SweepExpiredOrphans removes orphaned children whose grace window elapsed.
func (s *Store) SweepExpiredOrphans(ctx context.Context, lo, hi, limit int) (int, error) {
	return s.scalarInt(ctx, "sweep orphans", `SELECT sweep_expired_orphans($1, $2, $3)`, lo, hi, limit)
}

// PruneEventsFromEnd is the sinceID that starts PruneEvents at the end of
// the log, for a reaper that has no watermark yet.
const PruneEventsFromEnd int64 = -1

// PruneEvents keeps the newest keep events of each resource in shards
// [lo, hi] that logged an event with an id in (sinceID, sinceID+limit]. It
// returns the watermark to pass next time (the window's end, at most the
// last id handed out; below sinceID+limit, the log is caught up) and the
// last id handed out, to measure the watermark's lag against.
func (s *Store) PruneEvents(ctx context.Context, lo, hi int, sinceID int64, keep, limit int) (watermark, lastID int64, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT watermark, last_id FROM prune_resource_events($1, $2, $3, $4, $5)`,
		lo, hi, sinceID, keep, limit).Scan(&watermark, &lastID); err != nil {
		return sinceID, 0, fmt.Errorf("prune events: %w", err)
	}
	return watermark, lastID, nil
}

func (s *Store) scalarInt(ctx context.Context, what, sql string, args ...any) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}
