package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
)

// TaskClaimParams selects what TaskClaim may take.
type TaskClaimParams struct {
	// Claimer identifies the claiming process (stamped as claimed_by).
	Claimer string
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// Pairs lists the pairs the caller can serve; nil means every pair (an
	// in-process executor that serves all kinds). A bare "kind/version" is
	// served for every namespace that does not serve it itself (the default
	// namespace's endpoints); "namespace:kind/version" for that namespace
	// only (its own endpoints).
	Pairs []string
	// Own lists the "namespace:kind/version" pairs namespaces serve
	// themselves, ready or not: their tasks of such a pair are claimed only
	// under the namespaced pair, never under the bare one. Nil: none.
	Own []string
	// Limit caps the batch.
	Limit int
	// Lease is how long the claim holds without renewal before the reaper
	// may reclaim it.
	Lease time.Duration
}

// A claim writes no event: the claim's time, epoch and claimer are on the
// task while it runs and on the resource once applied (issue #13). Each
// work task comes with its resource (r_found, claimedResourceCols), which
// its request then need not read.
const taskClaimSQL = `SELECT task_id, shard_id, resource_id, task_type, trigger, coalesce(reaction, ''), emits,
       kind, kind_version, generation, claim_epoch, attempts, deadline,
       coalesce(transition, ''), coalesce(binding, ''), coalesce(traceparent, ''), namespace,
       r_found, ` + claimedResourceCols + `
  FROM claim_tasks($1, $2, $3, $4, $5, $6, $7)`

// claimedResourceCols are claim_tasks' r_* columns in resourceCols' order,
// read the way resourceCols reads them (resourceScan); a row without a
// resource (r_found false) has zero values instead of NULLs, so it scans.
const claimedResourceCols = `resource_id, coalesce(r_kind, ''), coalesce(r_kind_version, 0), coalesce(r_name, ''),
       coalesce(r_labels, '{}'), coalesce(r_spec, '{}'), r_status, r_owner_id, coalesce(r_provider_config_ref, ''),
       coalesce(r_generation, 0), coalesce(r_synced_gen, 0), coalesce(r_health_ok, false), coalesce(r_failure_gen, 0),
       coalesce(r_phase, ''), coalesce(r_last_error, ''), coalesce(r_created_at, 'epoch'), coalesce(r_updated_at, 'epoch'),
       coalesce(r_resource_version, 0)`

