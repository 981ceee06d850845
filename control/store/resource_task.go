package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TaskInfo is the live state of a resource's reconcile task: what the
// resource detail shows under "current claim".
type TaskInfo struct {
	TaskID      string     `json:"task_id" db:"task_id"`
	TaskType    string     `json:"task_type" db:"task_type"` // reconcile, or delete while the resource is torn down
	State       string     `json:"state" db:"state"`         // pending, claimed, or completed (its composition awaits the drain)
	Trigger     string     `json:"trigger" db:"trigger"`
	Reaction    string     `json:"reaction,omitempty" db:"reaction"`
	Generation  int64      `json:"generation" db:"generation"`
	Attempts    int        `json:"attempts" db:"attempts"`
	ClaimEpoch  int64      `json:"claim_epoch" db:"claim_epoch"`
	ClaimedBy   string     `json:"claimed_by,omitempty" db:"claimed_by"`
	ClaimedAt   *time.Time `json:"claimed_at,omitempty" db:"claimed_at"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty" db:"lease_until"`
	Deadline    *time.Time `json:"deadline,omitempty" db:"deadline"`
	NotBefore   time.Time  `json:"not_before" db:"not_before"`
	EnqueuedAt  time.Time  `json:"enqueued_at" db:"enqueued_at"`
	LastError   string     `json:"last_error,omitempty" db:"last_error"`
	Kind        string     `json:"kind" db:"kind"`
	KindVersion int        `json:"kind_version" db:"kind_version"`
}

const workQueueResourceTaskSQL = `SELECT w.task_id, w.task_type,
       CASE WHEN w.state = 'claimed' AND EXISTS (SELECT 1 FROM work_outbox o
                 WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
            THEN 'completed' ELSE w.state END AS state,
       w.trigger, coalesce(w.reaction, '') AS reaction, w.generation, w.attempts,
       w.claim_epoch, coalesce(w.claimed_by, '') AS claimed_by, w.claimed_at, w.lease_until, w.deadline, w.not_before,
       w.enqueued_at, coalesce(w.last_error, '') AS last_error, w.kind, w.kind_version
  FROM work_queue w JOIN resources r ON r.shard_id = w.shard_id AND r.id = w.resource_id
 WHERE r.id = $1 AND w.task_type IN ('reconcile', 'delete')
 ORDER BY w.task_type = 'delete' DESC
 LIMIT 1`

// ResourceTask returns the resource's delete task while it is torn down,
// else its reconcile task, or nil if none is queued (a task is deleted once
// its outcome is applied).
func (s *Store) ResourceTask(ctx context.Context, resourceID string) (*TaskInfo, error) {
	rows, err := s.pool.Query(ctx, workQueueResourceTaskSQL, resourceID)
	if err != nil {
		return nil, fmt.Errorf("resource task: %w", err)
	}
	t, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[TaskInfo])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resource task: %w", err)
	}
	return t, nil
}
