package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
)

// ClaimParams selects what Claim may take.
type ClaimParams struct {
	// Claimer identifies the claiming process (stamped as claimed_by).
	Claimer string
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// Pairs lists the "kind/version" pairs the caller can serve; nil means
	// every pair (an in-process executor that serves all kinds).
	Pairs []string
	// Limit caps the batch.
	Limit int
	// Lease is how long the claim holds without renewal before the reaper
	// may reclaim it.
	Lease time.Duration
}

// A claim writes no event: the claim's time, epoch and claimer are on the
// task while it runs and on the resource once applied (issue #13).
const claimSQL = `SELECT task_id, shard_id, resource_id, task_type, trigger, coalesce(reaction, ''), emits,
       kind, kind_version, generation, claim_epoch, attempts, deadline,
       coalesce(transition, ''), coalesce(binding, '')
  FROM claim_tasks($1, $2, $3, $4, $5, $6)`

// Claim claims up to p.Limit pending tasks, bumping each one's claim_epoch:
// work first, then reactor deliveries if the batch has room. Per-kind caps
// (kind_config.max_inflight) hold across all claimers.
func (s *Store) Claim(ctx context.Context, p ClaimParams) ([]model.Task, error) {
	lease := int(p.Lease / time.Second)
	if lease < 1 {
		lease = 1
	}
	var pairs any
	if p.Pairs != nil {
		pairs = p.Pairs
	}
	rows, err := s.pool.Query(ctx, claimSQL, p.Claimer, p.Lo, p.Hi, pairs, p.Limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	// Scanned by hand on purpose: Claim is the dispatch hot path, and
	// RowToStructByName would cost a reflection walk and a column-name key
	// per row; model.Task also carries no db tags (control/model is shared
	// wire vocabulary, not a row type).
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Task, error) {
		var (
			t        model.Task
			emits    int32
			kv       int16
			deadline *time.Time
		)
		err := r.Scan(&t.ID, &t.Shard, &t.ResourceID, &t.Type, &t.Trigger, &t.Reaction, &emits,
			&t.Kind, &kv, &t.Generation, &t.Epoch, &t.Attempts, &deadline, &t.Transition, &t.Binding)
		t.Emits = model.OutcomeMask(emits)
		t.KindVersion = int(kv)
		if deadline != nil {
			t.Deadline = *deadline
		}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}
