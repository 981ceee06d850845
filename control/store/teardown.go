package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Teardown is where a resource's deletion stands: shown in its detail while
// it is Deleting.
type Teardown struct {
	RequestedAt time.Time `json:"requested_at" doc:"When its deletion was requested (for it, or for a resource above it)."`
	Finalizers  []string  `json:"finalizers" doc:"The finalizers its kind's teardown must clear before the row is removed; empty = removed without a request."`
	// Remaining counts the resources still beneath it: everything it owns
	// and everything that depends on any of it, transitively.
	Remaining int `json:"remaining" doc:"Resources still beneath it (owned, or depending on it, transitively); it is torn down when none remains."`
	// BlockedBy is the nearest resource at or beneath it whose teardown is
	// failing, if any: the one holding the rest up.
	BlockedBy *TeardownBlocker `json:"blocked_by,omitempty" doc:"The nearest resource, at or beneath it, whose teardown is failing."`
	// Reason says in a sentence what it waits for.
	Reason string `json:"reason"`
}

// TeardownBlocker is a resource whose teardown is failing.
type TeardownBlocker struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Error string `json:"error"`
	// Terminal: it will not be retried until an operator asks
	// (POST .../reconcile).
	Terminal bool `json:"terminal"`
}

// teardownSQL walks what is beneath a Deleting resource (the same walk as
// request_deletion) and picks the nearest node whose teardown failed.
const teardownSQL = `WITH RECURSIVE below(id, depth) AS (
    SELECT $1::uuid, 0
    UNION
    SELECT x.id, b.depth + 1 FROM below b CROSS JOIN LATERAL (
        SELECT c.id FROM resources c WHERE c.owner_id = b.id
        UNION ALL
        SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = b.id) x
    WHERE b.depth < 64
), n AS (
    SELECT DISTINCT ON (id) id, depth FROM below ORDER BY id, depth
)
SELECT r.deletion_requested_at, r.finalizers,
       (SELECT count(*) FROM n WHERE n.depth > 0)::int,
       f.kind, f.name, f.last_error, f.failure_terminal
  FROM resources r
  LEFT JOIN LATERAL (
       SELECT x.kind, x.name, x.last_error, x.failure_terminal FROM n JOIN resources x ON x.id = n.id
        WHERE x.last_error IS NOT NULL AND x.failure_gen = x.generation
        ORDER BY n.depth, x.updated_at LIMIT 1) f ON true
 WHERE r.id = $1 AND r.deletion_requested_at IS NOT NULL`

// ResourceTeardown returns where the deletion of resource id stands, or nil
// if it is not being deleted.
func (s *Store) ResourceTeardown(ctx context.Context, id string) (*Teardown, error) {
	var (
		t                   Teardown
		kind, name, lastErr *string
		terminal            *bool
	)
	err := s.pool.QueryRow(ctx, teardownSQL, id).Scan(&t.RequestedAt, &t.Finalizers, &t.Remaining, &kind, &name, &lastErr, &terminal)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resource teardown: %w", err)
	}
	if kind != nil {
		t.BlockedBy = &TeardownBlocker{Kind: *kind, Name: *name, Error: *lastErr, Terminal: *terminal}
	}
	switch {
	case t.BlockedBy != nil && t.BlockedBy.Terminal:
		t.Reason = fmt.Sprintf("blocked: the teardown of %s/%s failed terminally (retry with POST .../reconcile on it): %s",
			t.BlockedBy.Kind, t.BlockedBy.Name, t.BlockedBy.Error)
	case t.BlockedBy != nil:
		t.Reason = fmt.Sprintf("blocked: the teardown of %s/%s keeps failing and is retried with backoff: %s",
			t.BlockedBy.Kind, t.BlockedBy.Name, t.BlockedBy.Error)
	case t.Remaining == 1:
		t.Reason = "waiting for 1 resource beneath it to be torn down first"
	case t.Remaining > 0:
		t.Reason = fmt.Sprintf("waiting for %d resources beneath it to be torn down first", t.Remaining)
	case len(t.Finalizers) > 0:
		t.Reason = "its teardown (the deleteRequested reaction) is running"
	default:
		t.Reason = "being removed"
	}
	return &t, nil
}
