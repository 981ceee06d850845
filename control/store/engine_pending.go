package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PendingCount is how many tasks of one (kind, kind_version) wait to be
// claimed.
type PendingCount struct {
	Kind        string
	KindVersion int
	Pending     int
}

// PendingTaskCounts counts pending tasks per (kind, kind_version) in the
// shard range [lo, hi], through the pending partial index. It is for a
// periodic gauge, never the hot path.
func (s *Store) PendingTaskCounts(ctx context.Context, lo, hi int) ([]PendingCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, kind_version::int, count(*)::int FROM work_queue
		WHERE shard_id BETWEEN $1 AND $2 AND state = 'pending' GROUP BY 1, 2 ORDER BY 1, 2`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingCount, error) {
		var c PendingCount
		err := r.Scan(&c.Kind, &c.KindVersion, &c.Pending)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	return out, nil
}
