package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/internal/testkit/benchq"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/internal/testkit/workload"
	"github.com/convergeplane/converge/webhooksdk"
)

// BenchmarkEngineThroughput measures the engine end to end with the
// in-process executor (no-op work) against Q, a raw batched SKIP LOCKED
// claim + delete loop on an equivalent sharded UNLOGGED table, in the same
// run, and against F, the design floor (benchq.Floor: the engine's row
// writes as bare SQL). Each round runs Q, the floor, 10k independent leaves and a
// 10k-child composite, interleaved; it reports medians. Run it with -benchtime=1x (make bench).
func BenchmarkEngineThroughput(b *testing.B) {
	n, rounds := 10_000, 5
	if testing.Short() {
		n, rounds = 2_000, 3
	}
	var q, floor, leaves, comp []float64
	for range b.N {
		for r := range rounds {
			q = append(q, measure(b, "Q", n, benchQ))
			floor = append(floor, measure(b, "floor", n, benchFloor))
			leaves = append(leaves, measure(b, "leaves", n, benchLeaves))
			comp = append(comp, measure(b, "composite", n, benchComposite))
			fmt.Printf("round %d: Q %.0f/s, floor %.0f/s, leaves %.0f/s, composite %.0f/s\n",
				r+1, q[len(q)-1], floor[len(floor)-1], leaves[len(leaves)-1], comp[len(comp)-1])
		}
	}
	mq, mf, ml, mc := median(q), median(floor), median(leaves), median(comp)
	b.ReportMetric(mq, "Q_tasks/s")
	b.ReportMetric(mf, "floor_tasks/s")
	b.ReportMetric(ml, "leaves/s")
	b.ReportMetric(mc, "composite_children/s")
	b.ReportMetric(mf/mq, "floor/Q")
	b.ReportMetric(ml/mq, "leaves/Q")
	b.ReportMetric(ml/mf, "leaves/floor")
	b.ReportMetric(ml/mc, "composite_time/leaves_time")
	fmt.Printf("engine: n=%d rounds=%d  Q=%.0f tasks/s  floor=%.0f tasks/s (%.3f·Q)  leaves=%.0f res/s (%.3f·Q, %.2f of the floor)  composite=%.0f children/s (%.2fx the leaves' time)\n",
		n, rounds, mq, mf, mf/mq, ml, ml/mq, ml/mf, mc, ml/mc)
}

// measure runs one workload as a sub-benchmark, so its database, pool and
// engine are torn down before the next workload starts: idle engines left
// polling would take CPU from the ones being measured.
func measure(b *testing.B, name string, n int, f func(*testing.B, int) float64) float64 {
	var rate float64
	b.Run(name, func(b *testing.B) { rate = f(b, n) })
	return rate
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchQ is the ceiling (see internal/testkit/benchq), with as many claimers as
// the engine runs hot loops here: the executor's claim loop and its
// completer.
func benchQ(b *testing.B, n int) float64 {
	b.Helper()
	db := pgtest.New(b)
	q, err := benchq.Run(b.Context(), db.Pool, n, benchq.Config{Workers: 2})
	must(b, err)
	return q
}

// benchFloor is F, the design floor (see benchq.Floor), on a database with
// no engine duties running.
func benchFloor(b *testing.B, n int) float64 {
	b.Helper()
	db := pgtest.New(b)
	f, err := benchq.Floor(b.Context(), db.Pool, n, benchq.FloorConfig{})
	must(b, err)
	return f
}

func execAll(ctx context.Context, pool *pgxpool.Pool, stmts ...string) error {
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func noop(status string) inproc.Handler {
	return inproc.HandlerFunc(func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
		return webhooksdk.Outcome{Status: json.RawMessage(status)}, nil
	})
}

// benchLeaves is the engine's no-op leaves (internal/testkit/workload.Leaves,
// which the peer benchmark in bench/peers runs too).
func benchLeaves(b *testing.B, n int) float64 { return workload.Leaves(b, n) }

func benchComposite(b *testing.B, n int) float64 {
	b.Helper()
	e := newEngine(b, engineOpts{})
	e.manifest("leaf", 1, leafReactions, model.Policy{})
	e.manifest("comp", 1, compReactions, model.Policy{})
	children := func(prefix string, n int) compSpec {
		var spec compSpec
		for i := range n {
			spec.Children = append(spec.Children, childSpec{Name: fmt.Sprintf("%s-%d", prefix, i)})
		}
		return spec
	}
	e.run(inproc.Config{Concurrency: 512, BatchSize: 512}, map[string]inproc.Handler{
		"leaf/1": noop(`{"ok":true}`), "comp/1": compHandler(e.calls)})
	e.listen()
	// Warm up as benchLeaves does: a composite a tenth the size.
	e.apply("comp", "warm", children("w", n/10))
	waitSettled(b, e)
	spec := children("c", n)
	start := time.Now()
	e.apply("comp", "root", spec)
	waitSettled(b, e)
	return float64(n) / time.Since(start).Seconds()
}

func waitSettled(b testing.TB, e *engine) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	// A coarse tick: the probe scans resources, and polling it hard would
	// take CPU from the engine it measures (≤ 2% error on a 1 s run).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var lagging bool
		must(b, e.db.Pool.QueryRow(b.Context(), `SELECT EXISTS (SELECT 1 FROM resources WHERE synced_gen < generation)`).Scan(&lagging))
		if !lagging {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("engine did not settle within 5 minutes")
		}
		<-tick.C
	}
}
