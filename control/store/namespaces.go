package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// DefaultNamespace is the namespace every namespaced object belongs to
// unless it names another: an existing database upgrades into it, and it
// cannot be deleted. Its default provider configs apply to every namespace.
const DefaultNamespace = "default"

// AllNamespaces is the namespace of a list of every namespace's objects.
const AllNamespaces = "*"

// The quotas a namespace may set.
const (
	// QuotaMaxObjects bounds the resources of a namespace, checked when one
	// is created.
	QuotaMaxObjects = "max_objects"
	// QuotaMaxInFlight bounds a namespace's claimed tasks.
	QuotaMaxInFlight = "max_in_flight"
)

// namespaceNameRE is the namespaces table's CHECK: a DNS label.
var namespaceNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidNamespace reports whether name is a valid namespace name: 1-63
// lowercase letters, digits or '-', starting and ending with a letter or
// digit.
func ValidNamespace(name string) bool { return namespaceNameRE.MatchString(name) }

// orDefault is ns, or DefaultNamespace for "".
func orDefault(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// QuotaError means a write would take a namespace past one of its quotas;
// nothing was written.
type QuotaError struct {
	Namespace string
	// Quota is the quota's name, e.g. QuotaMaxObjects.
	Quota string
	// Limit is the quota, Used what the namespace holds now.
	Limit, Used int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("namespace %q is at its %s quota: %d of %d used", e.Namespace, e.Quota, e.Used, e.Limit)
}

// nameTaken is the error for a plane-unique name (of an endpoint, a
// provider config, a reactor binding) that another namespace holds.
func nameTaken(what, name, holder string) error {
	return &ConflictError{Message: fmt.Sprintf(
		"%s %q already exists in namespace %q: its names are unique across every namespace", what, name, holder)}
}

// checkNameHolder locks the object of a plane-unique name with holderSQL
// (which reads its namespace by name, FOR UPDATE) and refuses a write in
// namespace ns when another namespace holds the name (nameTaken).
func checkNameHolder(ctx context.Context, tx pgx.Tx, holderSQL, what, name, ns string) error {
	var holder string
	err := tx.QueryRow(ctx, holderSQL, name).Scan(&holder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("look up %s %s: %w", what, name, err)
	case holder != ns:
		return nameTaken(what, name, holder)
	}
	return nil
}

// namespaceNotFound is the error for an unknown namespace, located at the
// input that named it.
func namespaceNotFound(ns string) error {
	return &NotFoundError{Location: "namespace", Message: fmt.Sprintf("namespace %q does not exist", ns)}
}

// namespaceQuotaLockSQL serialises the creations in a namespace that has a
// max_objects quota, so that the count the next statement of the same
// transaction reads includes every creation committed before it (each
// statement reads a snapshot taken when it starts). FOR NO KEY UPDATE does
// not conflict with the FOR KEY SHARE the resources' foreign key takes: only
// creators wait for each other. A namespace without the quota locks
// nothing; a single apply runs it only once it has found the quota.
const namespaceQuotaLockSQL = `SELECT 1 FROM namespaces WHERE name = $1 AND max_objects IS NOT NULL FOR NO KEY UPDATE`

// Namespace is a namespace and its quotas.
type Namespace struct {
	Name   string            `json:"name" db:"name" doc:"The namespace's name: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit."`
	Labels map[string]string `json:"labels" db:"labels" doc:"Free-form labels."`
	// MaxObjects bounds the namespace's resources; nil is no quota.
	MaxObjects *int `json:"max_objects,omitempty" db:"max_objects" minimum:"0" doc:"At most this many resources; creating one more is refused (403). Omitted: no quota."`
	// MaxInFlight bounds the namespace's claimed tasks; nil is no quota.
	MaxInFlight *int      `json:"max_in_flight,omitempty" db:"max_in_flight" minimum:"0" doc:"At most this many of the namespace's tasks in flight at once. Omitted: no quota."`
	CreatedAt   time.Time `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt   time.Time `json:"updated_at" db:"updated_at" readOnly:"true"`
	// Objects is how many resources the namespace holds.
	Objects int `json:"objects" db:"objects" readOnly:"true" doc:"How many resources the namespace holds (what max_objects counts)."`
}

// PutNamespaceParams is a namespace as an operator declares it.
type PutNamespaceParams struct {
	Name        string
	Labels      map[string]string
	MaxObjects  *int
	MaxInFlight *int
}

const namespaceCols = `n.name, n.labels, n.max_objects, n.max_in_flight, n.created_at, n.updated_at,
       (SELECT count(*) FROM resources r WHERE r.namespace = n.name)::int AS objects`

// rowToNamespace scans namespaceCols.
func rowToNamespace(row pgx.CollectableRow) (Namespace, error) {
	n, err := pgx.RowToStructByName[Namespace](row)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	return n, err
}

// PutNamespace creates the namespace p.Name or updates its labels and
// quotas. A quota below what the namespace holds already is accepted: it
// refuses the next creation, and deletes nothing. Errors: *InvalidError
// naming the field.
func (s *Store) PutNamespace(ctx context.Context, p PutNamespaceParams) (Namespace, ApplyResult, error) {
	switch {
	case !ValidNamespace(p.Name):
		return Namespace{}, "", &InvalidError{Location: "name", Message: "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"}
	case p.MaxObjects != nil && *p.MaxObjects < 0:
		return Namespace{}, "", &InvalidError{Location: QuotaMaxObjects, Message: "must be 0 or more, or omitted"}
	case p.MaxInFlight != nil && *p.MaxInFlight < 0:
		return Namespace{}, "", &InvalidError{Location: QuotaMaxInFlight, Message: "must be 0 or more, or omitted"}
	}
	if err := validateLabels("labels", p.Labels); err != nil {
		return Namespace{}, "", err
	}
	labels := p.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	// The upsert's result row reads the table in the statement's snapshot,
	// which does not hold what the statement itself wrote: the row is read
	// back in a second statement of the same transaction.
	var (
		out    Namespace
		result ApplyResult
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `WITH up AS (`+namespaceUpsertSQL+`) SELECT coalesce((SELECT CASE WHEN inserted THEN 'created' ELSE 'configured' END FROM up), 'unchanged')`,
			p.Name, labels, p.MaxObjects, p.MaxInFlight).Scan(&result)
		if err != nil {
			return err
		}
		out, err = pgrun.CollectOne(ctx, tx, rowToNamespace, namespaceGetSQL, p.Name)
		return err
	})
	if err != nil {
		return Namespace{}, "", fmt.Errorf("put namespace %s: %w", p.Name, err)
	}
	return out, result, nil
}

// namespaceUpsertSQL writes a namespace and returns whether it inserted it,
// or no row when nothing changed.
const namespaceUpsertSQL = `INSERT INTO namespaces AS n (name, labels, max_objects, max_in_flight)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (name) DO UPDATE SET labels = EXCLUDED.labels, max_objects = EXCLUDED.max_objects,
        max_in_flight = EXCLUDED.max_in_flight, updated_at = clock_timestamp()
    WHERE (n.labels, n.max_objects, n.max_in_flight) IS DISTINCT FROM (EXCLUDED.labels, EXCLUDED.max_objects, EXCLUDED.max_in_flight)
    RETURNING n.xmax = 0 AS inserted`

const namespaceGetSQL = `SELECT ` + namespaceCols + ` FROM namespaces n WHERE n.name = $1`

// GetNamespace returns the namespace name, or a *NotFoundError.
func (s *Store) GetNamespace(ctx context.Context, name string) (Namespace, error) {
	n, err := pgrun.CollectOne(ctx, s.reader(ctx), rowToNamespace, namespaceGetSQL, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Namespace{}, &NotFoundError{Message: fmt.Sprintf("namespace %q does not exist", name)}
	}
	if err != nil {
		return Namespace{}, fmt.Errorf("get namespace %s: %w", name, err)
	}
	return n, nil
}

// NamespaceExists reports whether the namespace name exists: one probe of
// its primary key.
func (s *Store) NamespaceExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	if err := s.reader(ctx).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM namespaces WHERE name = $1)`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up namespace %s: %w", name, err)
	}
	return ok, nil
}

