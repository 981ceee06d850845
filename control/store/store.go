// Package store is the only code that speaks SQL. Callers pass plain Go values
// or XParams structs; the store owns every transaction and never holds one
// across a call out of the process.
//
// Queries live next to the methods that run them, one file per table or
// concern (kinds.go, resources.go, engine.go, ...). Behaviour that must hold
// for every writer — the manifest lattice, the generation bump, scheduling,
// the claim fence — lives in the database (migrations/), not here.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound means the named object does not exist.
var ErrNotFound = errors.New("not found")

// ConflictError means the request contradicts stored state (409). Details
// lists each reason, e.g. each breaking schema change.
type ConflictError struct {
	Message string
	Details []string
}

func (e *ConflictError) Error() string {
	if len(e.Details) == 0 {
		return e.Message
	}
	return e.Message + ": " + strings.Join(e.Details, "; ")
}

// InvalidError means a field breaks a rule the request could not know from
// its own shape alone (422), e.g. a reference to a config of another version.
type InvalidError struct {
	Location string
	Message  string
}

func (e *InvalidError) Error() string { return e.Location + ": " + e.Message }

// Config tunes the store. The zero value takes every default.
type Config struct {
	// MaxStatusBytes caps a stored status document; a larger one fails its
	// task terminally without being stored. Defaults to 16 MiB.
	MaxStatusBytes int
}

// MaxStatusBytesDefault is the default MaxStatusBytes.
const MaxStatusBytesDefault = 16 << 20

func (c Config) withDefaults() Config {
	if c.MaxStatusBytes <= 0 {
		c.MaxStatusBytes = MaxStatusBytesDefault
	}
	return c
}

// Store reads and writes the control plane's state in Postgres.
type Store struct {
	pool      *pgxpool.Pool
	cfg       Config
	specCheck SpecCheckFunc
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool, cfg Config) *Store {
	return &Store{pool: pool, cfg: cfg.withDefaults()}
}

// Pool returns the underlying pool (for LISTEN connections and health pings).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// inTx runs fn in a transaction, committing if it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) (string, *pgconn.PgError) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe
	}
	return "", nil
}

// SQLSTATEs the store maps to API errors.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeCheckViolation      = "23514"
)

// pageLimit validates a list's page size: ListLimitDefault when 0, else
// 1..ListLimitMax.
func pageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return ListLimitDefault, nil
	case limit < 0 || limit > ListLimitMax:
		return 0, &InvalidError{Location: "limit", Message: fmt.Sprintf("must be in 1..%d (got %d)", ListLimitMax, limit)}
	}
	return limit, nil
}

// queryArgs collects the arguments of a query built from optional filters.
type queryArgs []any

// add appends v and returns its placeholder ($1, $2, ...).
func (a *queryArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}
