package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/internal/pgtest"
)

// BenchmarkEngineThroughput measures the engine end to end with the
// in-process executor (no-op work) against Q, a raw batched SKIP LOCKED
// claim + delete loop on an equivalent sharded UNLOGGED table, in the same
// run. Each round runs Q, 10k independent leaves and a 10k-child composite,
// interleaved; it reports medians. Run it with -benchtime=1x (make bench).
func BenchmarkEngineThroughput(b *testing.B) {
	n, rounds := 10_000, 5
	if testing.Short() {
		n, rounds = 2_000, 3
	}
	var q, leaves, comp []float64
	for range b.N {
		for r := range rounds {
			q = append(q, measure(b, "Q", n, benchQ))
			leaves = append(leaves, measure(b, "leaves", n, benchLeaves))
			comp = append(comp, measure(b, "composite", n, benchComposite))
			fmt.Printf("round %d: Q %.0f/s, leaves %.0f/s, composite %.0f/s\n", r+1, q[len(q)-1], leaves[len(leaves)-1], comp[len(comp)-1])
		}
	}
	mq, ml, mc := median(q), median(leaves), median(comp)
	b.ReportMetric(mq, "Q_tasks/s")
	b.ReportMetric(ml, "leaves/s")
	b.ReportMetric(mc, "composite_children/s")
	b.ReportMetric(ml/mq, "leaves/Q")
	b.ReportMetric(ml/mc, "composite_time/leaves_time")
	fmt.Printf("engine: n=%d rounds=%d  Q=%.0f tasks/s  leaves=%.0f res/s (%.3f·Q)  composite=%.0f children/s (%.2fx the leaves' time)\n",
		n, rounds, mq, ml, ml/mq, mc, ml/mc)
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

// benchQ is the ceiling: claim a batch with FOR UPDATE SKIP LOCKED, then
// delete it, on a 16-way range-partitioned UNLOGGED table, with as many
// workers as the executor's claim loop uses (one) plus the drainer (one).
func benchQ(b *testing.B, n int) float64 {
	b.Helper()
	db := pgtest.New(b)
	ctx := b.Context()
	must(b, execAll(ctx, db.Pool, `
		CREATE UNLOGGED TABLE q (shard_id smallint NOT NULL, id uuid NOT NULL DEFAULT gen_random_uuid(),
			state text NOT NULL DEFAULT 'pending', claimed_by text, PRIMARY KEY (shard_id, id)) PARTITION BY RANGE (shard_id)`,
		`DO $$ BEGIN FOR i IN 0..15 LOOP
			EXECUTE format('CREATE UNLOGGED TABLE q_p%s PARTITION OF q FOR VALUES FROM (%s) TO (%s)', i, i*16, (i+1)*16);
		END LOOP; END $$`,
		`CREATE INDEX q_pending ON q (shard_id) WHERE state = 'pending'`))
	// Warm up the connections as the engine's are warmed (see benchLeaves).
	must(b, execAll(ctx, db.Pool, fmt.Sprintf(`INSERT INTO q (shard_id) SELECT (random()*255)::int FROM generate_series(1, %d)`, n/10)))
	runQ(b, db.Pool)
	must(b, execAll(ctx, db.Pool,
		fmt.Sprintf(`INSERT INTO q (shard_id) SELECT (random()*255)::int FROM generate_series(1, %d)`, n),
		`VACUUM ANALYZE q`))
	start := time.Now()
	runQ(b, db.Pool)
	return float64(n) / time.Since(start).Seconds()
}

// runQ claims and deletes q's rows with two workers until none is left.
func runQ(b *testing.B, pool *pgxpool.Pool) {
	ctx := b.Context()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				rows, err := pool.Query(ctx, `UPDATE q SET state = 'claimed', claimed_by = 'bench'
					WHERE (shard_id, id) IN (SELECT shard_id, id FROM q WHERE shard_id BETWEEN 0 AND 255 AND state = 'pending'
					LIMIT 256 FOR UPDATE SKIP LOCKED) RETURNING shard_id, id`)
				must(b, err)
				var shards []int16
				var ids []string
				for rows.Next() {
					var s int16
					var id string
					must(b, rows.Scan(&s, &id))
					shards, ids = append(shards, s), append(ids, id)
				}
				must(b, rows.Err())
				if len(ids) == 0 {
					return
				}
				_, err = pool.Exec(ctx, `DELETE FROM q USING unnest($1::smallint[], $2::uuid[]) AS d(s, i)
					WHERE q.shard_id = d.s AND q.id = d.i`, shards, ids)
				must(b, err)
			}
		}()
	}
	wg.Wait()
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
	return inproc.HandlerFunc(func(context.Context, model.Request) (model.Outcome, error) {
		return model.Outcome{Status: json.RawMessage(status)}, nil
	})
}

func benchLeaves(b *testing.B, n int) float64 {
	b.Helper()
	e := newEngine(b, engineOpts{})
	e.manifest("leaf", 1, leafReactions, model.Policy{})
	e.run(inproc.Config{Concurrency: 512, BatchSize: 512}, map[string]inproc.Handler{"leaf/1": noop(`{"ok":true}`)})
	e.listen()
	ctx := b.Context()
	// Both sides are measured in the steady state: a tenth of the load
	// first warms the pool's connections (plan caches, relation caches),
	// as Q's are warmed; a long-running server has warm connections.
	must(b, execAll(ctx, e.db.Pool, fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'leaf', 1, 'w-' || i, '{}' FROM generate_series(1, %d) i`, n/10), `SELECT schedule_eligible(array_agg(id)) FROM resources`))
	waitSettled(b, e)
	// The rows exist before the clock starts, as Q's do; scheduling them is
	// engine work and is timed. (Applying resources is measured by the API
	// benchmark.)
	must(b, execAll(ctx, e.db.Pool, fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series(1, %d) i`, n), `ANALYZE resources`))
	start := time.Now()
	must(b, execAll(ctx, e.db.Pool, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`))
	waitSettled(b, e)
	return float64(n) / time.Since(start).Seconds()
}

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
