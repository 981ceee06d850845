package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
)

// SpecRevision is one spec a root resource was applied with: each apply
// that changes its generation records the next revision (ApplyResource).
type SpecRevision struct {
	Revision    int64             `json:"revision"`
	Generation  int64             `json:"generation"`
	KindVersion int               `json:"kind_version"`
	Spec        json.RawMessage   `json:"spec"`
	Labels      map[string]string `json:"labels"`
	AppliedAt   time.Time         `json:"applied_at"`
}

const specHistoryCols = `h.revision, h.generation, h.kind_version::int, h.spec, h.labels, h.applied_at`

func scanRevision(row pgx.Row) (SpecRevision, error) {
	var r SpecRevision
	err := row.Scan(&r.Revision, &r.Generation, &r.KindVersion, &r.Spec, &r.Labels, &r.AppliedAt)
	return r, err
}

// SpecHistory returns the kept revisions of (kind, name), newest first.
func (s *Store) SpecHistory(ctx context.Context, kind, name string) ([]SpecRevision, error) {
	rid, err := s.ResourceID(ctx, kind, name)
	if err != nil {
		return nil, err
	}
	rows, err := s.reader(ctx).Query(ctx, `SELECT `+specHistoryCols+` FROM resource_spec_history h
		WHERE h.resource_id = $1 ORDER BY h.revision DESC`, rid)
	if err != nil {
		return nil, fmt.Errorf("spec history of %s/%s: %w", kind, name, err)
	}
	revs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpecRevision, error) { return scanRevision(r) })
	if err != nil {
		return nil, fmt.Errorf("spec history of %s/%s: %w", kind, name, err)
	}
	return revs, nil
}

// rollbackTargetSQL reads the resource's current version, labels and
// provider config, whether it is being deleted, and the revision's spec.
const rollbackTargetSQL = `SELECT r.kind_version::int, r.labels, coalesce(r.provider_config_ref, ''),
       r.deletion_requested_at IS NOT NULL, h.spec
  FROM resources r
  LEFT JOIN resource_spec_history h ON h.resource_id = r.id AND h.revision = $3
 WHERE r.kind = $1 AND r.name = $2`

// Rollback re-applies the spec of revision rev of (kind, name) through
// ApplyResource, keeping its current kind version, labels and provider
// config: validated against the current schema, a new generation, itself
// recorded as a new revision. A spec equal to the current one changes
// nothing. Errors: *NotFoundError for an unknown resource or revision
// (Location "revision"), *ConflictError while it is being deleted, and
// those of ApplyResource.
func (s *Store) Rollback(ctx context.Context, kind, name string, rev int64) (model.Resource, ApplyResult, error) {
	var (
		p        = ApplyResourceParams{Kind: kind, Name: name}
		deleting bool
		spec     *json.RawMessage
	)
	err := s.pool.QueryRow(ctx, rollbackTargetSQL, kind, name, rev).
		Scan(&p.KindVersion, &p.Labels, &p.ProviderConfigRef, &deleting, &spec)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return model.Resource{}, "", resourceNotFound(kind, name)
	case err != nil:
		return model.Resource{}, "", fmt.Errorf("read revision %d of %s/%s: %w", rev, kind, name, err)
	case deleting:
		return model.Resource{}, "", errDeleting(kind, name)
	case spec == nil:
		return model.Resource{}, "", &NotFoundError{Location: "revision",
			Message: fmt.Sprintf("%s/%s has no spec revision %d", kind, name, rev)}
	}
	p.Spec = *spec
	return s.ApplyResource(ctx, p)
}
