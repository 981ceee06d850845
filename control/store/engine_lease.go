package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
)

// Release gives claimed tasks back without burning an attempt; they are
// claimable again after delay.
func (s *Store) Release(ctx context.Context, tasks []model.Task, delay time.Duration, reason string) error {
	ids, shards, epochs := taskKeys(tasks)
	_, err := s.pool.Exec(ctx, `SELECT release_tasks($1, $2, $3, $4, $5)`, ids, shards, epochs, int(delay/time.Millisecond), reason)
	if err != nil {
		return fmt.Errorf("release tasks: %w", err)
	}
	return nil
}

// ExtendLeases renews the leases of tasks still held and returns the IDs of
// those it renewed; a missing ID was superseded.
func (s *Store) ExtendLeases(ctx context.Context, tasks []model.Task, lease time.Duration) (map[string]bool, error) {
	ids, shards, epochs := taskKeys(tasks)
	rows, err := s.pool.Query(ctx, `SELECT task_id FROM extend_leases($1, $2, $3, $4)`, ids, shards, epochs, max(int(lease/time.Second), 1))
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	out := make(map[string]bool, len(held))
	for _, id := range held {
		out[id] = true
	}
	return out, nil
}

// taskKeys returns tasks' keys as parameters: the IDs as a uuid[] literal.
func taskKeys(tasks []model.Task) (string, []int16, []int64) {
	ids := make([]string, len(tasks))
	shards := make([]int16, len(tasks))
	epochs := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i], shards[i], epochs[i] = t.ID, t.Shard, t.Epoch
	}
	return uuidArray(ids), shards, epochs
}
