package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/internal/pgtest"
)

// BenchmarkEngineStages times the engine's three steps for 10,000 leaves one
// after another on one connection: the schedule, then claims of 512, each
// completed (and so applied) at once. Each stage is the sum of its calls. With nothing running concurrently it is
// much steadier than BenchmarkEngineThroughput, so it is the one to compare two
// builds of an engine statement with (alternate the binaries). Each stage is
// also reported against a bare INSERT of the same 10,000 queue rows, timed in
// the same round. Run it with -benchtime=1x.
func BenchmarkEngineStages(b *testing.B) {
	n, rounds := 10_000, 5
	if testing.Short() {
		n, rounds = 2_000, 3
	}
	db := pgtest.New(b)
	ctx := b.Context()
	must(b, execAll(ctx, db.Pool, fmt.Sprintf(`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '%s')`, leafReactions)))
	names := []string{"insert", "schedule", "claim", "complete"}
	times := map[string][]float64{}
	for range b.N {
		for r := range rounds {
			t := stageRound(b, db.Pool, n)
			for _, name := range names {
				times[name] = append(times[name], t[name].Seconds()*1000)
			}
			fmt.Printf("round %d: bare insert %.0f ms, schedule %.0f ms, claim %.0f ms, complete %.0f ms\n", r+1,
				times["insert"][r], times["schedule"][r], times["claim"][r], times["complete"][r])
		}
	}
	ins := median(times["insert"])
	line := fmt.Sprintf("stages: n=%d rounds=%d medians: bare insert %.0f ms", n, rounds, ins)
	for _, name := range names[1:] {
		m := median(times[name])
		b.ReportMetric(m, name+"_ms")
		b.ReportMetric(m/ins, name+"/insert")
		line += fmt.Sprintf(", %s %.0f ms (%.2fx)", name, m, m/ins)
	}
	b.ReportMetric(ins, "insert_ms")
	fmt.Println(line)
}

// stageRound runs one round on fresh rows and returns each stage's time.
func stageRound(b *testing.B, pool *pgxpool.Pool, n int) map[string]time.Duration {
	b.Helper()
	ctx := b.Context()
	must(b, execAll(ctx, pool, `TRUNCATE work_queue, work_outbox, resource_events, resources CASCADE`,
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
			ids, rids [][16]byte
			shards    []int16
			epochs    []int64
		)
		timed("claim", func() error {
			rows, err := pool.Query(ctx, `SELECT task_id, shard_id, claim_epoch, resource_id FROM claim_tasks('stages', 0, 255, NULL, 512, 60)`)
			if err != nil {
				return err
			}
			var (
				id, rid [16]byte
				shard   int16
				epoch   int64
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &shard, &epoch, &rid}, func() error {
				ids, shards, epochs, rids = append(ids, id), append(shards, shard), append(epochs, epoch), append(rids, rid)
				return nil
			})
			return err
		})
		if len(ids) == 0 {
			break
		}
		timed("complete", func() error {
			_, err := pool.Exec(ctx, `SELECT count(*) FROM complete_tasks($1::uuid[], $2::smallint[], $3::bigint[], $4::uuid[],
				array_fill('{"status":{"ok":true}}'::jsonb, ARRAY[$5::int]), array_fill(NULL::text, ARRAY[$5::int]),
				array_fill(false, ARRAY[$5::int]), array_fill(false, ARRAY[$5::int]), 20, 200)`, ids, shards, epochs, rids, len(ids))
			return err
		})
	}
	var lagging int
	must(b, pool.QueryRow(context.WithoutCancel(ctx), `SELECT count(*) FROM resources WHERE synced_gen < generation`).Scan(&lagging))
	if lagging != 0 {
		b.Fatalf("%d of %d leaves still lag after the round", lagging, n)
	}
	return t
}
