package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/pgrun"
)

// Roles lists the roles a binding may grant, weakest first: each includes
// what the ones before it may do (docs/api.md "Roles and role bindings").
var Roles = []string{"viewer", "editor", "operator", "admin"}

// MaxPrincipalNameBytes caps the user or group a binding names.
const MaxPrincipalNameBytes = 256

// RoleBinding grants Role to User or Group in Namespace, or in every
// namespace when ClusterWide.
type RoleBinding struct {
	Name        string    `json:"name" db:"name" doc:"Unique across the plane."`
	Role        string    `json:"role" db:"role" enum:"viewer,editor,operator,admin"`
	User        string    `json:"user,omitempty" db:"subject" doc:"The user bound: an OIDC token's subject (the username claim). Exactly one of user and group."`
	Group       string    `json:"group,omitempty" db:"group_name" doc:"The group bound: any caller whose groups claim holds it. Exactly one of user and group."`
	Namespace   string    `json:"namespace,omitempty" db:"namespace" doc:"The namespace the role is granted in; absent for a cluster-wide binding."`
	ClusterWide bool      `json:"cluster_wide" db:"cluster_wide" doc:"The role is granted in every namespace and, for admin, over the cluster-wide objects."`
	CreatedAt   time.Time `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt   time.Time `json:"updated_at" db:"updated_at" readOnly:"true"`
}

// RoleBindingFilter selects role bindings. Zero fields select everything.
type RoleBindingFilter struct {
	// Namespace keeps the bindings that grant a role in it: its own and
	// the cluster-wide ones. Empty keeps every binding.
	Namespace string
	Role      string
	User      string
	Group     string
}

const roleBindingCols = `name, role, coalesce(subject, '') AS subject, coalesce(group_name, '') AS group_name,
       coalesce(namespace, '') AS namespace, namespace IS NULL AS cluster_wide, created_at, updated_at`

// validateRoleBinding checks b's fields, naming the one at fault as the
// body of PUT /role-bindings/{name} does.
func validateRoleBinding(b RoleBinding) error {
	switch {
	case !endpointNameRE.MatchString(b.Name):
		return &InvalidError{Location: "name", Message: "must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"}
	case !slices.Contains(Roles, b.Role):
		return &InvalidError{Location: "role", Message: fmt.Sprintf("%q is not one of %s", b.Role, strings.Join(Roles, ", "))}
	case (b.User == "") == (b.Group == ""):
		return &InvalidError{Location: "user", Message: "exactly one of user and group is required"}
	case b.ClusterWide && b.Namespace != "":
		return &InvalidError{Location: "namespace", Message: "a cluster-wide binding has no namespace"}
	case !b.ClusterWide && !ValidNamespace(b.Namespace):
		return &InvalidError{Location: "namespace", Message: "must be a namespace name (lowercase letters, digits and '-', at most 63)"}
	}
	for field, v := range map[string]string{"user": b.User, "group": b.Group} {
		if len(v) > MaxPrincipalNameBytes || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return &InvalidError{Location: field, Message: fmt.Sprintf("must be at most %d bytes with no control characters", MaxPrincipalNameBytes)}
		}
	}
	return nil
}

// PutRoleBinding creates or replaces the binding b.Name. Inside its
// transaction, with the row locked, it calls allow with the binding as it
// stands (nil when it is new): an error from allow ends the write and is
// returned as is, so whether the caller may replace a binding is decided on
// the binding that is replaced.
func (s *Store) PutRoleBinding(ctx context.Context, b RoleBinding, allow func(old *RoleBinding) error) (RoleBinding, ApplyResult, error) {
	if err := validateRoleBinding(b); err != nil {
		return RoleBinding{}, "", err
	}
	var (
		out    RoleBinding
		result ApplyResult
		denied error
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		old, err := pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[RoleBinding],
			`SELECT `+roleBindingCols+` FROM role_bindings WHERE name = $1 FOR UPDATE`, b.Name)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var prev *RoleBinding
		if exists {
			prev = &old
		}
		if denied = allow(prev); denied != nil {
			return denied
		}
		tag, err := tx.Exec(ctx, `INSERT INTO role_bindings AS b (name, role, subject, group_name, namespace)
    VALUES ($1, $2, nullif($3, ''), nullif($4, ''), nullif($5, ''))
    ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role, subject = EXCLUDED.subject, group_name = EXCLUDED.group_name,
        namespace = EXCLUDED.namespace, updated_at = clock_timestamp()
    WHERE (b.role, b.subject, b.group_name, b.namespace) IS DISTINCT FROM
          (EXCLUDED.role, EXCLUDED.subject, EXCLUDED.group_name, EXCLUDED.namespace)`,
			b.Name, b.Role, b.User, b.Group, b.Namespace)
		if err != nil {
			return fmt.Errorf("upsert: %w", err)
		}
		result = upsertResult(exists, tag)
		out, err = pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[RoleBinding], `SELECT `+roleBindingCols+` FROM role_bindings WHERE name = $1`, b.Name)
		return err
	})
	switch {
	case denied != nil:
		return RoleBinding{}, "", denied
	case err != nil:
		return RoleBinding{}, "", fmt.Errorf("put role binding %s: %w", b.Name, err)
	}
	return out, result, nil
}

// GetRoleBinding returns the binding name, or a *NotFoundError.
func (s *Store) GetRoleBinding(ctx context.Context, name string) (RoleBinding, error) {
	out, err := pgrun.CollectOne(ctx, s.reader(ctx), pgx.RowToStructByName[RoleBinding], `SELECT `+roleBindingCols+` FROM role_bindings WHERE name = $1`, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return RoleBinding{}, roleBindingNotFound(name)
	}
	if err != nil {
		return RoleBinding{}, fmt.Errorf("get role binding %s: %w", name, err)
	}
	return out, nil
}

// ListRoleBindings returns the bindings f selects, by name. Bindings are
// few by nature (a handful per team), so the list is not paginated.
func (s *Store) ListRoleBindings(ctx context.Context, f RoleBindingFilter) ([]RoleBinding, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[RoleBinding], `SELECT `+roleBindingCols+` FROM role_bindings
    WHERE ($1 = '' OR namespace = $1 OR namespace IS NULL) AND ($2 = '' OR role = $2)
      AND ($3 = '' OR subject = $3) AND ($4 = '' OR group_name = $4)
    ORDER BY name`, f.Namespace, f.Role, f.User, f.Group)
	if err != nil {
		return nil, fmt.Errorf("list role bindings: %w", err)
	}
	if out == nil {
		out = []RoleBinding{}
	}
	return out, nil
}

// DeleteRoleBinding deletes the binding name, or returns a *NotFoundError.
// As PutRoleBinding, it first calls allow with the binding, locked, and
// returns allow's error as is.
func (s *Store) DeleteRoleBinding(ctx context.Context, name string, allow func(RoleBinding) error) error {
	var denied error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		old, err := pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[RoleBinding],
			`SELECT `+roleBindingCols+` FROM role_bindings WHERE name = $1 FOR UPDATE`, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return roleBindingNotFound(name)
		}
		if err != nil {
			return err
		}
		if denied = allow(old); denied != nil {
			return denied
		}
		_, err = tx.Exec(ctx, `DELETE FROM role_bindings WHERE name = $1`, name)
		return err
	})
	switch {
	case denied != nil:
		return denied
	case err != nil:
		return fmt.Errorf("delete role binding %s: %w", name, err)
	}
	return nil
}

func roleBindingNotFound(name string) error {
	return &NotFoundError{Message: fmt.Sprintf("role binding %q does not exist", name)}
}
