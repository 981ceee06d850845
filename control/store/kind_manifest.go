package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/internal/pgrun"
)

// SchemaChange is one breaking change the stability gate found.
type SchemaChange struct {
	// Field is the manifest field whose schema changed: "spec_schema" or
	// "config_schema".
	Field string
	// Path locates the change inside that schema ("" is its root).
	Path string
	// Message says what changed, e.g. "newly required".
	Message string
}

func (c SchemaChange) String() string {
	if c.Path == "" {
		return c.Field + ": " + c.Message
	}
	return c.Field + "." + c.Path + ": " + c.Message
}

// BreakingChangeError refuses an in-place republish of a (kind, kind_version)
// whose spec or config schema would reject documents the published one
// accepts. Live resources were validated against the published schema, so a
// breaking change must ship as a new kind_version. It unwraps to a
// *ConflictError listing each change.
type BreakingChangeError struct {
	Kind        string
	KindVersion int
	Changes     []SchemaChange
}

func (e *BreakingChangeError) message() string {
	return fmt.Sprintf("breaking schema change to the published manifest %s/%d; publish it as a new kind_version (e.g. %d) instead",
		e.Kind, e.KindVersion, min(e.KindVersion+1, model.MaxKindVersion))
}

func (e *BreakingChangeError) Error() string { return e.Unwrap().Error() }

// Unwrap returns the equivalent *ConflictError, so callers that only know
// ConflictError still answer 409.
func (e *BreakingChangeError) Unwrap() error {
	details := make([]string, len(e.Changes))
	for i, c := range e.Changes {
		details[i] = c.String()
	}
	return &ConflictError{Message: e.message(), Details: details}
}

// manifestRow is a manifest in the shape the kind_manifest columns take.
type manifestRow struct {
	description  string
	spec         json.RawMessage // nil: untyped
	status       json.RawMessage
	config       json.RawMessage
	reactions    []byte
	finalizer    string
	policy       []byte
	specSchema   *schema.Schema
	configSchema *schema.Schema
}

// prepareManifest checks a manifest before any write: the legality lattice,
// every schema compiles, and turns it into column values.
func prepareManifest(m *model.KindManifest) (manifestRow, error) {
	if err := model.ValidateManifest(m); err != nil {
		var fe *model.FieldError
		if errors.As(err, &fe) {
			return manifestRow{}, &InvalidError{Location: fe.Location, Message: fe.Message}
		}
		return manifestRow{}, &InvalidError{Location: "", Message: err.Error()}
	}
	row := manifestRow{description: m.Description, finalizer: m.FinalizerName}
	for _, f := range []struct {
		loc string
		raw json.RawMessage
		dst *json.RawMessage
		sch **schema.Schema
	}{
		{"spec_schema", m.SpecSchema, &row.spec, &row.specSchema},
		{"status_schema", m.StatusSchema, &row.status, nil},
		{"config_schema", m.ConfigSchema, &row.config, &row.configSchema},
	} {
		s, err := schema.Compile(f.raw)
		if err != nil {
			return manifestRow{}, &InvalidError{Location: f.loc, Message: strings.TrimPrefix(err.Error(), "schema: ")}
		}
		if s != nil {
			*f.dst = s.Raw()
		}
		if f.sch != nil {
			*f.sch = s
		}
	}
	for i, r := range m.Reactions {
		if _, err := schema.Compile(r.InputSchema); err != nil {
			return manifestRow{}, &InvalidError{Location: fmt.Sprintf("reactions[%d].input_schema", i),
				Message: strings.TrimPrefix(err.Error(), "schema: ")}
		}
	}
	reactions := m.Reactions
	if reactions == nil {
		reactions = []model.ReactionDecl{}
	}
	var err error
	if row.reactions, err = json.Marshal(reactions); err != nil {
		return manifestRow{}, fmt.Errorf("encode reactions: %w", err)
	}
	if row.policy, err = json.Marshal(m.Policy); err != nil {
		return manifestRow{}, fmt.Errorf("encode policy: %w", err)
	}
	return row, nil
}

