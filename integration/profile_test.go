package integration

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
)

// TestProfileEngine is a measuring tool, not a check: it drives 10,000 leaves
// (or, with PROFILE=composite, a 10,000-child composite) through the engine and prints the database's time per statement from
// pg_stat_statements, and the CPU each process spent during the run (this
// test process, and the server's processes when it runs on this machine). It runs only with PROFILE=1 and a DATABASE_URL server
// started with shared_preload_libraries=pg_stat_statements and
// pg_stat_statements.track=all and pg_stat_statements.track_planning=on (see
// docs/performance.md).
func TestProfileEngine(t *testing.T) {
	if os.Getenv("PROFILE") == "" {
		t.Skip("set PROFILE=1 and DATABASE_URL to a server with pg_stat_statements preloaded")
	}
	e := newEngine(t, engineOpts{noApplyLog: true})
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
	var (
		start  time.Time
		before map[int][2]int64
	)
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
		before, start = cpuTicks(), time.Now()
		e.apply("comp", "root", spec)
	} else {
		must(t, execAll(ctx, e.db.Pool, fmt.Sprintf(`INSERT INTO resources (kind, kind_version, name, spec) SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series(1, %d) i`, 10000), `ANALYZE resources`))
		must(t, execAll(ctx, e.db.Pool, `SELECT pg_stat_statements_reset()`))
		before, start = cpuTicks(), time.Now()
		must(t, execAll(ctx, e.db.Pool, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`))
	}
	waitSettled(t, e)
	elapsed := time.Since(start)
	t.Logf("settled 10000 in %s (%.0f/s)", elapsed, 10000/elapsed.Seconds())
	logCPU(t, before, cpuTicks(), elapsed)
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

// cpuTicks reads the CPU time (user + system, in clock ticks, and that of
// exited children) of every process on the machine from /proc: it is how
// the engine's CPU was split between the Go process and the server's
// backends (docs/performance.md). Empty where there is no /proc.
func cpuTicks() map[int][2]int64 {
	out := map[int][2]int64{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): utime is
		// the 12th, then stime, cutime, cstime.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 15 {
			continue
		}
		var v [4]int64
		for i := range v {
			v[i], _ = strconv.ParseInt(f[11+i], 10, 64)
		}
		out[pid] = [2]int64{v[0] + v[1], v[2] + v[3]}
	}
	return out
}

// logCPU prints the CPU each process spent between two cpuTicks reads,
// grouped: this process, the server's backends, its other processes (the
// postmaster's exited children, autovacuum workers among them, included),
// and everything else on the machine.
func logCPU(t *testing.T, before, after map[int][2]int64, elapsed time.Duration) {
	const hz = 100 // USER_HZ on Linux
	var self, backends, server, other int64
	for pid, a := range after {
		b := before[pid]
		d := a[0] - b[0] + a[1] - b[1]
		if d <= 0 {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		switch c := string(cmd); {
		case pid == os.Getpid():
			self += d
		case strings.HasPrefix(c, "postgres: ") && strings.Contains(c, "("): // a client backend: "user db host(port) state"
			backends += d
		case strings.HasPrefix(c, "postgres"):
			server += d
		default:
			other += d
		}
	}
	t.Logf("CPU during the run (%.2f s, %d cores): this process %.2f s, backends %.2f s, other server processes %.2f s, the rest of the machine %.2f s",
		elapsed.Seconds(), runtime.NumCPU(), float64(self)/hz, float64(backends)/hz, float64(server)/hz, float64(other)/hz)
}
