package integration

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
)

// BenchmarkFairShares measures how long a small namespace's tasks wait to be
// claimed while another namespace holds a deep backlog: the in-process
// executor (no-op work, concurrency and batches of 512) runs while 100,000
// leaves of team-a are scheduled, then 100 leaves of team-b; the figure is
// each of team-b's tasks' queued → claimed (its resource's last_enqueued_at
// to last_claimed_at, the database's clock), as p50, p99 and max. Beside it,
// in every round: the same 100 alone (no backlog), and the same 100 inside
// team-a, behind its own backlog (what every task got before namespaces
// shared the claims, and still gets within one namespace). Under -short the
// backlog is 20,000. It reports the medians over the rounds. Run it with
// -benchtime=1x.
func BenchmarkFairShares(b *testing.B) {
	big, small, rounds := 100_000, 100, 3
	if testing.Short() {
		big = 20_000
	}
	scenarios := []struct {
		name, ns string
		backlog  int
	}{
		{"alone", "team-b", 0},
		{"beside", "team-b", big},
		{"inside", "team-a", big},
	}
	stats := map[string][][3]float64{}
	for range b.N {
		for r := range rounds {
			line := fmt.Sprintf("round %d:", r+1)
			for _, sc := range scenarios {
				var s [3]float64
				b.Run(sc.name, func(b *testing.B) { s = fairRound(b, sc.backlog, small, sc.ns) })
				stats[sc.name] = append(stats[sc.name], s)
				line += fmt.Sprintf(" %s p50 %.1f p99 %.1f max %.1f ms;", sc.name, s[0], s[1], s[2])
			}
			fmt.Println(line)
		}
	}
	line := fmt.Sprintf("fair shares: backlog %d, %d tasks, medians of %d rounds:", big, small, rounds)
	for _, sc := range scenarios {
		var m [3]float64
		for i, q := range []string{"p50", "p99", "max"} {
			xs := make([]float64, 0, len(stats[sc.name]))
			for _, s := range stats[sc.name] {
				xs = append(xs, s[i])
			}
			m[i] = median(xs)
			b.ReportMetric(m[i], sc.name+"_"+q+"_ms")
		}
		line += fmt.Sprintf(" %s p50 %.1f p99 %.1f max %.1f ms;", sc.name, m[0], m[1], m[2])
	}
	fmt.Println(line)
}

// fairRound schedules backlog leaves of team-a, then n leaves of ns, with
// the executor running, waits for the n to be applied and returns their
// queued → claimed p50, p99 and max in milliseconds.
func fairRound(b *testing.B, backlog, n int, ns string) [3]float64 {
	b.Helper()
	e := newEngine(b, engineOpts{})
	e.manifest("leaf", 1, leafReactions, model.Policy{})
	ctx := b.Context()
	must(b, execAll(ctx, e.db.Pool, `INSERT INTO namespaces (name) VALUES ('team-a'), ('team-b')`,
		fmt.Sprintf(`INSERT INTO resources (namespace, kind, kind_version, name, spec)
			SELECT 'team-a', 'leaf', 1, 'b-' || i, '{}' FROM generate_series(1, %d) i`, backlog),
		fmt.Sprintf(`INSERT INTO resources (namespace, kind, kind_version, name, spec)
			SELECT '%s', 'leaf', 1, 's-' || i, '{}' FROM generate_series(1, %d) i`, ns, n),
		`VACUUM ANALYZE resources`))
	e.run(inproc.Config{Concurrency: 512, BatchSize: 512}, map[string]inproc.Handler{"leaf/1": noop(`{"ok":true}`)})
	e.listen()
	if backlog > 0 {
		must(b, execAll(ctx, e.db.Pool, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE name LIKE 'b-%'`))
	}
	must(b, execAll(ctx, e.db.Pool, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE name LIKE 's-%'`))
	deadline := time.Now().Add(10 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var lagging bool
		must(b, e.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE name LIKE 's-%' AND synced_gen < generation)`).Scan(&lagging))
		if !lagging {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the small namespace's tasks were not all applied within 10 minutes")
		}
		<-tick.C
	}
	rows, err := e.db.Pool.Query(ctx, `SELECT extract(epoch FROM last_claimed_at - last_enqueued_at)::float8 * 1000
		FROM resources WHERE name LIKE 's-%'`)
	must(b, err)
	ms, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	must(b, err)
	if len(ms) != n {
		b.Fatalf("%d delays for %d tasks", len(ms), n)
	}
	slices.Sort(ms)
	at := func(q float64) float64 { return ms[min(len(ms)-1, int(math.Ceil(q*float64(len(ms))))-1)] }
	return [3]float64{at(0.50), at(0.99), ms[len(ms)-1]}
}
