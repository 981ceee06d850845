package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// Event is one entry of a resource's event log.
type Event struct {
	ID         int64     `json:"id" db:"id"`
	At         time.Time `json:"at" db:"at"`
	Type       string    `json:"type" db:"type"`
	Generation *int64    `json:"generation,omitempty" db:"generation"`
	Message    string    `json:"message,omitempty" db:"message"`
	// Actor is the subject of the request whose transaction logged it, or
	// ActorSystem for the engine's own.
	Actor string `json:"actor" db:"actor" doc:"Who caused it: the subject of the API request whose write logged it, or system for the engine's own (a delivery's outcome, a cascade, the reaper)."`
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
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[Event],
		`SELECT id, at, type, generation, message, coalesce(actor, '`+ActorSystem+`') AS actor FROM resource_events
		WHERE resource_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, p.ResourceID, p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}
