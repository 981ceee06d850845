package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
)

// AsyncState is what ExpireAsync found for one task.
type AsyncState string

// The async states.
const (
	// AsyncExpired: the lease had lapsed with no callback; the task was
	// completed with a transient error.
	AsyncExpired AsyncState = "expired"
	// AsyncHeld: still claimed at its epoch; a heartbeat moved the lease.
	AsyncHeld AsyncState = "held"
	// AsyncGone: completed by a callback, superseded, or removed.
	AsyncGone AsyncState = "gone"
)

// AsyncCheck is ExpireAsync's answer for one task.
type AsyncCheck struct {
	State AsyncState
	// LeaseUntil is the current lease end of a held task.
	LeaseUntil time.Time
}

// asyncRow is one row of expire_async_tasks(): a task it found.
type asyncRow struct {
	TaskID     string     `db:"task_id"`
	State      AsyncState `db:"state"`
	LeaseUntil *time.Time `db:"lease_until"`
}

// ExpireAsync ends the asynchronous deliveries among tasks (answered 202,
// awaiting a callback) whose lease lapsed: they are completed with a
// transient error carrying message, which burns an attempt, so a provider
// that never calls back is retried with backoff and eventually fails the
// resource (max_transient_attempts) instead of looping silently. The lease
// check and the completion hold the row lock, so a racing heartbeat or
// callback either wins cleanly or finds the task gone. The result is
// parallel to tasks.
func (s *Store) ExpireAsync(ctx context.Context, tasks []model.Task, message string) ([]AsyncCheck, error) {
	ids, shards, epochs := taskKeys(tasks)
	base, limit := s.retryMillis()
	var found []asyncRow
	// An expiry applies its failures as a completion does, so it can
	// deadlock as one can (CompleteBatch).
	err := retryDeadlock(func() error {
		rows, err := s.pool.Query(ctx, `SELECT task_id, state, lease_until FROM expire_async_tasks($1, $2, $3, $4, $5, $6)`,
			ids, shards, epochs, message, base, limit)
		if err != nil {
			return err
		}
		found, err = pgx.CollectRows(rows, pgx.RowToStructByName[asyncRow])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("expire async tasks: %w", err)
	}
	byID := make(map[string]AsyncCheck, len(found))
	for _, r := range found {
		c := AsyncCheck{State: r.State}
		if r.LeaseUntil != nil {
			c.LeaseUntil = *r.LeaseUntil
		}
		byID[r.TaskID] = c
	}
	out := make([]AsyncCheck, len(tasks))
	for i, t := range tasks {
		out[i] = byID[t.ID]
		if out[i].State == "" {
			out[i].State = AsyncGone
		}
	}
	return out, nil
}
