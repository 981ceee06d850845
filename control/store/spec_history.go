package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// scanRevision scans specHistoryCols, then the row's further columns into
// tail.
func scanRevision(row pgx.Row, tail ...any) (SpecRevision, error) {
	var r SpecRevision
	err := row.Scan(append([]any{&r.Revision, &r.Generation, &r.KindVersion, &r.Spec, &r.Labels, &r.AppliedAt}, tail...)...)
	return r, err
}

// SpecHistoryParams selects and pages SpecHistory.
type SpecHistoryParams struct {
	// Namespace is the resource's namespace; "" is DefaultNamespace.
	Namespace  string
	Kind, Name string
	// MaxBytes ends a page early, as ListResourcesParams.MaxBytes does; a
	// page has no other limit.
	MaxBytes int
	// Cursor continues after the page that returned it.
	Cursor string
}

// SpecHistory pages through the kept revisions of (kind, name), newest
// first: as many as MaxBytes holds (see collectPage).
func (s *Store) SpecHistory(ctx context.Context, p SpecHistoryParams) (Page[SpecRevision], error) {
	budget := pageBudget(p.MaxBytes)
	rid, err := s.ResourceID(ctx, p.Namespace, p.Kind, p.Name)
	if err != nil {
		return Page[SpecRevision]{}, err
	}
	var (
		qa  queryArgs
		arg = qa.add
	)
	q := `SELECT ` + specHistoryCols + `, pg_column_size(h.spec) + pg_column_size(h.labels) AS row_size
  FROM resource_spec_history h WHERE h.resource_id = ` + arg(rid)
	if p.Cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(p.Cursor)
		before, perr := strconv.ParseInt(string(b), 10, 64)
		if err != nil || perr != nil {
			return Page[SpecRevision]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q += ` AND h.revision < ` + arg(before)
	}
	rows, err := s.reader(ctx).Query(ctx, pageSQL(q, "revision DESC", "ALL", arg(budget)), qa...)
	if err != nil {
		return Page[SpecRevision]{}, fmt.Errorf("spec history of %s/%s: %w", p.Kind, p.Name, err)
	}
	revs, more, err := collectPage(rows, budget, func(row pgx.CollectableRow) (SpecRevision, bool, error) {
		var next bool
		r, err := scanRevision(row, nil, nil, &next)
		return r, next, err
	})
	if err != nil {
		return Page[SpecRevision]{}, fmt.Errorf("spec history of %s/%s: %w", p.Kind, p.Name, err)
	}
	page := Page[SpecRevision]{Items: revs}
	if more {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(revs[len(revs)-1].Revision, 10)))
	}
	if page.Items == nil {
		page.Items = []SpecRevision{}
	}
	return page, nil
}

// rollbackTargetSQL reads the resource's current version, labels and
// provider config, whether it is being deleted, and the revision's spec.
const rollbackTargetSQL = `SELECT r.kind_version::int, r.labels, coalesce(r.provider_config_ref, ''),
       r.deletion_requested_at IS NOT NULL, h.spec
  FROM resources r
  LEFT JOIN resource_spec_history h ON h.resource_id = r.id AND h.revision = $3
 WHERE r.namespace = $4 AND r.kind = $1 AND r.name = $2`

// Rollback re-applies the spec of revision rev of (kind, name) of
// namespace ns ("" is DefaultNamespace) through
// ApplyResource, keeping its current kind version, labels and provider
// config: validated against the current schema, a new generation, itself
// recorded as a new revision. A spec equal to the current one changes
// nothing. Errors: *NotFoundError for an unknown resource or revision
// (Location "revision"), *ConflictError while it is being deleted, and
// those of ApplyResource.
func (s *Store) Rollback(ctx context.Context, ns, kind, name string, rev int64) (model.Resource, ApplyResult, error) {
	ns = orDefault(ns)
	var (
		p        = ApplyResourceParams{Namespace: ns, Kind: kind, Name: name}
		deleting bool
		spec     *json.RawMessage
	)
	err := s.pool.QueryRow(ctx, rollbackTargetSQL, kind, name, rev, ns).
		Scan(&p.KindVersion, &p.Labels, &p.ProviderConfigRef, &deleting, &spec)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return model.Resource{}, "", resourceNotFound(ns, kind, name)
	case err != nil:
		return model.Resource{}, "", fmt.Errorf("read revision %d of %s: %w", rev, qualified(ns, kind, name), err)
	case deleting:
		return model.Resource{}, "", errDeleting(ns, kind, name)
	case spec == nil:
		return model.Resource{}, "", &NotFoundError{Location: "revision",
			Message: fmt.Sprintf("%s has no spec revision %d", qualified(ns, kind, name), rev)}
	}
	p.Spec = *spec
	return s.ApplyResource(ctx, p)
}
