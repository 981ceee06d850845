package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one entry of a resource's event log.
type Event struct {
	ID         int64     `json:"id" db:"id"`
	At         time.Time `json:"at" db:"at"`
	Type       string    `json:"type" db:"type"`
	Generation *int64    `json:"generation,omitempty" db:"generation"`
	Message    string    `json:"message,omitempty" db:"message"`
}

// EventsParams selects one page of a resource's event log.
type EventsParams struct {
	// ResourceID is the resource whose events are listed.
	ResourceID string
	// Before is the id cursor: only events older than it are listed; 0
	// starts from the newest.
	Before int64
	// Limit is the page size.
	Limit int
}

// Events returns the resource's events, newest first, before the id cursor.
func (s *Store) Events(ctx context.Context, p EventsParams) ([]Event, error) {
	rows, err := s.reader(ctx).Query(ctx, `SELECT id, at, type, generation, message FROM resource_events
		WHERE resource_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, p.ResourceID, p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Event])
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}
