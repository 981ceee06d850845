package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/drainer"
	ctlengine "github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/internal/testkit/applylog"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestMain runs the tests, or converge itself in a process a test started
// (startProcess).
func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) != "" {
		os.Exit(serveMain())
	}
	pgtest.Main(m)
}

// engine is a running control plane on a private database: the drain duty,
// optionally the reaper, and in-process executors.
type engine struct {
	t     testing.TB
	db    *pgtest.Database
	eng   *ctlengine.Engine
	st    *store.Store
	lis   *store.Listener
	log   *slog.Logger
	calls *callLog
}

type engineOpts struct {
	reaper   *reaper.Config // nil: no reaper
	noDrain  bool
	retryMax time.Duration
	// noApplyLog leaves out the apply-log trigger tests check double
	// applies with: a profile of the engine's statements must not count it.
	noApplyLog bool
}

func newEngine(t testing.TB, o engineOpts) *engine {
	t.Helper()
	db := pgtest.New(t)
	if _, test := t.(*testing.T); test && !o.noApplyLog { // benchmarks do not pay for it
		must(t, applylog.Install(t.Context(), db.Pool))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng := ctlengine.New(db.Pool, ctlengine.Config{RetryBase: 20 * time.Millisecond, RetryMax: max(o.retryMax, 200*time.Millisecond)})
	st := store.New(db.Pool, store.Config{})
	e := &engine{t: t, db: db, eng: eng, st: st, log: log, calls: &callLog{n: map[string]int{}}}
	e.lis = st.NewListener(log)
	outbox := e.lis.Subscribe("outbox_ready")
	ctx := t.Context()
	if !o.noDrain {
		d := drainer.New(drainer.Config{Poll: 100 * time.Millisecond},
			eng, outbox, log)
		must(t, d.Start(ctx))
		t.Cleanup(d.Stop)
	}
	if o.reaper != nil {
		r, err := reaper.New(*o.reaper, eng, st, log)
		must(t, err)
		must(t, r.Start(ctx))
		t.Cleanup(r.Stop)
	}
	return e
}

// run starts an in-process executor serving handlers.
func (e *engine) run(cfg inproc.Config, handlers map[string]inproc.Handler) *inproc.Executor {
	e.t.Helper()
	cfg.Handlers = handlers
	if cfg.Poll == 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	x := inproc.New(cfg, e.eng, e.lis.Subscribe("work_ready"), e.log)
	must(e.t, x.Start(e.t.Context()))
	e.t.Cleanup(x.Stop)
	return x
}

// listen starts the shared listener; call after every Subscribe.
func (e *engine) listen() {
	must(e.t, e.lis.Start(e.t.Context()))
	e.t.Cleanup(e.lis.Stop)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// manifest stores a kind manifest directly (the API tests cover the API path).
func (e *engine) manifest(kind string, version int, reactions string, policy model.Policy) {
	e.t.Helper()
	p, _ := json.Marshal(policy)
	_, err := e.db.Pool.Exec(e.t.Context(),
		`INSERT INTO kind_manifest (kind, kind_version, reactions, policy) VALUES ($1, $2, $3, $4)`,
		kind, version, reactions, p)
	must(e.t, err)
}

// apply creates or updates a resource and schedules it, as the API does.
func (e *engine) apply(kind, name string, spec any) string {
	e.t.Helper()
	b, _ := json.Marshal(spec)
	var id string
	err := e.db.Pool.QueryRow(e.t.Context(), `
		WITH up AS (
			INSERT INTO resources (kind, kind_version, name, spec) VALUES ($1, 1, $2, $3)
			ON CONFLICT (namespace, kind, name) DO UPDATE SET spec = EXCLUDED.spec
			RETURNING id)
		SELECT id FROM up`, kind, name, b).Scan(&id)
	must(e.t, err)
	_, err = e.db.Pool.Exec(e.t.Context(), `SELECT schedule_eligible(ARRAY[$1::uuid])`, id)
	must(e.t, err)
	return id
}

type row struct {
	ID, Phase                      string
	Generation, SyncedGen, SpecGen int64
	HealthOK                       bool
	Status, Spec                   json.RawMessage
}

func (e *engine) get(kind, name string) (row, bool) {
	var r row
	err := e.db.Pool.QueryRow(context.WithoutCancel(e.t.Context()), `SELECT id, phase, generation, synced_gen, spec_gen, health_ok, status, spec
		FROM resources WHERE kind = $1 AND name = $2`, kind, name).
		Scan(&r.ID, &r.Phase, &r.Generation, &r.SyncedGen, &r.SpecGen, &r.HealthOK, &r.Status, &r.Spec)
	if err != nil {
		return r, false
	}
	return r, true
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-tick.C
	}
}

func (e *engine) waitPhase(kind, name, phase string, within time.Duration) row {
	e.t.Helper()
	var r row
	waitFor(e.t, within, fmt.Sprintf("%s/%s to be %s", kind, name, phase), func() bool {
		var ok bool
		r, ok = e.get(kind, name)
		return ok && r.Phase == phase
	})
	return r
}

func (e *engine) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	must(e.t, e.db.Pool.QueryRow(context.WithoutCancel(e.t.Context()), sql, args...).Scan(&n))
	return n
}

// checkInvariants is run at the end of every engine test: no resource is
// synced past its generation, and no (resource, generation) of a leaf had
// its specChange outcome applied twice.
func (e *engine) checkInvariants() {
	e.t.Helper()
	if n := e.count(`SELECT count(*) FROM resources WHERE synced_gen > generation`); n != 0 {
		e.t.Errorf("invariant: %d resources have synced_gen > generation", n)
	}
	if _, test := e.t.(*testing.T); !test {
		return
	}
	n, err := applylog.DoubleApplied(context.WithoutCancel(e.t.Context()), e.db.Pool)
	must(e.t, err)
	if n != 0 {
		e.t.Errorf("invariant: %d (resource, generation) pairs had a specChange outcome applied twice", n)
	}
}

// callLog counts handler invocations by key.
type callLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callLog) add(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
	return c.n[key]
}

func (c *callLog) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// newReaper returns a reaper over e's engine and store; tests run its
// passes by hand.
func (e *engine) newReaper(cfg reaper.Config) *reaper.Reaper {
	e.t.Helper()
	r, err := reaper.New(cfg, e.eng, e.st, e.log)
	must(e.t, err)
	return r
}
