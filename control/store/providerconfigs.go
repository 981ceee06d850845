package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/internal/pgrun"
)

// ProviderConfig is an operator-owned runtime document for one (kind,
// kind_version): the kind's default (IsDefault, at most one per version) or
// an override a resource attaches by name through provider_config_ref.
// Defaults live in DefaultNamespace and apply to every namespace; an
// override serves the resources of its own namespace, and those of every
// namespace when it is in DefaultNamespace.
type ProviderConfig struct {
	Name        string          `json:"name" db:"name" doc:"Unique across the plane (every namespace): a resource's provider_config_ref names it."`
	Namespace   string          `json:"namespace" db:"namespace" doc:"The namespace the config belongs to. A resource may reference a config of its own namespace or of default; defaults (is_default) live in default."`
	Kind        string          `json:"kind" db:"kind" doc:"The consumer kind."`
	KindVersion int             `json:"kind_version" db:"kind_version" doc:"The consumer kind version; the spec is validated against its config_schema."`
	IsDefault   bool            `json:"is_default" db:"is_default" doc:"The default config of its (kind, kind_version); at most one."`
	Spec        json.RawMessage `json:"spec" db:"spec" doc:"The config document."`
	Data        []byte          `json:"data,omitempty" db:"data" doc:"An opaque bundle (base64 in JSON)."`
	OwnerID     string          `json:"owner_id,omitempty" db:"owner_id" readOnly:"true" doc:"The composite resource that emitted this config, if any."`
	CreatedAt   time.Time       `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt   time.Time       `json:"updated_at" db:"updated_at" readOnly:"true"`
	// ResourceVersion changes on every write of the config.
	ResourceVersion int64 `json:"resource_version" db:"resource_version" doc:"Changes on every write of the config; send it back (or If-Match) to make a write conditional on it."`
}

// PutProviderConfigParams is a provider config as an operator declares it.
type PutProviderConfigParams struct {
	// Namespace is the config's namespace; "" is DefaultNamespace.
	Namespace   string
	Name        string
	Kind        string
	KindVersion int
	IsDefault   bool
	// Spec is validated against the version's config_schema; empty
	// validates (and is stored) as {}.
	Spec json.RawMessage
	Data []byte
	// Precondition makes the write conditional on the config's version.
	Precondition Precondition
}

// providerConfigCols are the columns of a ProviderConfig, named for its db
// tags.
const providerConfigCols = `name, namespace, kind, kind_version, is_default, spec, data, coalesce(owner_id::text, '') AS owner_id,
       created_at, updated_at, resource_version`

// providerConfigApplied is a row of providerConfigUpsertSQL: the config and
// what the write did.
type providerConfigApplied struct {
	ProviderConfig
	Result ApplyResult `db:"result"`
}

const (
	// providerConfigSchemaSQL locks the manifest FOR SHARE: it cannot be
	// republished or deleted until the config is written, so the config is
	// validated against exactly the schema in force when it lands.
	providerConfigSchemaSQL = `SELECT config_schema FROM kind_manifest WHERE kind = $1 AND kind_version = $2 FOR SHARE`
	providerConfigLockSQL   = `SELECT kind, kind_version::int, namespace FROM providerconfigs WHERE name = $1 FOR UPDATE`
	providerConfigUsersSQL  = `SELECT CASE WHEN namespace = 'default' THEN '' ELSE namespace || '/' END || kind || '/' || name
  FROM resources WHERE provider_config_ref = $1 LIMIT 4`
	providerConfigOtherDefaultSQL = `SELECT name FROM providerconfigs
 WHERE kind = $1 AND kind_version = $2 AND is_default AND name <> $3`
	providerConfigUpsertSQL = `WITH up AS (
    INSERT INTO providerconfigs AS c (name, kind, kind_version, is_default, spec, data, namespace)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, kind_version = EXCLUDED.kind_version,
        is_default = EXCLUDED.is_default, spec = EXCLUDED.spec, data = EXCLUDED.data, updated_at = clock_timestamp()
    WHERE (c.kind, c.kind_version, c.is_default, c.spec, c.data)
          IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.kind_version, EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data)
    RETURNING c.*, c.xmax = 0 AS inserted
)
SELECT ` + providerConfigCols + `, CASE WHEN inserted THEN 'created' ELSE 'configured' END AS result FROM up
UNION ALL
SELECT ` + providerConfigCols + `, 'unchanged' FROM providerconfigs WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM up)`
)

// PutProviderConfig creates or updates the provider config p.Name in
// namespace p.Namespace. Names are unique across the plane: a name another
// namespace holds is a *ConflictError naming that namespace. A default
// (IsDefault) must be in DefaultNamespace (else *InvalidError).
//
// The spec is validated against the config_schema of (p.Kind,
// p.KindVersion) as stored when the write lands (*DocumentError). A second
// default for one (kind, kind_version) is a *ConflictError naming the
// existing one. Moving an existing config to another (kind, kind_version) is
// allowed only while no resource references it (*ConflictError). An unknown
// kind version is a *NotFoundError.
func (s *Store) PutProviderConfig(ctx context.Context, p PutProviderConfigParams) (ProviderConfig, ApplyResult, error) {
	switch {
	case !model.ValidName(p.Name):
		return ProviderConfig{}, "", &InvalidError{Location: "name", Message: "must be 1-253 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"}
	case !model.ValidKind(p.Kind):
		return ProviderConfig{}, "", &InvalidError{Location: "kind", Message: "must match ^[a-z][a-z0-9-]{0,62}$"}
	case !model.ValidKindVersion(p.KindVersion):
		return ProviderConfig{}, "", &InvalidError{Location: "kind_version", Message: fmt.Sprintf("is required and must be in 1..%d (got %d)", model.MaxKindVersion, p.KindVersion)}
	}
	p.Spec = bytes.TrimSpace(p.Spec)
	if len(p.Spec) == 0 || string(p.Spec) == "null" {
		p.Spec = json.RawMessage(`{}`)
	}
	if p.Spec[0] != '{' {
		return ProviderConfig{}, "", &DocumentError{Location: "spec", Kind: p.Kind, KindVersion: p.KindVersion,
			Violations: []schema.Violation{{Keyword: "type", Message: "spec must be a JSON object"}}}
	}
	if len(p.Data) == 0 {
		p.Data = nil // no bundle, however it was spelled
	}
	p.Namespace = orDefault(p.Namespace)
	if p.IsDefault && p.Namespace != DefaultNamespace {
		return ProviderConfig{}, "", &InvalidError{Location: "is_default", Message: fmt.Sprintf(
			"a default provider_config applies to every namespace, so it lives in namespace %q, not %q", DefaultNamespace, p.Namespace)}
	}
	var out providerConfigApplied
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := checkVersion(ctx, tx, p.Precondition, providerConfigWhat(p.Name), providerConfigVersionLock, p.Name); err != nil {
			return err
		}
		var raw []byte
		err := tx.QueryRow(ctx, providerConfigSchemaSQL, p.Kind, p.KindVersion).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return s.kindNotFound(ctx, p.Kind, p.KindVersion)
		}
		if err != nil {
			return fmt.Errorf("load config schema: %w", err)
		}
		if err := validateConfig(raw, p); err != nil {
			return err
		}

		var (
			oldKind, oldNS string
			oldVersion     int
		)
		err = tx.QueryRow(ctx, providerConfigLockSQL, p.Name).Scan(&oldKind, &oldVersion, &oldNS)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("lock provider config: %w", err)
		case oldNS != p.Namespace:
			return nameTaken("provider_config", p.Name, oldNS)
		case oldKind != p.Kind || oldVersion != p.KindVersion:
			// The FOR UPDATE above waited out any apply holding the row
			// FOR SHARE, so this statement sees every committed reference.
			users, err := sampleNames(ctx, tx, providerConfigUsersSQL, p.Name)
			if err != nil {
				return err
			}
			if len(users) > 0 {
				return &ConflictError{Message: fmt.Sprintf(
					"provider_config %q is for %s/%d and is referenced by %s; it cannot move to %s/%d while referenced",
					p.Name, oldKind, oldVersion, listNames(users, 3), p.Kind, p.KindVersion)}
			}
		}
		if p.IsDefault {
			if err := otherDefault(ctx, tx, p); err != nil {
				return err
			}
		}
		out, err = pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[providerConfigApplied], providerConfigUpsertSQL,
			p.Name, p.Kind, p.KindVersion, p.IsDefault, p.Spec, p.Data, p.Namespace)
		if code, pe := pgCode(err); code == codeForeignKeyViolation && pe.ConstraintName == "providerconfigs_namespace_fkey" {
			return namespaceNotFound(p.Namespace)
		}
		if code, _ := pgCode(err); code == codeUniqueViolation {
			// A concurrent writer made another default first.
			return &ConflictError{Message: fmt.Sprintf("a default provider_config already exists for %s/%d", p.Kind, p.KindVersion)}
		}
		if code, _ := pgCode(err); code == codeUntranslatableCharacter || code == codeInvalidTextRepresentation {
			return &DocumentError{Location: "spec", Kind: p.Kind, KindVersion: p.KindVersion, Violations: []schema.Violation{{
				Keyword: "type", Message: "contains a string the database cannot store (a \\u0000 escape)"}}}
		}
		if err != nil {
			return fmt.Errorf("upsert: %w", err)
		}
		return nil
	})
	if err != nil {
		return ProviderConfig{}, "", wrapUnlessTyped(err, "put provider config %s", p.Name)
	}
	return out.ProviderConfig, out.Result, nil
}

func otherDefault(ctx context.Context, tx pgx.Tx, p PutProviderConfigParams) error {
	var other string
	err := tx.QueryRow(ctx, providerConfigOtherDefaultSQL, p.Kind, p.KindVersion, p.Name).Scan(&other)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find default: %w", err)
	}
	return &ConflictError{Message: fmt.Sprintf("a default provider_config already exists for %s/%d (%q); set is_default to false, or make %q not the default first",
		p.Kind, p.KindVersion, other, other)}
}

// validateConfig checks a config spec against the stored config_schema. Config
// writes are rare, so the schema is compiled from the locked row rather than
// read from a cache that could be a notification behind.
func validateConfig(raw []byte, p PutProviderConfigParams) error {
	sch, err := schema.Compile(raw)
	if err != nil {
		return fmt.Errorf("the stored config_schema of %s/%d does not compile: %w", p.Kind, p.KindVersion, err)
	}
	err = sch.Validate(p.Spec)
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		return &DocumentError{Location: "spec", Kind: p.Kind, KindVersion: p.KindVersion, Violations: ve.Violations}
	}
	if err != nil {
		return fmt.Errorf("validate config: %w", err)
	}
	return nil
}

const providerConfigGetSQL = `SELECT ` + providerConfigCols + ` FROM providerconfigs WHERE name = $1 AND namespace = $2`

// GetProviderConfig returns the provider config name of namespace ns (""
// is DefaultNamespace), or a *NotFoundError.
func (s *Store) GetProviderConfig(ctx context.Context, ns, name string) (ProviderConfig, error) {
	c, err := pgrun.CollectOne(ctx, s.reader(ctx), pgx.RowToStructByName[ProviderConfig], providerConfigGetSQL, name, orDefault(ns))
	if errors.Is(err, pgx.ErrNoRows) {
		return ProviderConfig{}, providerConfigNotFound(name)
	}
	if err != nil {
		return ProviderConfig{}, fmt.Errorf("get provider config %s: %w", name, err)
	}
	return c, nil
}

func providerConfigNotFound(name string) error {
	return &NotFoundError{Message: fmt.Sprintf("provider_config %q does not exist", name)}
}

// ListProviderConfigsParams filters and pages ListProviderConfigs. Zero
// values do not filter.
type ListProviderConfigsParams struct {
	// Namespace keeps one namespace's configs ("" is DefaultNamespace);
	// AllNamespaces keeps every namespace's.
	Namespace   string
	Kind        string
	KindVersion int
	// Default, when set, keeps only defaults (true) or only overrides.
	Default *bool
	// Limit is the page size: ListLimitDefault when 0, at most ListLimitMax.
	Limit int
	// MaxBytes ends a page early, as ListResourcesParams.MaxBytes does.
	MaxBytes int
	// Cursor continues after the page that returned it.
	Cursor string
}

// ListProviderConfigs pages through provider configs by name, up to Limit
// a page and ending early at MaxBytes (see collectPage).
func (s *Store) ListProviderConfigs(ctx context.Context, p ListProviderConfigsParams) (Page[ProviderConfig], error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return Page[ProviderConfig]{}, err
	}
	budget := pageBudget(p.MaxBytes)
	var (
		q   strings.Builder
		qa  queryArgs
		arg = qa.add
	)
	q.WriteString(`SELECT ` + providerConfigCols + `, pg_column_size(spec) + coalesce(pg_column_size(data), 0) AS row_size
  FROM providerconfigs WHERE true`)
	if ns := orDefault(p.Namespace); ns != AllNamespaces {
		q.WriteString(` AND namespace = ` + arg(ns))
	}
	if p.Kind != "" {
		q.WriteString(` AND kind = ` + arg(p.Kind))
	}
	if p.KindVersion != 0 {
		if !model.ValidKindVersion(p.KindVersion) {
			return Page[ProviderConfig]{}, &InvalidError{Location: "kind_version", Message: fmt.Sprintf("must be in 1..%d", model.MaxKindVersion)}
		}
		q.WriteString(` AND kind_version = ` + arg(p.KindVersion))
	}
	if p.Default != nil {
		q.WriteString(` AND is_default = ` + arg(*p.Default))
	}
	if p.Cursor != "" {
		after, err := base64.RawURLEncoding.DecodeString(p.Cursor)
		if err != nil || len(after) == 0 {
			return Page[ProviderConfig]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q.WriteString(` AND name > ` + arg(string(after)))
	}
	rows, err := s.reader(ctx).Query(ctx, pageSQL(q.String(), "name", arg(limit), arg(budget)), qa...)
	if err != nil {
		return Page[ProviderConfig]{}, fmt.Errorf("list provider configs: %w", err)
	}
	items, more, err := collectPage(rows, budget, func(row pgx.CollectableRow) (ProviderConfig, bool, error) {
		r, err := pgx.RowToStructByName[struct {
			ProviderConfig
			pageTail
		}](row)
		return r.ProviderConfig, r.More, err
	})
	if err != nil {
		return Page[ProviderConfig]{}, fmt.Errorf("list provider configs: %w", err)
	}
	page := Page[ProviderConfig]{Items: items}
	if more {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(items[len(items)-1].Name))
	}
	if page.Items == nil {
		page.Items = []ProviderConfig{}
	}
	return page, nil
}

const providerConfigDeleteSQL = `DELETE FROM providerconfigs WHERE name = $1`

// DeleteProviderConfig deletes the provider config name of namespace ns (""
// is DefaultNamespace; a config of another namespace is a *NotFoundError).
// It refuses with *ConflictError while a resource references it, and with
// *PreconditionError when pre does not hold.
func (s *Store) DeleteProviderConfig(ctx context.Context, ns, name string, pre Precondition) error {
	ns = orDefault(ns)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := checkVersion(ctx, tx, pre, providerConfigWhat(name), providerConfigVersionLock, name); err != nil {
			return err
		}
		var k, owner string
		var v int
		if err := tx.QueryRow(ctx, providerConfigLockSQL, name).Scan(&k, &v, &owner); err != nil || owner != ns {
			if err == nil || errors.Is(err, pgx.ErrNoRows) {
				return providerConfigNotFound(name)
			}
			return fmt.Errorf("lock: %w", err)
		}
		users, err := sampleNames(ctx, tx, providerConfigUsersSQL, name)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return &ConflictError{Message: fmt.Sprintf("provider_config %q is referenced by %s; detach it (re-apply them without provider_config_ref) first",
				name, listNames(users, 3))}
		}
		if _, err := tx.Exec(ctx, providerConfigDeleteSQL, name); err != nil {
			if code, _ := pgCode(err); code == codeForeignKeyViolation {
				return &ConflictError{Message: fmt.Sprintf("provider_config %q is referenced by a resource", name)}
			}
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	})
	return wrapUnlessTyped(err, "delete provider config %s", name)
}

// providerConfigWhat names a provider config in a *PreconditionError.
func providerConfigWhat(name string) string { return fmt.Sprintf("provider_config %q", name) }
