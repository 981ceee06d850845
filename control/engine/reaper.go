package engine

import (
	"context"
	"fmt"
	"time"
)

// ReapParams bounds one reaper pass: LeaseReapExpired,
// ResourceRequeueLagging, TaskDeleteUnclaimed, OrphanSweepExpired or
// ResyncSchedule. The reaper runs them back to back over the same shards
// and batch size, so they share one struct.
type ReapParams struct {
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// Limit caps the rows one pass touches.
	Limit int
	// Window is the age that makes a row due, in whole seconds: how long a
	// lagging resource has not moved (ResourceRequeueLagging) or a task has
	// waited unclaimed (TaskDeleteUnclaimed). The other passes ignore it.
	Window time.Duration
}

// LeaseReapExpired re-pends claims in [p.Lo, p.Hi] whose lease lapsed.
func (e *Engine) LeaseReapExpired(ctx context.Context, p ReapParams) (int, error) {
	return e.scalarInt(ctx, "reap expired leases", `SELECT reap_expired_leases($1, $2, $3)`, p.Lo, p.Hi, p.Limit)
}

// ResourceRequeueLagging re-schedules lagging resources in [p.Lo, p.Hi]
// that have no live task and have not moved for p.Window: the
// crash-recovery backstop.
func (e *Engine) ResourceRequeueLagging(ctx context.Context, p ReapParams) (int, error) {
	return e.scalarInt(ctx, "requeue lagging", `SELECT requeue_lagging($1, $2, $3, $4)`, p.Lo, p.Hi, int(p.Window/time.Second), p.Limit)
}

// TaskDeleteUnclaimed drops tasks in [p.Lo, p.Hi] never claimed within
// p.Window.
func (e *Engine) TaskDeleteUnclaimed(ctx context.Context, p ReapParams) (int, error) {
	return e.scalarInt(ctx, "delete unclaimed work", `SELECT delete_unclaimed_work($1, $2, $3, $4)`, p.Lo, p.Hi, int(p.Window/time.Second), p.Limit)
}

// InflightRecount rewrites the per-kind in-flight partials for [lo, hi].
func (e *Engine) InflightRecount(ctx context.Context, lo, hi int) error {
	if _, err := e.pool.Exec(ctx, `SELECT recount_inflight($1, $2)`, lo, hi); err != nil {
		return fmt.Errorf("recount inflight: %w", err)
	}
	return nil
}

// OrphanSweepExpired removes orphaned children in [p.Lo, p.Hi] whose grace
// window elapsed.
func (e *Engine) OrphanSweepExpired(ctx context.Context, p ReapParams) (int, error) {
	return e.scalarInt(ctx, "sweep orphans", `SELECT sweep_expired_orphans($1, $2, $3)`, p.Lo, p.Hi, p.Limit)
}
