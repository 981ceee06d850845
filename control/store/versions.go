package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/internal/pgrun"
)

// Precondition makes a write conditional on the version of the object it
// writes (optimistic concurrency): every object a user owns carries a
// resource_version that changes on each write of it, and a writer that
// names the version it read is refused with a *PreconditionError when the
// object has moved on since, instead of silently overwriting the other
// writer's change. The zero value is no condition: the write goes ahead
// whatever the version.
type Precondition struct {
	// Versions lists the versions the object may be at (HTTP If-Match's
	// entity tags, or the resource_version of an applied document).
	Versions []int64
	// Exists requires only that the object exists (If-Match: *).
	Exists bool
}

// IfVersion is the precondition that the object is at version v; 0 is no
// condition.
func IfVersion(v int64) Precondition {
	if v == 0 {
		return Precondition{}
	}
	return Precondition{Versions: []int64{v}}
}

// set reports whether p is a condition at all.
func (p Precondition) set() bool { return p.Exists || len(p.Versions) > 0 }

// holds reports whether p holds for an object at version current (0: no
// such object): require_version's rule, for the callers that read the
// version themselves.
func (p Precondition) holds(current int64) bool {
	return current != 0 && (len(p.Versions) == 0 || slices.Contains(p.Versions, current))
}

// expected is p as require_version takes it: '{}' for Exists.
func (p Precondition) expected() []int64 {
	if len(p.Versions) == 0 {
		return []int64{}
	}
	return p.Versions
}

// PreconditionError refuses a conditional write: the object is at another
// version than the writer named, or does not exist. The write changed
// nothing.
type PreconditionError struct {
	// What names the object, e.g. `resource vpc/a`.
	What string
	// Current is the object's version; 0 when it does not exist.
	Current int64
}

func (e *PreconditionError) Error() string {
	if e.Current == 0 {
		return e.What + " does not exist"
	}
	return fmt.Sprintf("%s is at resource_version %d: it changed since that version was read", e.What, e.Current)
}

// codePrecondition is require_version's SQLSTATE (engine/versions.sql).
const codePrecondition = "CV412"

// requireVersionSQL checks a precondition in the write's own transaction,
// before the write: lock is a SELECT of the object's resource_version FOR
// UPDATE, keyed by $3 (and $4), so the version cannot move between the
// check and the write.
func requireVersionSQL(lock string) string {
	return `SELECT require_version($1, (` + lock + `), $2)`
}

// The lock reads of each versioned table, for requireVersionSQL.
const (
	resourceVersionLock       = `SELECT resource_version FROM resources WHERE namespace = $3 AND kind = $4 AND name = $5 FOR UPDATE`
	kindConfigVersionLock     = `SELECT resource_version FROM kind_config WHERE kind = $3 AND kind_version = $4 FOR UPDATE`
	providerConfigVersionLock = `SELECT resource_version FROM providerconfigs WHERE name = $3 FOR UPDATE`
	bindingVersionLock        = `SELECT resource_version FROM reactor_bindings WHERE name = $3 FOR UPDATE`
	endpointVersionLock       = `SELECT resource_version FROM endpoints WHERE name = $3 FOR UPDATE`
)

// checkVersion checks p in tx before a write of the object what, whose
// version lock reads (keyed by key); no condition checks nothing.
func checkVersion(ctx context.Context, tx pgx.Tx, p Precondition, what, lock string, key ...any) error {
	if !p.set() {
		return nil
	}
	if _, err := tx.Exec(ctx, requireVersionSQL(lock), append([]any{what, p.expected()}, key...)...); err != nil {
		if pe := asPrecondition(err, what); pe != nil {
			return pe
		}
		return err
	}
	return nil
}

// writer runs statements: the pool, or a transaction.
type writer interface {
	pgrun.Querier
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// writeIf runs write, a write of the object what that a single statement
// makes, under the precondition pre: with none, on the pool alone as
// before; with one, in a transaction that checks pre first (checkVersion).
func (s *Store) writeIf(ctx context.Context, pre Precondition, what, lock string, key []any, write func(writer) error) error {
	if !pre.set() {
		return write(s.pool)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := checkVersion(ctx, tx, pre, what, lock, key...); err != nil {
			return err
		}
		return write(tx)
	})
}

// asPrecondition turns require_version's refusal into a
// *PreconditionError naming what; it returns nil for any other error.
func asPrecondition(err error, what string) *PreconditionError {
	code, pe := pgCode(err)
	if code != codePrecondition {
		return nil
	}
	cur, _ := strconv.ParseInt(pe.Detail, 10, 64) // '' when the object does not exist
	return &PreconditionError{What: what, Current: cur}
}
