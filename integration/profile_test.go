package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
)

// TestProfileEngine is a measuring tool, not a check: it drives 10,000 leaves
// (or, with PROFILE=composite, a 10,000-child composite) through the engine and prints the database's time per statement from
// pg_stat_statements. It runs only with PROFILE=1 and a DATABASE_URL server
// started with shared_preload_libraries=pg_stat_statements and
// pg_stat_statements.track=all and pg_stat_statements.track_planning=on (see
// docs/performance.md).
func TestProfileEngine(t *testing.T) {
	if os.Getenv("PROFILE") == "" {
		t.Skip("set PROFILE=1 and DATABASE_URL to a server with pg_stat_statements preloaded")
	}
	e := newEngine(t, engineOpts{})
	e.manifest("leaf", 1, leafReactions, model.Policy{})
	e.manifest("comp", 1, compReactions, model.Policy{})
	e.run(inproc.Config{Concurrency: 512, BatchSize: 512}, map[string]inproc.Handler{
		"leaf/1": noop(`{"ok":true}`), "comp/1": compHandler(e.calls)})
	e.listen()
	ctx := t.Context()
	must(t, execAll(ctx, e.db.Pool, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`))
	// Warm the pool's connections first: the profile is of the steady state.
	must(t, execAll(ctx, e.db.Pool, `INSERT INTO resources (kind, kind_version, name, spec) SELECT 'leaf', 1, 'w-' || i, '{}' FROM generate_series(1, 2000) i`,
		`SELECT schedule_eligible(array_agg(id)) FROM resources`))
	waitSettled(t, e)
	var start time.Time
	if os.Getenv("PROFILE") == "composite" {
		// PROFILE=composite: one composite root with 10,000 children.
		var spec, warm compSpec
		for i := range 10000 {
			spec.Children = append(spec.Children, childSpec{Name: fmt.Sprintf("c-%d", i)})
		}
		for i := range 1000 {
			warm.Children = append(warm.Children, childSpec{Name: fmt.Sprintf("wc-%d", i)})
		}
		e.apply("comp", "warm", warm)
		waitSettled(t, e)
		must(t, execAll(ctx, e.db.Pool, `SELECT pg_stat_statements_reset()`))
		start = time.Now()
		e.apply("comp", "root", spec)
	} else {
		must(t, execAll(ctx, e.db.Pool, fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name, spec) SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series(1, %d) i`, 10000), `ANALYZE resources`))
		must(t, execAll(ctx, e.db.Pool, `SELECT pg_stat_statements_reset()`))
		start = time.Now()
		must(t, execAll(ctx, e.db.Pool, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`))
	}
	waitSettled(t, e)
	t.Logf("settled 10000 in %s (%.0f/s)", time.Since(start), 10000/time.Since(start).Seconds())
	rows, err := e.db.Pool.Query(ctx, `SELECT calls, round(total_exec_time::numeric,1), round(total_plan_time::numeric,3), left(regexp_replace(query, '\s+', ' ', 'g'), 150)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT 40`)
	must(t, err)
	for rows.Next() {
		var calls int64
		var tot, plan float64
		var q string
		must(t, rows.Scan(&calls, &tot, &plan, &q))
		t.Logf("%6d calls %9.1fms exec %8.1fms plan  %s", calls, tot, plan, q)
	}
}
