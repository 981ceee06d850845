package engine

import (
	"context"
	"fmt"
	"time"
)

// ResyncKind is a kind version that opted into resync, with its interval.
type ResyncKind struct {
	Kind        string
	KindVersion int
	Interval    time.Duration
}

// ResyncKindList lists the kind versions with resync_interval_secs > 0,
// read fresh each call so that enabling or re-tuning resync is live.
func (e *Engine) ResyncKindList(ctx context.Context) ([]ResyncKind, error) {
	rows, err := e.pool.Query(ctx, `SELECT kind, kind_version, resync_interval_secs FROM kind_config
		WHERE resync_interval_secs > 0 ORDER BY kind, kind_version`)
	if err != nil {
		return nil, fmt.Errorf("list resync kinds: %w", err)
	}
	defer rows.Close()
	var out []ResyncKind
	for rows.Next() {
		var (
			k        ResyncKind
			kv       int16
			interval int32
		)
		if err := rows.Scan(&k.Kind, &kv, &interval); err != nil {
			return nil, fmt.Errorf("list resync kinds: %w", err)
		}
		k.KindVersion, k.Interval = int(kv), time.Duration(interval)*time.Second
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list resync kinds: %w", err)
	}
	return out, nil
}

// ResyncSchedule re-pends up to p.Limit settled resources of k in
// [p.Lo, p.Hi] whose last task is older than the kind's interval (with a
// per-resource jitter), without a generation bump.
func (e *Engine) ResyncSchedule(ctx context.Context, k ResyncKind, p ReapParams) (int, error) {
	return e.scalarInt(ctx, "schedule resyncs", `SELECT schedule_resyncs($1, $2, $3, $4, $5)`,
		k.Kind, k.KindVersion, p.Lo, p.Hi, p.Limit)
}