// ListNamespaces returns every namespace by name. Namespaces are few (one
// per team or application), so the list is not paginated.
func (s *Store) ListNamespaces(ctx context.Context) ([]Namespace, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), rowToNamespace, `SELECT `+namespaceCols+` FROM namespaces n ORDER BY n.name`)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	if out == nil {
		out = []Namespace{}
	}
	return out, nil
}

// namespaceExclusiveSQL waits until no creation holds the namespace
// (namespace_hold, engine/namespaces.sql) and keeps new ones out until the
// transaction ends; statements after it see what those creations wrote.
const namespaceExclusiveSQL = `SELECT pg_advisory_xact_lock(hashtext('namespace:' || $1))`

// namespaceHoldsSQL counts what a namespace holds. The namespace row is
// locked (FOR UPDATE conflicts with the FOR KEY SHARE each new provider
// config's, binding's or endpoint's foreign key takes), and
// namespaceExclusiveSQL ran first to keep resources out, so nothing is
// created in it between the count and the delete.
const namespaceHoldsSQL = `SELECT (SELECT count(*) FROM resources WHERE namespace = $1)::int,
       (SELECT count(*) FROM providerconfigs WHERE namespace = $1)::int,
       (SELECT count(*) FROM reactor_bindings WHERE namespace = $1)::int,
       (SELECT count(*) FROM endpoints WHERE namespace = $1)::int
  FROM namespaces WHERE name = $1 FOR UPDATE`

// DeleteNamespace deletes the namespace name. Errors: *ConflictError for
// DefaultNamespace, or for a namespace that still holds resources,
// provider configs, reactor bindings or endpoints (each counted in the
// details); *NotFoundError when it does not exist.
func (s *Store) DeleteNamespace(ctx context.Context, name string) error {
	if name == DefaultNamespace {
		return &ConflictError{Message: fmt.Sprintf("namespace %q cannot be deleted", DefaultNamespace)}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, namespaceExclusiveSQL, name); err != nil {
			return err
		}
		var res, pcs, bindings, eps int
		if err := tx.QueryRow(ctx, namespaceHoldsSQL, name).Scan(&res, &pcs, &bindings, &eps); err != nil {
			return err
		}
		var held []string
		for _, h := range []struct {
			n    int
			what string
		}{{res, "resources"}, {pcs, "provider configs"}, {bindings, "reactor bindings"}, {eps, "endpoints"}} {
			if h.n > 0 {
				held = append(held, fmt.Sprintf("%d %s", h.n, h.what))
			}
		}
		if len(held) > 0 {
			return &ConflictError{Message: fmt.Sprintf("namespace %q is not empty; delete what it holds first", name), Details: held}
		}
		_, err := tx.Exec(ctx, `DELETE FROM namespaces WHERE name = $1`, name)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return &NotFoundError{Message: fmt.Sprintf("namespace %q does not exist", name)}
	}
	return wrapUnlessTyped(err, "delete namespace %s", name)
}
