package engine

import (
	"context"
	"fmt"
)

// EventPruneFromEnd is the SinceID that starts EventPrune at the end of the
// log, for a reaper that has no watermark yet.
const EventPruneFromEnd int64 = -1

// EventPruneParams selects one window of the event log for EventPrune.
type EventPruneParams struct {
	// Lo and Hi bound the shard range, inclusive.
	Lo, Hi int
	// SinceID is the watermark the previous call returned, or
	// EventPruneFromEnd.
	SinceID int64
	// Keep is how many of its newest events each resource keeps.
	Keep int
	// Limit is the window's width in event ids.
	Limit int
}

// EventPrune keeps the newest p.Keep events of each resource in shards
// [p.Lo, p.Hi] that logged an event with an id in (p.SinceID,
// p.SinceID+p.Limit]. It returns the watermark to pass next time (the
// window's end, at most the last id handed out; below p.SinceID+p.Limit,
// the log is caught up) and the last id handed out, to measure the
// watermark's lag against.
func (e *Engine) EventPrune(ctx context.Context, p EventPruneParams) (watermark, lastID int64, err error) {
	if err := e.pool.QueryRow(ctx, `SELECT watermark, last_id FROM prune_resource_events($1, $2, $3, $4, $5)`,
		p.Lo, p.Hi, p.SinceID, p.Keep, p.Limit).Scan(&watermark, &lastID); err != nil {
		return p.SinceID, 0, fmt.Errorf("prune events: %w", err)
	}
	return watermark, lastID, nil
}