// nullJSON maps an absent document to SQL NULL.
func nullJSON(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

const (
	// kindManifestLockSQL locks an existing manifest for a republish so
	// concurrent publishes of one (kind, kind_version) serialize, and
	// compares the stored manifest with the new one as JSON values (jsonb
	// equality ignores key order, whitespace and number spelling).
	kindManifestLockSQL = `SELECT spec_schema, config_schema,
       (description, spec_schema, status_schema, config_schema, reactions, finalizer_name, policy)
       IS NOT DISTINCT FROM ($3::text, $4::jsonb, $5::jsonb, $6::jsonb, $7::jsonb, $8::text, $9::jsonb)
  FROM kind_manifest WHERE kind = $1 AND kind_version = $2 FOR UPDATE`

	// kindManifestInsertSQL creates a manifest; its AFTER trigger seeds
	// kind_config insert-if-absent and notifies kind_manifest_changed.
	kindManifestInsertSQL = `INSERT INTO kind_manifest
       (kind, kind_version, description, spec_schema, status_schema, config_schema, reactions, finalizer_name, policy)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (kind, kind_version) DO NOTHING`

	// kindManifestUpdateSQL republishes a manifest. kind_config is left alone:
	// it is the operator's live copy of the policy.
	kindManifestUpdateSQL = `UPDATE kind_manifest SET description = $3, spec_schema = $4, status_schema = $5,
       config_schema = $6, reactions = $7, finalizer_name = $8, policy = $9, updated_at = clock_timestamp()
 WHERE kind = $1 AND kind_version = $2`
)

// PutManifest publishes a kind manifest for its (kind, kind_version).
//
// The manifest must pass model.ValidateManifest and every schema must compile
// (else *InvalidError naming the field). Republishing an identical manifest
// is ApplyUnchanged and writes nothing. Any other republish passes the
// schema-stability gate on spec_schema and config_schema: a breaking change
// returns *BreakingChangeError (a *ConflictError) and writes nothing;
// status_schema is advisory and may change freely. kind_config is seeded by
// the database on first publish and never overwritten here.
func (s *Store) PutManifest(ctx context.Context, m *model.KindManifest) (ApplyResult, error) {
	row, err := prepareManifest(m)
	if err != nil {
		return "", err
	}
	for attempt := 1; ; attempt++ {
		res, err := s.putManifestOnce(ctx, m, row)
		if errors.Is(err, errRetry) && attempt < maxWriteAttempts {
			continue
		}
		if errors.Is(err, errRetry) {
			return "", fmt.Errorf("publish manifest %s/%d: lost %d races with concurrent publishers", m.Kind, m.KindVersion, attempt)
		}
		return res, err
	}
}

func (s *Store) putManifestOnce(ctx context.Context, m *model.KindManifest, row manifestRow) (ApplyResult, error) {
	args := []any{m.Kind, m.KindVersion, row.description, nullJSON(row.spec), nullJSON(row.status),
		nullJSON(row.config), row.reactions, row.finalizer, row.policy}
	var result ApplyResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			oldSpec, oldConfig json.RawMessage
			identical          bool
		)
		err := tx.QueryRow(ctx, kindManifestLockSQL, args...).Scan(&oldSpec, &oldConfig, &identical)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			tag, err := tx.Exec(ctx, kindManifestInsertSQL, args...)
			if err != nil {
				return manifestWriteError(err)
			}
			if tag.RowsAffected() == 0 {
				return errRetry
			}
			result = ApplyCreated
			return nil
		case err != nil:
			return fmt.Errorf("lock manifest: %w", err)
		case identical:
			result = ApplyUnchanged
			return nil
		}
		if err := checkStable(m, oldSpec, row.spec, oldConfig, row.config); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, kindManifestUpdateSQL, args...); err != nil {
			return manifestWriteError(err)
		}
		result = ApplyConfigured
		return nil
	})
	if err != nil {
		if errors.Is(err, errRetry) {
			return "", err
		}
		var ie *InvalidError
		var be *BreakingChangeError
		if errors.As(err, &ie) || errors.As(err, &be) {
			return "", err
		}
		return "", fmt.Errorf("publish manifest %s/%d: %w", m.Kind, m.KindVersion, err)
	}
	return result, nil
}

// checkStable runs the schema-stability gate on the axes that validate user
// input. The status schema only documents handler output, so it may change.
func checkStable(m *model.KindManifest, oldSpec, newSpec, oldConfig, newConfig json.RawMessage) error {
	var changes []SchemaChange
	for _, f := range []struct {
		field    string
		old, new json.RawMessage
	}{{"spec_schema", oldSpec, newSpec}, {"config_schema", oldConfig, newConfig}} {
		d, err := schema.Diff(f.old, f.new)
		if err != nil {
			return fmt.Errorf("compare %s: %w", f.field, err)
		}
		for _, c := range d.Breaking {
			changes = append(changes, SchemaChange{Field: f.field, Path: c.Path, Message: c.Message})
		}
	}
	if len(changes) > 0 {
		return &BreakingChangeError{Kind: m.Kind, KindVersion: m.KindVersion, Changes: changes}
	}
	return nil
}

