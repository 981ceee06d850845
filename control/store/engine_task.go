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
	TaskID      string     `json:"task_id"`
	State       string     `json:"state"` // pending, claimed, or completed (its outcome awaits the drain)
	Trigger     string     `json:"trigger"`
	Reaction    string     `json:"reaction,omitempty"`
	Generation  int64      `json:"generation"`
	Attempts    int        `json:"attempts"`
	ClaimEpoch  int64      `json:"claim_epoch"`
	ClaimedBy   string     `json:"claimed_by,omitempty"`
	ClaimedAt   *time.Time `json:"claimed_at,omitempty"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	NotBefore   time.Time  `json:"not_before"`
	EnqueuedAt  time.Time  `json:"enqueued_at"`
	LastError   string     `json:"last_error,omitempty"`
	Kind        string     `json:"kind"`
	KindVersion int        `json:"kind_version"`
}

// ResourceTask returns the resource's reconcile task, or nil if none is
// queued (the drain deletes a task once its outcome is applied).
func (s *Store) ResourceTask(ctx context.Context, resourceID string) (*TaskInfo, error) {
	var (
		t  TaskInfo
		kv int16
	)
	err := s.pool.QueryRow(ctx, `SELECT w.task_id,
			CASE WHEN w.state = 'claimed' AND EXISTS (SELECT 1 FROM work_outbox o
			          WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)
			     THEN 'completed' ELSE w.state END,
			w.trigger, coalesce(w.reaction, ''), w.generation, w.attempts,
			w.claim_epoch, coalesce(w.claimed_by, ''), w.claimed_at, w.lease_until, w.deadline, w.not_before,
			w.enqueued_at, coalesce(w.last_error, ''), w.kind, w.kind_version
		  FROM work_queue w JOIN resources r ON r.shard_id = w.shard_id AND r.id = w.resource_id
		 WHERE r.id = $1 AND w.task_type = 'reconcile'`, resourceID).
		Scan(&t.TaskID, &t.State, &t.Trigger, &t.Reaction, &t.Generation, &t.Attempts, &t.ClaimEpoch, &t.ClaimedBy,
			&t.ClaimedAt, &t.LeaseUntil, &t.Deadline, &t.NotBefore, &t.EnqueuedAt, &t.LastError, &t.Kind, &kv)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resource task: %w", err)
	}
	t.KindVersion = int(kv)
	return &t, nil
}
