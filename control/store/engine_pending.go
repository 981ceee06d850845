package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PendingCount is how many tasks of one (kind, kind_version) wait to be
// claimed.
type PendingCount struct {
	Kind        string `db:"kind"`
	KindVersion int    `db:"kind_version"`
	Pending     int    `db:"pending"`
}

// PendingTaskCounts counts pending tasks per (kind, kind_version) in the
// shard range [lo, hi], through the pending partial index. It is for a
// periodic gauge, never the hot path.
func (s *Store) PendingTaskCounts(ctx context.Context, lo, hi int) ([]PendingCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, kind_version::int AS kind_version, count(*)::int AS pending FROM work_queue
		WHERE shard_id BETWEEN $1 AND $2 AND state = 'pending' GROUP BY 1, 2 ORDER BY 1, 2`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[PendingCount])
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	return out, nil
}
