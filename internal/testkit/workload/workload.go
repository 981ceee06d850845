// Package workload holds the benchmark workloads the product's benchmarks
// (./dispatch, ./integration) and the peer benchmark (bench/peers) run, so
// every figure they print comes from the very same code: Q, F, H, the engine
// with the in-process executor (Inproc, Leaves) and the engine with the push
// dispatcher to a no-op webhooksdk provider on loopback (HTTP).
//
// Each workload takes its own fresh database (internal/testkit/pgtest: the
// test binary's TestMain calls pgtest.Main), warms up on a tenth of the load
// first, times n tasks, and returns their rate in tasks per second. Pools
// are configured as a converge process configures its own
// (engine.PoolDefaults) and their connections opened before anything is
// timed.
package workload

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/drainer"
	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/internal/testkit/benchq"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

// The workloads' parameters: the concurrency every dispatch path gets (the
// endpoint's max_concurrency, Inproc's Concurrency, H's workers), Q's
// claimers and batch, the batched path's max_batch, and the in-process
// executor's concurrency and claim batch for Leaves.
const (
	Concurrency       = 256
	QWorkers          = 2
	QBatch            = 256
	MaxBatch          = 32
	LeavesConcurrency = 512
	LeavesBatch       = 512
)

// discard is the workloads' logger: logging costs the measured paths
// nothing.
var discard = slog.New(slog.DiscardHandler)

// DB is one run's private database with the engine's drain duty running
// (for compositions; the leaves' outcomes are applied as they complete).
type DB struct {
	// DB is the database and its pool.
	DB *pgtest.Database
	// Eng is the engine over DB's pool.
	Eng *engine.Engine
	// St is the store over DB's pool.
	St *store.Store
	// Lis is the shared listener; Listen starts it after every Subscribe.
	Lis *store.Listener

	tb   testing.TB
	ctx  context.Context
	stop []func()
}

// NewDB returns a fresh database with the "leaf" kind and the drainer
// running. Close it when done.
func NewDB(tb testing.TB) *DB {
	tb.Helper()
	db := Pool(tb)
	x := &DB{tb: tb, DB: db, Eng: engine.New(db.Pool, engine.Config{}), St: store.New(db.Pool, store.Config{}), ctx: tb.Context()}
	x.Lis = x.St.NewListener(discard)
	x.Exec(`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`)
	dr := drainer.New(drainer.Config{}, x.Eng, x.Lis.Subscribe("outbox_ready"), discard)
	must(tb, dr.Start(x.ctx))
	x.OnClose(dr.Stop)
	return x
}

// Pool is a benchmark's database, its pool configured as a converge
// process configures its own (engine.PoolDefaults) and its connections
// opened and warmed before anything is timed, as a running process has
// them. Cold, a run's first second goes to loading catalogs and plans on
// new backends, and the tasks claimed in it make the run's latency tail.
func Pool(tb testing.TB) *pgtest.Database {
	tb.Helper()
	db := pgtest.NewWith(tb, func(c *pgxpool.Config) { engine.PoolDefaults(c, discard) })
	pgtest.Warm(tb, db.Pool)
	return db
}

// Context is the run's context (the benchmark's).
func (x *DB) Context() context.Context { return x.ctx }

// Exec runs sql on the database and fails the benchmark on error.
func (x *DB) Exec(sql string, args ...any) {
	x.tb.Helper()
	_, err := x.DB.Pool.Exec(x.ctx, sql, args...)
	must(x.tb, err)
}

// OnClose registers f to run on Close, after what is registered later.
func (x *DB) OnClose(f func()) { x.stop = append(x.stop, f) }

// Listen starts the shared listener; call it after every Subscribe.
func (x *DB) Listen() {
	must(x.tb, x.Lis.Start(x.ctx))
	x.OnClose(x.Lis.Stop)
}

// Close stops every duty (last started first) and closes the pool now, so
// the rounds do not pile up connections.
func (x *DB) Close() {
	for i := len(x.stop) - 1; i >= 0; i-- {
		x.stop[i]()
	}
	x.DB.Pool.Close()
}

