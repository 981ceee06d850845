package store

import (
	"context"
	"fmt"
	"time"
)

// ReapParams bounds one reaper pass: ReapExpiredLeases, RequeueLagging,
// DeleteUnclaimedWork or SweepExpiredOrphans. The reaper runs them back to
// back over the same shards and batch size, so they share one struct.
type ReapParams struct {
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// Limit caps the rows one pass touches.
	Limit int
	// Window is the age that makes a row due, in whole seconds: how long a
	// lagging resource has not moved (RequeueLagging) or a task has waited
	// unclaimed (DeleteUnclaimedWork). The other passes ignore it.
	Window time.Duration
}

// ReapExpiredLeases re-pends claims in [p.Lo, p.Hi] whose lease lapsed.
func (s *Store) ReapExpiredLeases(ctx context.Context, p ReapParams) (int, error) {
	return s.scalarInt(ctx, "reap expired leases", `SELECT reap_expired_leases($1, $2, $3)`, p.Lo, p.Hi, p.Limit)
}

// RequeueLagging re-schedules lagging resources in [p.Lo, p.Hi] that have no
// live task and have not moved for p.Window: the crash-recovery backstop.
func (s *Store) RequeueLagging(ctx context.Context, p ReapParams) (int, error) {
	return s.scalarInt(ctx, "requeue lagging", `SELECT requeue_lagging($1, $2, $3, $4)`, p.Lo, p.Hi, int(p.Window/time.Second), p.Limit)
}

// DeleteUnclaimedWork drops tasks in [p.Lo, p.Hi] never claimed within
// p.Window.
func (s *Store) DeleteUnclaimedWork(ctx context.Context, p ReapParams) (int, error) {
	return s.scalarInt(ctx, "delete unclaimed work", `SELECT delete_unclaimed_work($1, $2, $3, $4)`, p.Lo, p.Hi, int(p.Window/time.Second), p.Limit)
}

// RecountInflight rewrites the per-kind in-flight partials for [lo, hi].
func (s *Store) RecountInflight(ctx context.Context, lo, hi int) error {
	if _, err := s.pool.Exec(ctx, `SELECT recount_inflight($1, $2)`, lo, hi); err != nil {
		return fmt.Errorf("recount inflight: %w", err)
	}
	return nil
}

// SweepExpiredOrphans removes orphaned children in [p.Lo, p.Hi] whose grace
// window elapsed.
func (s *Store) SweepExpiredOrphans(ctx context.Context, p ReapParams) (int, error) {
	return s.scalarInt(ctx, "sweep orphans", `SELECT sweep_expired_orphans($1, $2, $3)`, p.Lo, p.Hi, p.Limit)
}

// PruneEventsFromEnd is the sinceID that starts PruneEvents at the end of
// the log, for a reaper that has no watermark yet.
const PruneEventsFromEnd int64 = -1

// PruneEventsParams selects one window of the event log for PruneEvents.
type PruneEventsParams struct {
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// SinceID is the watermark the previous call returned, or
	// PruneEventsFromEnd.
	SinceID int64
	// Keep is how many of its newest events each resource keeps.
	Keep int
	// Limit is the window's width in event ids.
	Limit int
}

// PruneEvents keeps the newest p.Keep events of each resource in shards
// [p.Lo, p.Hi] that logged an event with an id in (p.SinceID,
// p.SinceID+p.Limit]. It returns the watermark to pass next time (the
// window's end, at most the last id handed out; below p.SinceID+p.Limit, the
// log is caught up) and the last id handed out, to measure the watermark's
// lag against.
func (s *Store) PruneEvents(ctx context.Context, p PruneEventsParams) (watermark, lastID int64, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT watermark, last_id FROM prune_resource_events($1, $2, $3, $4, $5)`,
		p.Lo, p.Hi, p.SinceID, p.Keep, p.Limit).Scan(&watermark, &lastID); err != nil {
		return p.SinceID, 0, fmt.Errorf("prune events: %w", err)
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

// ResyncKind is a kind version that opted into resync, with its interval.
type ResyncKind struct {
	Kind        string
	KindVersion int
	Interval    time.Duration
}

// ResyncKinds lists the kind versions with resync_interval_secs > 0, read
// fresh each call so that enabling or re-tuning resync is live.
func (s *Store) ResyncKinds(ctx context.Context) ([]ResyncKind, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, kind_version, resync_interval_secs FROM kind_config
		WHERE resync_interval_secs > 0 ORDER BY kind, kind_version`)
	if err != nil {
		return nil, fmt.Errorf("list resync kinds: %w", err)
	}
	defer rows.Close()
	var out []ResyncKind
	for rows.Next() {
		var (
			k        ResyncKind
			kv       int16
			interval int32
		)
		if err := rows.Scan(&k.Kind, &kv, &interval); err != nil {
			return nil, fmt.Errorf("list resync kinds: %w", err)
		}
		k.KindVersion, k.Interval = int(kv), time.Duration(interval)*time.Second
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list resync kinds: %w", err)
	}
	return out, nil
}

// ScheduleResyncs re-pends up to p.Limit settled resources of k in
// [p.Lo, p.Hi] whose last task is older than the kind's interval (with a
// per-resource jitter), without a generation bump.
func (s *Store) ScheduleResyncs(ctx context.Context, k ResyncKind, p ReapParams) (int, error) {
	return s.scalarInt(ctx, "schedule resyncs", `SELECT schedule_resyncs($1, $2, $3, $4, $5)`,
		k.Kind, k.KindVersion, p.Lo, p.Hi, p.Limit)
}