// TaskClaim claims up to p.Limit pending tasks, bumping each one's
// claim_epoch: work first, then reactor deliveries if the batch has room.
// Per-kind caps (kind_config.max_inflight) and per-namespace caps
// (namespaces.max_in_flight) hold across all claimers, and the namespaces
// with claimable tasks share the batch (claims.sql).
func (e *Engine) TaskClaim(ctx context.Context, p TaskClaimParams) ([]model.Task, error) {
	lease := int(p.Lease / time.Second)
	if lease < 1 {
		lease = 1
	}
	var pairs, own any
	if p.Pairs != nil {
		pairs = p.Pairs
	}
	if len(p.Own) > 0 {
		own = p.Own
	}
	tasks, err := pgrun.Collect(ctx, e.pool, scanClaimed, taskClaimSQL, p.Claimer, p.Lo, p.Hi, pairs, own, p.Limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}

// scanClaimed reads a row of taskClaimSQL. Scanned by hand on purpose:
// TaskClaim is the dispatch hot path, and RowToStructByName would cost a
// reflection walk and a column-name key per row; model.Task also carries no
// db tags (control/model is shared wire vocabulary, not a row type).
func scanClaimed(r pgx.CollectableRow) (model.Task, error) {
	var (
		t        model.Task
		emits    int32
		kv       int16
		deadline *time.Time
		found    bool
		res      resourceScan
	)
	dest := make([]any, 0, 36) // taskClaimSQL's columns, one allocation
	dest = append(dest, &t.ID, &t.Shard, &t.ResourceID, &t.Type, &t.Trigger, &t.Reaction, &emits,
		&t.Kind, &kv, &t.Generation, &t.ClaimEpoch, &t.Attempts, &deadline, &t.Transition, &t.Binding, &t.TraceParent, &t.Namespace,
		&found)
	err := r.Scan(res.dest(dest)...)
	t.Emits = model.OutcomeMask(emits)
	t.KindVersion = int(kv)
	if deadline != nil {
		t.Deadline = *deadline
	}
	if found {
		rs := res.resource()
		t.Resource = &rs
	}
	return t, err
}

// TaskReleaseParams says which claimed tasks TaskRelease gives back, and
// how.
type TaskReleaseParams struct {
	Tasks []model.Task
	// Delay is how long the tasks wait before they are claimable again.
	Delay time.Duration
	// Reason is recorded as each task's last error.
	Reason string
}

// TaskRelease gives claimed tasks back without burning an attempt; they are
// claimable again after p.Delay.
func (e *Engine) TaskRelease(ctx context.Context, p TaskReleaseParams) error {
	ids, shards, claimEpochs := taskKeys(p.Tasks)
	_, err := e.pool.Exec(ctx, `SELECT release_tasks($1, $2, $3, $4, $5)`, ids, shards, claimEpochs, int(p.Delay/time.Millisecond), p.Reason)
	if err != nil {
		return fmt.Errorf("release tasks: %w", err)
	}
	return nil
}

// LeaseExtend renews the leases of tasks still held and returns the IDs of
// those it renewed; a missing ID was superseded.
func (e *Engine) LeaseExtend(ctx context.Context, tasks []model.Task, lease time.Duration) (map[string]bool, error) {
	ids, shards, claimEpochs := taskKeys(tasks)
	held, err := pgrun.Collect(ctx, e.pool, pgx.RowTo[string], `SELECT task_id FROM extend_leases($1, $2, $3, $4)`,
		ids, shards, claimEpochs, max(int(lease/time.Second), 1))
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	out := make(map[string]bool, len(held))
	for _, id := range held {
		out[id] = true
	}
	return out, nil
}

// PendingCount is how many tasks of one (kind, kind_version) wait to be
// claimed, how many are claimed, and how long the one waiting longest has
// been claimable.
type PendingCount struct {
	Kind        string `db:"kind"`
	KindVersion int    `db:"kind_version"`
	Pending     int    `db:"pending"`
	// Claimed is how many tasks are claimed: delivered or about to be,
	// their outcomes not yet recorded.
	Claimed int `db:"claimed"`
	// OldestSeconds is the time since the oldest pending task's not_before
	// passed (0 when every pending task still backs off).
	OldestSeconds float64 `db:"oldest_seconds"`
}

// taskCountPendingSQL aggregates the pending tasks over the pending-by-kind
// index and the claimed ones over the leased index (a claimed row is read
// from the table for its kind, but there are only as many as dispatch
// holds), then joins the two per kind.
const taskCountPendingSQL = `WITH p AS (
  SELECT kind, kind_version, count(*)::int AS pending,
         coalesce(extract(epoch FROM now() - min(not_before) FILTER (WHERE not_before <= now())), 0)::float8 AS oldest_seconds
    FROM work_queue WHERE shard_id BETWEEN $1 AND $2 AND state = 'pending' GROUP BY 1, 2),
c AS (
  SELECT kind, kind_version, count(*)::int AS claimed
    FROM work_queue WHERE shard_id BETWEEN $1 AND $2 AND state = 'claimed' GROUP BY 1, 2)
SELECT kind, kind_version::int AS kind_version, coalesce(pending, 0) AS pending, coalesce(claimed, 0) AS claimed,
       coalesce(oldest_seconds, 0)::float8 AS oldest_seconds
  FROM p FULL JOIN c USING (kind, kind_version) ORDER BY 1, 2`

// TaskCountPending counts pending and claimed tasks per (kind,
// kind_version) in the shard range [lo, hi] and finds the oldest claimable
// one: one pass over the pending-by-kind partial index, whose columns
// (kind, kind_version, shard_id, not_before) answer it without the table,
// and one over the claimed rows. It is for a periodic gauge, never the hot
// path.
func (e *Engine) TaskCountPending(ctx context.Context, lo, hi int) ([]PendingCount, error) {
	out, err := pgrun.Collect(ctx, e.pool, pgx.RowToStructByName[PendingCount], taskCountPendingSQL, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	return out, nil
}
