package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one entry of a resource's event log.
type Event struct {
	ID         int64     `json:"id"`
	At         time.Time `json:"at"`
	Type       string    `json:"type"`
	Generation *int64    `json:"generation,omitempty"`
	Message    string    `json:"message,omitempty"`
}

// Events returns the resource's events, newest first, before the id cursor
// (0 = from the newest).
func (s *Store) Events(ctx context.Context, id string, before int64, limit int) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, at, type, generation, message FROM resource_events
		WHERE resource_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, id, before, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Event])
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}
