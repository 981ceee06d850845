package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/webhooksdk"
)

// ReactorBinding subscribes a reactor kind to a lifecycle transition of
// another kind: when a resource of WatchKind crosses Transition (and its
// labels contain LabelMatch), the engine runs Reactor's reactor reaction. It
// is the only place a transition is named.
type ReactorBinding struct {
	Name      string `json:"name" db:"name" doc:"Unique (across every namespace), operator-chosen handle."`
	Namespace string `json:"namespace" db:"namespace" doc:"The namespace the binding belongs to: it watches that namespace's resources only."`
	WatchKind string `json:"watch_kind" db:"watch_kind" doc:"The kind whose transitions fire the binding."`
	// WatchKindVersion limits the binding to one version of WatchKind; 0
	// watches every version.
	WatchKindVersion int                   `json:"watch_kind_version,omitempty" db:"watch_kind_version" doc:"Only this version of watch_kind fires it; omitted = every version."`
	Transition       webhooksdk.Transition `json:"transition" db:"transition" enum:"created,synced,degraded,failed,deleted" doc:"The lifecycle edge."`
	Reactor          string                `json:"reactor" db:"reactor" doc:"The reactor kind to run."`
	// ReactorVersion pins one version of Reactor; 0 leaves it unpinned.
	ReactorVersion int               `json:"reactor_version,omitempty" db:"reactor_version" doc:"Pin this version of the reactor; omitted = unpinned."`
	LabelMatch     map[string]string `json:"label_match" db:"label_match" doc:"The watched resource's labels must contain these; {} matches all."`
	Enabled        bool              `json:"enabled" db:"enabled" doc:"A disabled binding never fires."`
	CreatedAt      time.Time         `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt      time.Time         `json:"updated_at" db:"updated_at" readOnly:"true"`
	// ResourceVersion changes on every write of the binding.
	ResourceVersion int64 `json:"resource_version" db:"resource_version" doc:"Changes on every write of the binding; send it back (or If-Match) to make a write conditional on it."`
}

// PutReactorBindingParams is a binding as an operator declares it.
type PutReactorBindingParams struct {
	// Namespace is the binding's namespace; "" is DefaultNamespace.
	Namespace        string
	Name             string
	WatchKind        string
	WatchKindVersion int
	Transition       webhooksdk.Transition
	Reactor          string
	ReactorVersion   int
	LabelMatch       map[string]string
	Enabled          bool
	// Precondition makes the write conditional on the binding's version.
	Precondition Precondition
}

// bindingCols are the columns of a ReactorBinding, named for its db tags.
const bindingCols = `name, namespace, watch_kind, coalesce(watch_kind_version, 0)::int AS watch_kind_version, transition, reactor,
       coalesce(reactor_version, 0)::int AS reactor_version, label_match, enabled, created_at, updated_at, resource_version`

// rowToBinding scans bindingCols.
func rowToBinding(row pgx.CollectableRow) (ReactorBinding, error) {
	b, err := pgx.RowToStructByName[ReactorBinding](row)
	b.normalizeLabels()
	return b, err
}

// normalizeLabels shows an empty label selector as {}, never null.
func (b *ReactorBinding) normalizeLabels() {
	if b.LabelMatch == nil {
		b.LabelMatch = map[string]string{}
	}
}

// bindingApplied is a row of bindingUpsertSQL: the binding and what the
// write did.
type bindingApplied struct {
	ReactorBinding
	Result ApplyResult `db:"result"`
}

// bindingKind is a row of bindingKindsSQL.
type bindingKind struct {
	Kind        string `db:"kind"`
	KindVersion int    `db:"kind_version"`
	IsReactor   bool   `db:"is_reactor"`
}

const (
	// bindingKindsSQL reads the manifests a binding names, locked FOR SHARE
	// so neither can be deleted before the binding is written (deleting a
	// manifest checks for bindings after taking its own lock).
	bindingKindsSQL = `SELECT kind, kind_version::int, is_reactor FROM kind_manifest
 WHERE kind = $1 OR kind = $2 ORDER BY kind, kind_version FOR SHARE`
	bindingUpsertSQL = `WITH up AS (
    INSERT INTO reactor_bindings AS b (name, watch_kind, watch_kind_version, transition, reactor, reactor_version, label_match, enabled, namespace)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT (name) DO UPDATE SET watch_kind = EXCLUDED.watch_kind, watch_kind_version = EXCLUDED.watch_kind_version,
        transition = EXCLUDED.transition, reactor = EXCLUDED.reactor, reactor_version = EXCLUDED.reactor_version,
        label_match = EXCLUDED.label_match, enabled = EXCLUDED.enabled, updated_at = clock_timestamp()
    WHERE (b.watch_kind, b.watch_kind_version, b.transition, b.reactor, b.reactor_version, b.label_match, b.enabled)
          IS DISTINCT FROM (EXCLUDED.watch_kind, EXCLUDED.watch_kind_version, EXCLUDED.transition, EXCLUDED.reactor,
                            EXCLUDED.reactor_version, EXCLUDED.label_match, EXCLUDED.enabled)
    RETURNING b.*, b.xmax = 0 AS inserted
)
SELECT ` + bindingCols + `, CASE WHEN inserted THEN 'created' ELSE 'configured' END AS result FROM up
UNION ALL
SELECT ` + bindingCols + `, 'unchanged' FROM reactor_bindings WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM up)`
)

// PutReactorBinding creates or updates the binding p.Name of namespace
// p.Namespace, which watches the resources of that namespace only. Names are
// unique across the plane: one another namespace holds is a *ConflictError
// naming that namespace. WatchKind must be
// a published work kind (at WatchKindVersion, if set), Reactor a published
// reactor kind (at ReactorVersion, if set) other than WatchKind, and
// Transition one of model.Transitions; otherwise *InvalidError names the
// field. The change is live: the dispatcher reads bindings on every claim.
func (s *Store) PutReactorBinding(ctx context.Context, p PutReactorBindingParams) (ReactorBinding, ApplyResult, error) {
	if err := validateBindingParams(p); err != nil {
		return ReactorBinding{}, "", err
	}
	labels := p.LabelMatch
	if labels == nil {
		labels = map[string]string{}
	}
	p.Namespace = orDefault(p.Namespace)
	var out bindingApplied
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := checkVersion(ctx, tx, p.Precondition, bindingWhat(p.Name), bindingVersionLock, p.Name); err != nil {
			return err
		}
		if err := checkNameHolder(ctx, tx, bindingHolderSQL, "reactor binding", p.Name, p.Namespace); err != nil {
			return err
		}
		kinds, err := pgrun.Collect(ctx, tx, pgx.RowToStructByName[bindingKind], bindingKindsSQL, p.WatchKind, p.Reactor)
		if err != nil {
			return fmt.Errorf("load kinds: %w", err)
		}
		var watchAny, watchWork, reactorAny, reactorOK bool
		for _, k := range kinds {
			if k.Kind == p.WatchKind && (p.WatchKindVersion == 0 || k.KindVersion == p.WatchKindVersion) {
				watchAny = true
				watchWork = watchWork || !k.IsReactor
			}
			if k.Kind == p.Reactor && (p.ReactorVersion == 0 || k.KindVersion == p.ReactorVersion) {
				reactorAny = true
				reactorOK = reactorOK || k.IsReactor
			}
		}
		switch {
		case !watchAny:
			return &InvalidError{Location: "watch_kind", Message: fmt.Sprintf("%s is not a published kind", kindRef(p.WatchKind, p.WatchKindVersion))}
		case !watchWork:
			return &InvalidError{Location: "watch_kind", Message: fmt.Sprintf("%s is a reactor kind; it owns no resources whose transitions could fire a binding", kindRef(p.WatchKind, p.WatchKindVersion))}
		case !reactorAny:
			return &InvalidError{Location: "reactor", Message: fmt.Sprintf("%s is not a published kind", kindRef(p.Reactor, p.ReactorVersion))}
		case !reactorOK:
			return &InvalidError{Location: "reactor", Message: fmt.Sprintf("%s is not a reactor kind (its manifest must declare only a reactor reaction)", kindRef(p.Reactor, p.ReactorVersion))}
		}
		out, err = pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[bindingApplied], bindingUpsertSQL, p.Name, p.WatchKind,
			nullVersion(p.WatchKindVersion), string(p.Transition), p.Reactor, nullVersion(p.ReactorVersion), labels, p.Enabled, p.Namespace)
		if err != nil {
			if code, pe := pgCode(err); code == codeForeignKeyViolation && pe.ConstraintName == "reactor_bindings_namespace_fkey" {
				return namespaceNotFound(p.Namespace)
			}
			if code, _ := pgCode(err); code == codeCheckViolation {
				return &InvalidError{Location: "", Message: "the binding breaks a rule enforced by the database"}
			}
			return fmt.Errorf("upsert: %w", err)
		}
		return nil
	})
	if err != nil {
		return ReactorBinding{}, "", wrapUnlessTyped(err, "put reactor binding %s", p.Name)
	}
	out.normalizeLabels()
	return out.ReactorBinding, out.Result, nil
}

func validateBindingParams(p PutReactorBindingParams) error {
	switch {
	case !model.ValidName(p.Name):
		return &InvalidError{Location: "name", Message: "must be 1-253 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"}
	case !model.ValidKind(p.WatchKind):
		return &InvalidError{Location: "watch_kind", Message: "must be a kind name matching ^[a-z][a-z0-9-]{0,62}$"}
	case !model.ValidKind(p.Reactor):
		return &InvalidError{Location: "reactor", Message: "must be a kind name matching ^[a-z][a-z0-9-]{0,62}$"}
	case p.WatchKind == p.Reactor:
		return &InvalidError{Location: "reactor", Message: "must differ from watch_kind: a reactor acts on other kinds"}
	case p.WatchKindVersion != 0 && !model.ValidKindVersion(p.WatchKindVersion):
		return &InvalidError{Location: "watch_kind_version", Message: fmt.Sprintf("must be in 1..%d, or omitted for every version", model.MaxKindVersion)}
	case p.ReactorVersion != 0 && !model.ValidKindVersion(p.ReactorVersion):
		return &InvalidError{Location: "reactor_version", Message: fmt.Sprintf("must be in 1..%d, or omitted", model.MaxKindVersion)}
	case !slices.Contains(model.Transitions, p.Transition):
		names := make([]string, len(model.Transitions))
		for i, t := range model.Transitions {
			names[i] = string(t)
		}
		return &InvalidError{Location: "transition", Message: fmt.Sprintf("%q is not one of %s", p.Transition, strings.Join(names, ", "))}
	}
	return validateLabels("label_match", p.LabelMatch)
}

func nullVersion(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func kindRef(kind string, version int) string {
	if version == 0 {
		return fmt.Sprintf("%q", kind)
	}
	return fmt.Sprintf("%s/%d", kind, version)
}

const bindingGetSQL = `SELECT ` + bindingCols + ` FROM reactor_bindings WHERE name = $1 AND namespace = $2`

// bindingHolderSQL locks a binding by name and reads its namespace.
const bindingHolderSQL = `SELECT namespace FROM reactor_bindings WHERE name = $1 FOR UPDATE`

// GetReactorBinding returns the binding name of namespace ns ("" is
// DefaultNamespace), or a *NotFoundError.
func (s *Store) GetReactorBinding(ctx context.Context, ns, name string) (ReactorBinding, error) {
	b, err := pgrun.CollectOne(ctx, s.reader(ctx), rowToBinding, bindingGetSQL, name, orDefault(ns))
	if errors.Is(err, pgx.ErrNoRows) {
		return ReactorBinding{}, bindingNotFound(name)
	}
	if err != nil {
		return ReactorBinding{}, fmt.Errorf("get reactor binding %s: %w", name, err)
	}
	return b, nil
}

func bindingNotFound(name string) error {
	return &NotFoundError{Message: fmt.Sprintf("reactor binding %q does not exist", name)}
}

// ListReactorBindingsParams filters ListReactorBindings. Zero values do not
// filter.
type ListReactorBindingsParams struct {
	// Namespace keeps one namespace's bindings ("" is DefaultNamespace);
	// AllNamespaces keeps every namespace's.
	Namespace string
	WatchKind string
	Reactor   string
}

const bindingListSQL = `SELECT ` + bindingCols + ` FROM reactor_bindings
 WHERE ($1::text IS NULL OR watch_kind = $1) AND ($2::text IS NULL OR reactor = $2) AND ($3 = '*' OR namespace = $3)
 ORDER BY name`

// ListReactorBindings returns the bindings by name. Bindings are operator
// wiring, few by nature, so the list is not paginated.
func (s *Store) ListReactorBindings(ctx context.Context, p ListReactorBindingsParams) ([]ReactorBinding, error) {
	var watch, reactor any
	if p.WatchKind != "" {
		watch = p.WatchKind
	}
	if p.Reactor != "" {
		reactor = p.Reactor
	}
	out, err := pgrun.Collect(ctx, s.reader(ctx), rowToBinding, bindingListSQL, watch, reactor, orDefault(p.Namespace))
	if err != nil {
		return nil, fmt.Errorf("list reactor bindings: %w", err)
	}
	if out == nil {
		out = []ReactorBinding{}
	}
	return out, nil
}

const bindingDeleteSQL = `DELETE FROM reactor_bindings WHERE name = $1 AND namespace = $2`

// DeleteReactorBinding deletes the binding name of namespace ns ("" is
// DefaultNamespace), or returns a *NotFoundError, or a *PreconditionError
// when pre does not hold.
func (s *Store) DeleteReactorBinding(ctx context.Context, ns, name string, pre Precondition) error {
	var deleted bool
	err := s.writeIf(ctx, pre, bindingWhat(name), bindingVersionLock, []any{name}, func(q writer) error {
		tag, err := q.Exec(ctx, bindingDeleteSQL, name, orDefault(ns))
		deleted = tag.RowsAffected() > 0
		return err
	})
	if err != nil {
		return wrapUnlessTyped(err, "delete reactor binding %s", name)
	}
	if !deleted {
		return bindingNotFound(name)
	}
	return nil
}

// bindingWhat names a binding in a *PreconditionError.
func bindingWhat(name string) string { return fmt.Sprintf("reactor binding %q", name) }
