// Package store reads and writes what the API and the registries serve:
// kinds, resources, provider configs, bindings, endpoints, the delivery
// log, operations, cluster membership. The engine's hot path (claims,
// requests, completions, the drain, the reaper's passes) is
// control/engine's; store and engine are the only code that speaks SQL.
// Callers pass plain Go values or XParams structs; the store owns every
// transaction and never holds one across a call out of the process.
//
// Queries live next to the methods that run them, one file per table or
// concern: kind_manifest.go, kind_config.go, resources.go,
// providerconfigs.go, bindings.go, endpoints.go, deliveries.go,
// operations.go, cluster.go, and the API's views of the engine's state
// (resource_task.go, pending_reactions.go) and operator actions
// (reconcile_now.go). A dry run (dryrun.go) runs any of them in a
// transaction that is rolled back. Behaviour that must hold for every writer — the
// manifest lattice, the generation bump, scheduling, the claim fence —
// lives in the database (migrations/), not here.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/internal/pgrun"
)

// Config tunes the store. The zero value takes every default.
type Config struct {
	// SpecHistoryLimit is how many spec revisions each root resource keeps
	// (the newest). Defaults to 20.
	SpecHistoryLimit int
	// ReadPool, when set, serves the read methods called with a context
	// marked by PreferReadPool (the API's GET routes): a replica, say, so
	// reads take no primary connections. A read it cannot reach runs on the
	// pool instead, and reads skip it for ReadPoolRetry. Nil: everything
	// uses the pool.
	ReadPool *pgxpool.Pool
}

// SpecHistoryLimitDefault is Config.SpecHistoryLimit's default.
const SpecHistoryLimitDefault = 20

func (c Config) withDefaults() Config {
	if c.SpecHistoryLimit <= 0 {
		c.SpecHistoryLimit = SpecHistoryLimitDefault
	}
	return c
}

// ReadPoolRetry is how long reads skip Config.ReadPool once it could not
// be reached: they run on the pool meanwhile, and the first read after it
// tries the read pool again.
const ReadPoolRetry = 5 * time.Second

// Store reads and writes the control plane's state in Postgres.
type Store struct {
	pool      pool      // seen through dry runs (dryrun.go)
	read      *readPool // Config.ReadPool, or nil
	cfg       Config
	specCheck specCheckFunc
}

// New returns a Store over pool.
func New(p *pgxpool.Pool, cfg Config) *Store {
	return &Store{pool: pool{p}, read: newReadPool(cfg.ReadPool), cfg: cfg.withDefaults()}
}

// Over returns a Store with s's configuration and spec validator over other
// pools: pool for everything, read (nil: none) for the reads PreferReadPool
// marks. A converge process gives its API one over the API's own pool, so
// that API requests never hold the engine's connections. Call it once the
// validator is installed (NewKindCache), so the copy has it too.
func (s *Store) Over(p, read *pgxpool.Pool) *Store {
	o := *s
	o.pool, o.read, o.cfg.ReadPool = pool{p}, newReadPool(read), read
	return &o
}

// readPoolKey marks a context whose reads may use the read pool.
type readPoolKey struct{}

// PreferReadPool marks ctx so the store's read methods (gets and lists of
// resources, kinds, events, endpoints, operations and the like) run on
// Config.ReadPool, if there is one. A read pool may be a replica a little
// behind, so mark only reads that need not see the caller's own writes: a
// write, and a read after it, keeps an unmarked context. Writes, and the
// engine's reads of the work queue (UNLOGGED, so absent from replicas),
// always use the pool: a write method never looks at the mark.
func PreferReadPool(ctx context.Context) context.Context {
	return context.WithValue(ctx, readPoolKey{}, true)
}