// manifestWriteError maps the constraint violations a manifest write can hit.
// model.ValidateManifest mirrors validate_kind_manifest(), so reaching the
// kind_manifest_legal trigger (a check_violation, as a CHECK raises) means
// the two halves disagree; the request is still refused cleanly.
func manifestWriteError(err error) error {
	code, pe := pgCode(err)
	if code == codeCheckViolation {
		switch {
		case strings.Contains(pe.ConstraintName, "kind_version"):
			return &InvalidError{Location: "kind_version", Message: fmt.Sprintf("must be in 1..%d", model.MaxKindVersion)}
		case strings.Contains(pe.ConstraintName, "kind_check"):
			return &InvalidError{Location: "kind", Message: "must match ^[a-z][a-z0-9-]{0,62}$"}
		default:
			return &InvalidError{Location: "reactions", Message: "the reaction set breaks the manifest legality rules enforced by the database"}
		}
	}
	return fmt.Errorf("write manifest: %w", err)
}

const manifestCols = `kind, kind_version, description, spec_schema, status_schema, config_schema,
       reactions, finalizer_name, policy`

// scanManifest reads manifestCols. model.KindManifest carries no db tags
// (it is control/model's wire type) and two columns decode from JSON with
// their own error messages, so it is scanned by position.
func scanManifest(row pgx.Row) (*model.KindManifest, error) {
	var (
		m                    model.KindManifest
		reactions, policy    []byte
		spec, status, config []byte
	)
	if err := row.Scan(&m.Kind, &m.KindVersion, &m.Description, &spec, &status, &config,
		&reactions, &m.FinalizerName, &policy); err != nil {
		return nil, err
	}
	m.SpecSchema, m.StatusSchema, m.ConfigSchema = nilIfEmpty(spec), nilIfEmpty(status), nilIfEmpty(config)
	if err := json.Unmarshal(reactions, &m.Reactions); err != nil {
		return nil, fmt.Errorf("decode reactions of %s/%d: %w", m.Kind, m.KindVersion, err)
	}
	if err := json.Unmarshal(policy, &m.Policy); err != nil {
		return nil, fmt.Errorf("decode policy of %s/%d: %w", m.Kind, m.KindVersion, err)
	}
	return &m, nil
}

func nilIfEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

const kindManifestGetSQL = `SELECT ` + manifestCols + ` FROM kind_manifest WHERE kind = $1 AND kind_version = $2`

// GetManifest returns the published manifest of (kind, version), or a
// *NotFoundError. Schemas come back as stored: equal as JSON to what was
// published, with keys in the database's order.
func (s *Store) GetManifest(ctx context.Context, kind string, version int) (*model.KindManifest, error) {
	if !model.ValidKindVersion(version) {
		return nil, manifestNotFound(kind, version)
	}
	m, err := scanManifest(s.reader(ctx).QueryRow(ctx, kindManifestGetSQL, kind, version))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, manifestNotFound(kind, version)
	}
	if err != nil {
		return nil, fmt.Errorf("get manifest %s/%d: %w", kind, version, err)
	}
	return m, nil
}

func manifestNotFound(kind string, version int) error {
	return &NotFoundError{Message: fmt.Sprintf("no manifest is published for %s/%d", kind, version)}
}

// ListManifestsParams filters ListManifests.
type ListManifestsParams struct {
	// Kind keeps only the versions of this kind; "" lists every kind.
	Kind string
}

const kindManifestListSQL = `SELECT ` + manifestCols + ` FROM kind_manifest
 WHERE ($1::text IS NULL OR kind = $1) ORDER BY kind, kind_version`

// ListManifests returns the published manifests ordered by kind and version.
// The set is small (one row per kind version), so it is not paginated.
func (s *Store) ListManifests(ctx context.Context, p ListManifestsParams) ([]*model.KindManifest, error) {
	var kind any
	if p.Kind != "" {
		kind = p.Kind
	}
	out, err := pgrun.Collect(ctx, s.reader(ctx), func(r pgx.CollectableRow) (*model.KindManifest, error) { return scanManifest(r) },
		kindManifestListSQL, kind)
	if err != nil {
		return nil, fmt.Errorf("list manifests: %w", err)
	}
	return out, nil
}

