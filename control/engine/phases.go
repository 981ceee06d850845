package engine

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// PhaseCount is how many resources of one (kind, kind_version) are in one
// phase.
type PhaseCount struct {
	Kind        string `db:"kind"`
	KindVersion int    `db:"kind_version"`
	Phase       string `db:"phase"`
	Resources   int    `db:"resources"`
}

// ResourceCountByPhase counts every resource by kind, kind_version and
// phase, under a statement timeout. No index holds the phase (one would
// make the drain's updates non-HOT), so the count reads the whole table:
// it is for one pod's periodic gauge, never a request.
func (e *Engine) ResourceCountByPhase(ctx context.Context, timeout time.Duration) ([]PhaseCount, error) {
	var out []PhaseCount
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT kind, kind_version::int AS kind_version, phase, count(*)::int AS resources
  FROM resources GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByName[PhaseCount])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("count resources by phase: %w", err)
	}
	return out, nil
}