// querier is what a read method runs its statements through: a pool, or
// the read pool falling back to the pool.
type querier interface {
	pgrun.Querier
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// reader is what a read method runs on: for a context PreferReadPool
// marked, the read pool, if there is one and it has not failed within
// ReadPoolRetry, falling back to the pool if it cannot be reached; else
// (and always under a dry run, whose writes only its own transaction sees)
// the pool.
func (s *Store) reader(ctx context.Context) querier {
	switch {
	case s.read == nil || ctx.Value(readPoolKey{}) == nil || IsDryRun(ctx):
		return s.pool
	case !s.read.usable():
		s.read.fallbacks.Add(1)
		return s.pool
	}
	return fallback{read: s.read, write: s.pool.Pool}
}

// ReadFallbacks counts the statements of reads marked for the read pool
// that ran on the pool instead: the read pool could not be reached, or had
// not been within ReadPoolRetry. Zero without a read pool.
func (s *Store) ReadFallbacks() uint64 {
	if s.read == nil {
		return 0
	}
	return s.read.fallbacks.Load()
}

// readPool is Config.ReadPool and when it last could not be reached.
type readPool struct {
	pool *pgxpool.Pool
	// skipUntil is when reads may try pool again (Unix nanoseconds) after
	// it could not be reached.
	skipUntil atomic.Int64
	// fallbacks counts the statements run on the pool instead
	// (ReadFallbacks).
	fallbacks atomic.Uint64
}

func newReadPool(p *pgxpool.Pool) *readPool {
	if p == nil {
		return nil
	}
	return &readPool{pool: p}
}

// usable reports whether reads may try the read pool.
func (r *readPool) usable() bool { return time.Now().UnixNano() >= r.skipUntil.Load() }

// unreachable reports whether a read's err says the read pool cannot be
// reached (a connection that cannot be opened, for whatever reason, or one
// that broke), and if so skips the read pool for ReadPoolRetry and counts
// the fallback its caller runs. A read whose own context ended is not the
// pool's fault.
func (r *readPool) unreachable(ctx context.Context, err error) bool {
	var ce *pgconn.ConnectError
	if ctx.Err() != nil || !errors.As(err, &ce) && !pgrun.Unreachable(err) {
		return false
	}
	r.skipUntil.Store(time.Now().Add(ReadPoolRetry).UnixNano())
	r.fallbacks.Add(1)
	return true
}

// fallback runs a read on the read pool, and on the pool instead when the
// read pool cannot be reached: a read is safe to run twice.
type fallback struct {
	read  *readPool
	write *pgxpool.Pool
}

// Query runs sql on the read pool, or on the pool if that cannot be
// reached. A connection that breaks once rows have come back fails the
// read (the rows are the caller's by then); the read pool drops it, and
// the next read opens another.
func (f fallback) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := f.read.pool.Query(ctx, sql, args...)
	if err != nil && f.read.unreachable(ctx, err) {
		return f.write.Query(ctx, sql, args...)
	}
	return rows, err
}

// QueryRow runs sql as Query does, when the row is scanned.
func (f fallback) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return fallbackRow{f: f, ctx: ctx, sql: sql, args: args}
}

// fallbackRow is a QueryRow on the read pool, run again on the pool when
// the read pool cannot be reached (nothing was scanned then).
type fallbackRow struct {
	f    fallback
	ctx  context.Context
	sql  string
	args []any
}

// Scan runs the query and scans its row into dest.
func (r fallbackRow) Scan(dest ...any) error {
	err := r.f.read.pool.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	if err != nil && r.f.read.unreachable(r.ctx, err) {
		return r.f.write.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	}
	return err
}

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

// ApplyResult says what an idempotent write did, so a client re-applying the
// same document on every deploy can tell a no-op from a change.
type ApplyResult string

// The three apply results.
const (
	ApplyCreated    ApplyResult = "created"
	ApplyConfigured ApplyResult = "configured"
	ApplyUnchanged  ApplyResult = "unchanged"
)

// errRetry asks a write loop to run its transaction again: a concurrent
// writer created the row between our read and our insert.
var errRetry = errors.New("retry")

// maxWriteAttempts bounds errRetry loops. Two suffice (the second attempt
// sees the row the first lost to); the third is slack.
const maxWriteAttempts = 3

// List page sizes.
const (
	ListLimitDefault = 100
	ListLimitMax     = 1000
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

// sampleNames runs a name-sampling query.
func sampleNames(ctx context.Context, q pgrun.Querier, sql string, args ...any) ([]string, error) {
	names, err := pgrun.Collect(ctx, q, pgx.RowTo[string], sql, args...)
	if err != nil {
		return nil, fmt.Errorf("find users: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// listNames renders up to max names and says when there are more.
func listNames(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:max], ", ") + " and more"
}
