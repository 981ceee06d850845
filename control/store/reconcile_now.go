package store

import (
	"context"
	"fmt"

	"github.com/convergeplane/converge/internal/pgrun"
)

// ReconcileNow asks for an immediate reconcile; see reconcile_now().
// It returns a *ConflictError when the resource is frozen or being deleted.
func (s *Store) ReconcileNow(ctx context.Context, id string) error {
	var ok bool
	if err := pgrun.RetryDeadlock(func() error { return s.pool.QueryRow(ctx, `SELECT reconcile_now($1)`, id).Scan(&ok) }); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if !ok {
		return &ConflictError{Message: "the resource is orphaned or quarantined; it cannot be reconciled now"}
	}
	return nil
}