// KindVersions is one kind and the versions published for it.
type KindVersions struct {
	Kind     string `json:"kind" db:"kind"`
	Versions []int  `json:"versions" db:"versions"`
	// Reactor is true when every version is a reactor kind.
	Reactor bool `json:"reactor" db:"reactor"`
}

const kindListSQL = `SELECT kind, array_agg(kind_version::int ORDER BY kind_version) AS versions, bool_and(is_reactor) AS reactor
  FROM kind_manifest GROUP BY kind ORDER BY kind`

// ListKinds returns every kind with its published versions, ascending.
func (s *Store) ListKinds(ctx context.Context) ([]KindVersions, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), pgx.RowToStructByName[KindVersions], kindListSQL)
	if err != nil {
		return nil, fmt.Errorf("list kinds: %w", err)
	}
	return out, nil
}

const (
	kindManifestLockDeleteSQL = `SELECT is_reactor FROM kind_manifest WHERE kind = $1 AND kind_version = $2 FOR UPDATE`
	// The blockers are sampled, not counted: a name or three is enough to
	// act on, and resources is the hot table.
	kindManifestResourceUsersSQL = `SELECT name FROM resources WHERE kind = $1 AND kind_version = $2 LIMIT 4`
	kindManifestConfigUsersSQL   = `SELECT name FROM providerconfigs WHERE kind = $1 AND kind_version = $2 ORDER BY name LIMIT 4`
	// A binding blocks the deletion of the version it pins, or of the last
	// version of a kind it names without a version.
	kindManifestBindingUsersSQL = `SELECT name FROM reactor_bindings b
 WHERE (b.watch_kind = $1 AND (b.watch_kind_version = $2 OR (b.watch_kind_version IS NULL
          AND NOT EXISTS (SELECT 1 FROM kind_manifest m WHERE m.kind = $1 AND m.kind_version <> $2))))
    OR (b.reactor = $1 AND (b.reactor_version = $2 OR (b.reactor_version IS NULL
          AND NOT EXISTS (SELECT 1 FROM kind_manifest m WHERE m.kind = $1 AND m.kind_version <> $2 AND m.is_reactor))))
 ORDER BY name LIMIT 4`
	kindManifestDeleteSQL = `DELETE FROM kind_manifest WHERE kind = $1 AND kind_version = $2`
)

// DeleteManifest deletes the manifest of (kind, version) and its kind_config.
// It refuses with *ConflictError while resources, provider configs or reactor
// bindings still use that version, naming some of them; *NotFoundError if
// there is no such manifest.
func (s *Store) DeleteManifest(ctx context.Context, kind string, version int) error {
	if !model.ValidKindVersion(version) {
		return manifestNotFound(kind, version)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var reactor bool
		err := tx.QueryRow(ctx, kindManifestLockDeleteSQL, kind, version).Scan(&reactor)
		if errors.Is(err, pgx.ErrNoRows) {
			return manifestNotFound(kind, version)
		}
		if err != nil {
			return fmt.Errorf("lock manifest: %w", err)
		}
		for _, b := range []struct{ sql, what, fix string }{
			{kindManifestResourceUsersSQL, "resources", "delete them or re-apply them at another kind_version first"},
			{kindManifestConfigUsersSQL, "provider configs", "delete them first"},
			{kindManifestBindingUsersSQL, "reactor bindings", "delete or repoint them first"},
		} {
			names, err := sampleNames(ctx, tx, b.sql, kind, version)
			if err != nil {
				return err
			}
			if len(names) > 0 {
				return &ConflictError{
					Message: fmt.Sprintf("%s/%d is still used by %s (%s); %s", kind, version, b.what, listNames(names, 3), b.fix),
				}
			}
		}
		if _, err := tx.Exec(ctx, kindManifestDeleteSQL, kind, version); err != nil {
			if code, _ := pgCode(err); code == codeForeignKeyViolation {
				return &ConflictError{Message: fmt.Sprintf("%s/%d is still in use by resources or provider configs", kind, version)}
			}
			return fmt.Errorf("delete: %w", err)
		}
		return nil
	})
	return wrapUnlessTyped(err, "delete manifest %s/%d", kind, version)
}
