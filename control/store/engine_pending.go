package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PendingCount is how many tasks of one (kind, kind_version) wait to be
// claimed, and how long the one waiting longest has been claimable.
type PendingCount struct {
	Kind        string `db:"kind"`
	KindVersion int    `db:"kind_version"`
	Pending     int    `db:"pending"`
	// OldestSeconds is the time since the oldest pending task's not_before
	// passed (0 when every pending task still backs off).
	OldestSeconds float64 `db:"oldest_seconds"`
}

// PendingTaskCounts counts pending tasks per (kind, kind_version) in the
// shard range [lo, hi] and finds the oldest claimable one, in one pass over
// the pending-by-kind partial index, whose columns (kind, kind_version,
// shard_id, not_before) answer it without the table. It is for a periodic
// gauge, never the hot path.
func (s *Store) PendingTaskCounts(ctx context.Context, lo, hi int) ([]PendingCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, kind_version::int AS kind_version, count(*)::int AS pending,
			coalesce(extract(epoch FROM now() - min(not_before) FILTER (WHERE not_before <= now())), 0)::float8 AS oldest_seconds
		FROM work_queue WHERE shard_id BETWEEN $1 AND $2 AND state = 'pending' GROUP BY 1, 2 ORDER BY 1, 2`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[PendingCount])
	if err != nil {
		return nil, fmt.Errorf("count pending tasks: %w", err)
	}
	return out, nil
}
