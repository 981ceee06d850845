// Package engine is the Go side of the engine's hot path: the calls the
// dispatcher, the callback receiver, the drainer and the reaper make into
// the plpgsql of migrations/engine/. The API's reads and writes are
// control/store's; the engine imports neither it nor the API.
//
// Each file calls one migrations/engine/*.sql concern and is named for it:
// claims.go calls claims.sql (claim_tasks, extend_leases, release_tasks),
// completion.go completion.sql (complete_tasks, expire_async_tasks),
// drain.go drain.sql, rollup.go rollup.sql, events.go events.sql, reaper.go
// reaper.sql, resync.go resync.sql and warm.go warm.sql; request.go reads
// what a claimed task's request carries. The rules every writer must keep
// (the claim fence on claim_epoch, scheduling, the lock order) live in the
// database, not here.
//
// Methods are named noun first, the noun being what they act on
// (TaskClaim, LeaseExtend, OutboxDrain), so each table's calls sort
// together; a method that takes several values takes an XParams struct.
// Every method runs its statements on the pool and holds no transaction
// across a call out of the process.
package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
)

// Config tunes the engine. The zero value takes every default.
type Config struct {
	// MaxStatusBytes caps a stored status document; a larger one fails its
	// task terminally without being stored. Defaults to 16 MiB.
	MaxStatusBytes int
	// RetryBase is the first backoff of a task whose attempt failed
	// transiently; each further attempt doubles it (jittered 50-100%).
	// Defaults to 1s.
	RetryBase time.Duration
	// RetryMax caps that backoff. Defaults to 5m.
	RetryMax time.Duration
	// SpecCheck validates a composed child's spec against its kind
	// version's schema (store.KindCache.CheckComposedSpec), so a composer
	// cannot create a resource the API would refuse. It returns nil for a
	// kind version it does not know: the drain's foreign key refuses a kind
	// that does not exist. Nil checks nothing.
	SpecCheck func(kind string, version int, spec json.RawMessage) error
}

// The Config defaults.
const (
	MaxStatusBytesDefault = 16 << 20
	RetryBaseDefault      = time.Second
	RetryMaxDefault       = 5 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.MaxStatusBytes <= 0 {
		c.MaxStatusBytes = MaxStatusBytesDefault
	}
	c.RetryBase = cmp.Or(c.RetryBase, RetryBaseDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	return c
}

// Engine calls the engine's functions in Postgres.
type Engine struct {
	pool *pgxpool.Pool
	cfg  Config
}

// New returns an Engine over pool.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	return &Engine{pool: pool, cfg: cfg.withDefaults()}
}

// retryMillis is the transient-retry backoff as the engine's functions take
// it: base and cap in milliseconds.
func (e *Engine) retryMillis() (base, limit int) {
	return int(e.cfg.RetryBase / time.Millisecond), int(e.cfg.RetryMax / time.Millisecond)
}

// scalarInt runs sql, which returns one integer, and wraps its error with
// what.
func (e *Engine) scalarInt(ctx context.Context, what, sql string, args ...any) (int, error) {
	var n int
	if err := e.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// taskKeys returns tasks' claims as parameters: the IDs as a uuid[]
// literal, the shards and the claim epochs.
func taskKeys(tasks []model.Task) (ids string, shards []int16, claimEpochs []int64) {
	idList := make([]string, len(tasks))
	shards = make([]int16, len(tasks))
	claimEpochs = make([]int64, len(tasks))
	for i, t := range tasks {
		idList[i], shards[i], claimEpochs[i] = t.ID, t.Shard, t.ClaimEpoch
	}
	return pgrun.UUIDArray(idList), shards, claimEpochs
}
