package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	ctlengine "github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/benchq"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// BenchmarkEngineStages times the engine's steps for 10,000 leaves one after
// another on one connection, as the in-process executor calls them: the
// schedule, then claims of 512 (engine.TaskClaim, which returns each task's
// resource), each batch's request build (engine.RequestBuild: the provider
// configs and the requests, the resources coming from the claim) and its
// completion (complete_tasks, which applies). Each stage is the sum of its
// calls. With nothing running concurrently it is much steadier than
// BenchmarkEngineThroughput, so it is the one to compare two builds of an
// engine statement with (alternate the binaries).
//
// Each round also times two baselines on the same database: a bare INSERT of
// the same 10,000 queue rows, and the design floor's own statements run the
// same way (benchq.FloorSerial: its schedule, claims of 512 and fenced
// completions). The floor reads no resource and builds no request: the
// engine's serial sum (its claim and request stages together carrying the
// request's reads) against the floor's says how far the engine's
// statements are from the writes they must make, with no executor, no
// concurrency and no other process involved. Run it with -benchtime=1x.
func BenchmarkEngineStages(b *testing.B) {
	n, rounds := 10_000, 5
	if testing.Short() {
		n, rounds = 2_000, 3
	}
	db := pgtest.New(b)
	ctx := b.Context()
	eng := ctlengine.New(db.Pool, ctlengine.Config{})
	must(b, execAll(ctx, db.Pool, fmt.Sprintf(`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '%s')`, leafReactions)))
	names := []string{"insert", "schedule", "claim", "request", "complete", "floor_schedule", "floor_claim", "floor_complete"}
	times := map[string][]float64{}
	for range b.N {
		for r := range rounds {
			t := stageRound(b, db.Pool, eng, n)
			for _, name := range names {
				times[name] = append(times[name], t[name].Seconds()*1000)
			}
			fmt.Printf("round %d: bare insert %.0f ms; engine: schedule %.0f, claim %.0f, request %.0f, complete %.0f ms; floor: schedule %.0f, claim %.0f, complete %.0f ms\n", r+1,
				times["insert"][r], times["schedule"][r], times["claim"][r], times["request"][r], times["complete"][r],
				times["floor_schedule"][r], times["floor_claim"][r], times["floor_complete"][r])
		}
	}
	m := map[string]float64{}
	for _, name := range names {
		m[name] = median(times[name])
		b.ReportMetric(m[name], name+"_ms")
	}
	engine := m["schedule"] + m["claim"] + m["request"] + m["complete"]
	floor := m["floor_schedule"] + m["floor_claim"] + m["floor_complete"]
	b.ReportMetric(engine/floor, "engine/floor")
	line := fmt.Sprintf("stages: n=%d rounds=%d medians: bare insert %.0f ms", n, rounds, m["insert"])
	for _, name := range names[1:5] {
		b.ReportMetric(m[name]/m["insert"], name+"/insert")
		line += fmt.Sprintf(", %s %.0f ms (%.2fx)", name, m[name], m[name]/m["insert"])
		if f, ok := m["floor_"+name]; ok {
			line += fmt.Sprintf(" [floor %.0f ms]", f)
		}
	}
	fmt.Printf("%s; serial sum: engine %.0f ms, floor %.0f ms (%.2fx)\n", line, engine, floor, engine/floor)
}

// stageRound runs one round on fresh rows and returns each stage's time.
func stageRound(b *testing.B, pool *pgxpool.Pool, eng *ctlengine.Engine, n int) map[string]time.Duration {
	b.Helper()
	ctx := b.Context()
	fresh := func() {
		must(b, execAll(ctx, pool, `TRUNCATE work_queue, work_outbox, resource_events, resources CASCADE`))
	}
	fresh()
	must(b, execAll(ctx, pool,
		fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name, spec) SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series(1, %d) i`, n),
		`VACUUM ANALYZE resources`))
	t := map[string]time.Duration{}
	timed := func(stage string, f func() error) {
		start := time.Now()
		must(b, f())
		t[stage] += time.Since(start)
	}
	// The baseline: the same queue rows as one bare INSERT, then gone.
	timed("insert", func() error {
		return execAll(ctx, pool, `INSERT INTO work_queue (shard_id, resource_id, task_type, kind, kind_version, generation)
			SELECT shard_id, id, 'reconcile', kind, kind_version, generation FROM resources`)
	})
	must(b, execAll(ctx, pool, `TRUNCATE work_queue`))
	timed("schedule", func() error {
		return execAll(ctx, pool, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`)
	})
	for {
		var (
			tasks []model.Task
			err   error
		)
		timed("claim", func() error {
			tasks, err = eng.TaskClaim(ctx, ctlengine.TaskClaimParams{Claimer: "stages", Lo: 0, Hi: 255, Limit: 512, Lease: time.Minute})
			return err
		})
		if len(tasks) == 0 {
			break
		}
		timed("request", func() error {
			_, _, err := eng.RequestBuild(ctx, tasks)
			return err
		})
		ids, rids := make([]string, len(tasks)), make([]string, len(tasks))
		shards, claimEpochs := make([]int16, len(tasks)), make([]int64, len(tasks))
		for i, task := range tasks {
			ids[i], rids[i], shards[i], claimEpochs[i] = task.ID, task.ResourceID, task.Shard, task.ClaimEpoch
		}
		timed("complete", func() error {
			_, err := pool.Exec(ctx, `SELECT count(*) FROM complete_tasks($1::uuid[], $2::smallint[], $3::bigint[], $4::uuid[],
				array_fill('{"status":{"ok":true}}'::jsonb, ARRAY[$5::int]), array_fill(NULL::text, ARRAY[$5::int]),
				array_fill(false, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), 20, 200)`, ids, shards, claimEpochs, rids, len(tasks))
			return err
		})
	}
	var lagging int
	must(b, pool.QueryRow(context.WithoutCancel(ctx), `SELECT count(*) FROM resources WHERE synced_gen < generation`).Scan(&lagging))
	if lagging != 0 {
		b.Fatalf("%d of %d leaves still lag after the round", lagging, n)
	}
	// The floor's statements on the same tables, from empty again.
	fresh()
	f, err := benchq.FloorSerial(ctx, pool, n, benchq.FloorConfig{})
	must(b, err)
	t["floor_schedule"], t["floor_claim"], t["floor_complete"] = f.Schedule, f.Claim, f.Complete
	return t
}
