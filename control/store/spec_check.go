package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/schema"
)

// specCheckFunc validates a spec against its (kind, version) schema.
type specCheckFunc func(kind string, version int, spec json.RawMessage) error

// setSpecCheck installs the validator that ApplyResource runs.
// NewKindCache, its only caller, calls it once before the store is shared.
func (s *Store) setSpecCheck(f specCheckFunc) { s.specCheck = f }

const kindManifestSpecSchemaSQL = `SELECT spec_schema FROM kind_manifest
 WHERE kind = $1 AND kind_version = $2 AND ($3::timestamptz IS NULL OR updated_at <> $3)`

// checkSpec validates spec through the installed validator (the KindCache)
// and falls back to the database when the validator cannot answer or may be
// stale: a kind version it does not hold yet (published on another pod a
// moment ago), or a violation found against a cached schema the database
// has since widened. The fallback compiles the stored schema; it runs only
// on those rare paths, or on every call when no validator is installed.
func (s *Store) checkSpec(ctx context.Context, kind string, version int, spec json.RawMessage) error {
	if s.specCheck != nil {
		err := s.specCheck(kind, version, spec)
		var (
			stale *staleSpecError
			ve    *schema.ValidationError
		)
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stale):
			// Refuse only if the database holds no newer schema.
			raw, newer, err := s.loadSpecSchema(ctx, kind, version, &stale.cachedAt)
			if err != nil {
				return err
			}
			if !newer {
				return &DocumentError{Location: "spec", Kind: kind, KindVersion: version, Violations: stale.Violations}
			}
			return validateAgainst(raw, kind, version, spec)
		case errors.As(err, &ve):
			return &DocumentError{Location: "spec", Kind: kind, KindVersion: version, Violations: ve.Violations}
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("validate spec of %s/%d: %w", kind, version, err)
		}
	}
	raw, found, err := s.loadSpecSchema(ctx, kind, version, nil)
	if err != nil {
		return err
	}
	if !found {
		return s.kindNotFound(ctx, kind, version)
	}
	return validateAgainst(raw, kind, version, spec)
}

// loadSpecSchema reads the stored spec schema of (kind, version) — when
// changedSince is set, only if the row changed since then. found is false
// when no such row matches.
func (s *Store) loadSpecSchema(ctx context.Context, kind string, version int, changedSince *time.Time) (json.RawMessage, bool, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, kindManifestSpecSchemaSQL, kind, version, changedSince).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("load spec schema of %s/%d: %w", kind, version, err)
	}
	return raw, true, nil
}

func validateAgainst(raw json.RawMessage, kind string, version int, spec json.RawMessage) error {
	sch, err := schema.Compile(raw)
	if err != nil {
		return fmt.Errorf("the stored spec_schema of %s/%d does not compile: %w", kind, version, err)
	}
	err = sch.Validate(spec)
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		return &DocumentError{Location: "spec", Kind: kind, KindVersion: version, Violations: ve.Violations}
	}
	if err != nil {
		return fmt.Errorf("validate spec of %s/%d: %w", kind, version, err)
	}
	return nil
}

// kindNotFound says whether the kind or only the version is unknown.
func (s *Store) kindNotFound(ctx context.Context, kind string, version int) error {
	versions := s.knownVersions(ctx, kind)
	if len(versions) == 0 {
		return &NotFoundError{Location: "kind", Message: fmt.Sprintf("kind %q is not published (no manifest for %s/%d)", kind, kind, version)}
	}
	vs := make([]string, len(versions))
	for i, v := range versions {
		vs[i] = strconv.Itoa(v)
	}
	return &NotFoundError{Location: "kind_version", Message: fmt.Sprintf(
		"kind %q has no version %d (published: %s)", kind, version, strings.Join(vs, ", "))}
}

const kindVersionsSQL = `SELECT kind_version::int FROM kind_manifest WHERE kind = $1 ORDER BY kind_version`

// knownVersions lists the published versions of kind for an error message;
// it returns nil on any failure (the message then just says less).
func (s *Store) knownVersions(ctx context.Context, kind string) []int {
	rows, err := s.pool.Query(ctx, kindVersionsSQL, kind)
	if err != nil {
		return nil
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil
	}
	return vs
}