// Seed warms the engine with a tenth of the load (as benchq warms Q: the
// ratios compare steady states), then inserts n leaf resources, not yet
// scheduled.
func (x *DB) Seed(n int) {
	x.tb.Helper()
	x.Exec(`INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'leaf', 1, 'w-' || i, jsonb_build_object('i', i) FROM generate_series(1, $1) i`, max(n/10, 1))
	start := time.Now()
	x.schedule()
	x.Settle(start)
	x.Exec(`INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'leaf', 1, 'r-' || i, jsonb_build_object('i', i) FROM generate_series(1, $1) i`, n)
	x.Exec(`VACUUM ANALYZE resources`)
}

// schedule schedules every lagging resource.
func (x *DB) schedule() {
	x.Exec(`SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`)
}

// Converge schedules the seeded resources and returns the rate at which
// they all reach Ready. The clock includes the scheduling (the queue
// insert), as a peer's includes its insert of the jobs.
func (x *DB) Converge(n int) float64 {
	x.tb.Helper()
	start := time.Now()
	x.schedule()
	rate := float64(n) / x.Settle(start).Seconds()
	var ready int
	must(x.tb, x.DB.Pool.QueryRow(x.ctx, `SELECT count(*) FROM resources WHERE phase = 'Ready' AND name LIKE 'r-%'`).Scan(&ready))
	if ready != n {
		x.tb.Fatalf("%d of %d resources Ready", ready, n)
	}
	return rate
}

// Settle waits until no resource lags and returns the time since start.
func (x *DB) Settle(start time.Time) time.Duration {
	x.tb.Helper()
	// A coarse tick: the probe scans resources, and polling it hard would
	// take CPU from the engine it measures.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := start.Add(5 * time.Minute)
	for {
		var lagging bool
		must(x.tb, x.DB.Pool.QueryRow(x.ctx, `SELECT EXISTS (SELECT 1 FROM resources
			WHERE synced_gen < generation AND deletion_requested_at IS NULL AND frozen_until IS NULL)`).Scan(&lagging))
		if !lagging {
			break
		}
		if time.Now().After(deadline) {
			x.tb.Fatalf("resources did not converge within 5m")
		}
		<-tick.C
	}
	return time.Since(start)
}

// Q is the raw claim+complete ceiling (internal/testkit/benchq) with
// QWorkers claimers of QBatch rows, each over its own shard range.
func Q(tb testing.TB, n int) float64 {
	tb.Helper()
	x := NewDB(tb)
	defer x.Close()
	q, err := benchq.Run(x.ctx, x.DB.Pool, n, benchq.Config{Workers: QWorkers, Batch: QBatch})
	must(tb, err)
	return q
}

// Floor is F (benchq.Floor) on a database with no engine duties running:
// the floor does its own completing.
func Floor(tb testing.TB, n int) float64 {
	tb.Helper()
	db := Pool(tb)
	defer db.Pool.Close()
	f, err := benchq.Floor(tb.Context(), db.Pool, n, benchq.FloorConfig{})
	must(tb, err)
	return f
}

// Inproc runs the engine with the in-process executor at Concurrency (the
// dispatch paths' concurrency): the ceiling of the HTTP paths.
func Inproc(tb testing.TB, n int) float64 {
	tb.Helper()
	return inprocRun(tb, n, inproc.Config{Concurrency: Concurrency})
}

// Leaves runs the engine with the in-process executor at LeavesConcurrency,
// claiming LeavesBatch at a time: the engine's no-op leaves.
func Leaves(tb testing.TB, n int) float64 {
	tb.Helper()
	return inprocRun(tb, n, inproc.Config{Concurrency: LeavesConcurrency, BatchSize: LeavesBatch})
}

func inprocRun(tb testing.TB, n int, cfg inproc.Config) float64 {
	tb.Helper()
	x := NewDB(tb)
	defer x.Close()
	cfg.Handlers = map[string]inproc.Handler{"leaf/1": inproc.HandlerFunc(Noop)}
	ex := inproc.New(cfg, x.Eng, x.Lis.Subscribe("work_ready"), discard)
	must(tb, ex.Start(x.ctx))
	x.OnClose(ex.Stop)
	x.Listen()
	x.Seed(n)
	return x.Converge(n)
}

// Median is the median of xs (the mean of the middle two when even): the
// benchmarks report medians of interleaved rounds or pairs.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Noop is the work every path runs: nothing, a success with an empty status.
func Noop(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
