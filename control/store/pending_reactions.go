package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// PendingReaction is a reactor delivery not acked yet: what the resource
// detail shows under pending_reactions.
type PendingReaction struct {
	Binding    string    `json:"binding" db:"binding" doc:"The reactor binding that fired."`
	Transition string    `json:"transition" db:"transition" doc:"The lifecycle edge: created, synced, degraded, failed or deleted."`
	Generation int64     `json:"generation" db:"generation" doc:"The resource's generation at the transition."`
	Attempts   int       `json:"attempts" db:"attempts" doc:"Failed deliveries so far; each failure is retried with backoff."`
	LastError  string    `json:"last_error,omitempty" db:"last_error" doc:"Why the last delivery failed or was given back."`
	Claimed    bool      `json:"claimed" db:"claimed" doc:"A dispatcher holds it (its lease is live): being delivered now."`
	NotBefore  time.Time `json:"not_before" db:"not_before" doc:"Not delivered again before this (the retry backoff)."`
}

const pendingReactionsSQL = `SELECT binding_name AS binding, transition, generation, attempts,
       coalesce(last_error, '') AS last_error, (claimed_by IS NOT NULL AND lease_until > now()) AS claimed, not_before
  FROM lifecycle_outbox
 WHERE shard_id = shard_of($1::uuid) AND resource_id = $1::uuid
 ORDER BY created_at, binding_name`

// PendingReactions lists the resource's reactor deliveries not acked yet,
// oldest first. A delivery is acked (and leaves this list) only once its
// reactor succeeded.
func (s *Store) PendingReactions(ctx context.Context, resourceID string) ([]PendingReaction, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[PendingReaction], pendingReactionsSQL, resourceID)
	if err != nil {
		return nil, fmt.Errorf("pending reactions: %w", err)
	}
	return out, nil
}
