package dispatch_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/workload"
)

// benchRounds is how many interleaved rounds a benchmark reports the
// medians of. The workloads' own parameters (concurrency, Q's claimers and
// batch) are internal/testkit/workload's.
const benchRounds = 5

// BenchmarkDispatch drives N leaf resources (10,000; 2,000 under -short)
// from pending to Ready and reports reconciles/s for each way of running
// them, as medians of benchRounds interleaved rounds, with ratios against Q
// measured in the same run:
//
//   - Q: the raw ceiling — batched SKIP LOCKED claim + delete on an
//     equivalent sharded UNLOGGED table, no engine.
//   - F: the design floor (benchq.Floor) — the engine's row writes per task
//     as bare SQL, no engine logic.
//   - H: bare signed POSTs to a no-op webhooksdk provider on loopback, at the
//     same concurrency, no database.
//   - inproc: the engine with the in-process executor (no-op handler).
//   - http: the engine with the push dispatcher, inline 200 answers from a
//     no-op webhooksdk provider over loopback HTTP.
//   - async: the same, the provider answering 202 and calling back.
//
// F and H share the same two cores, so the HTTP path cannot beat
// 1/(1/F + 1/H), reported as "bound"; the async path makes two HTTP
// exchanges per task (the delivery and the callback), so its bound is
// 1/(1/F + 2/H), reported as "async_bound".
//
// Then five latency runs feed resources at half the http rate; it reports
// the median of their p50s and of their p99s of the time from claim to
// resource updated (issue #13 asks for the median of five runs' p99).
//
// Run: go test ./dispatch -run '^$' -bench Dispatch -benchtime 1x
// latencyRuns is how many latency runs BenchmarkDispatch takes the median of.
const latencyRuns = 5

func BenchmarkDispatch(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	modes := []struct {
		name string
		run  func(testing.TB, int) float64
	}{
		{"Q", benchQ},
		{"F", benchFloor},
		{"H", benchH},
		{"inproc", benchInproc},
		{"http", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, false, 1) }},
		{"async", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, true, 1) }},
	}
	for range b.N {
		rates := map[string][]float64{}
		for round := range benchRounds {
			for _, m := range modes {
				r := m.run(b, n)
				rates[m.name] = append(rates[m.name], r)
				logf("round %d %-6s %8.0f /s", round+1, m.name, r)
			}
		}
		med := map[string]float64{}
		for k, v := range rates {
			med[k] = workload.Median(v)
		}
		var p50s, p99s []float64
		var fed float64
		for range latencyRuns {
			p50, p99, f := benchLatency(b, n, med["http"]/2)
			p50s, p99s, fed = append(p50s, p50), append(p99s, p99), f
		}
		logf("latency p99 of the %d runs (ms): %.0f", latencyRuns, p99s)
		p50, p99 := workload.Median(p50s), workload.Median(p99s)
		q := med["Q"]
		bound := 1 / (1/med["F"] + 1/med["H"])
		asyncBound := 1 / (1/med["F"] + 2/med["H"])
		b.ReportMetric(q, "Q/s")
		b.ReportMetric(med["F"], "F/s")
		b.ReportMetric(med["F"]/q, "F/Q")
		b.ReportMetric(bound/q, "bound/Q")
		b.ReportMetric(asyncBound/q, "async_bound/Q")
		b.ReportMetric(med["H"], "H/s")
		b.ReportMetric(med["inproc"], "inproc/s")
		b.ReportMetric(med["http"], "http/s")
		b.ReportMetric(med["async"], "async/s")
		b.ReportMetric(med["http"]/q, "http/Q")
		b.ReportMetric(med["async"]/q, "async/Q")
		b.ReportMetric(med["inproc"]/q, "inproc/Q")
		b.ReportMetric(med["http"]/med["H"], "http/H")
		b.ReportMetric(p50, "p50_ms")
		b.ReportMetric(p99, "p99_ms")
		logf("N=%d, medians of %d rounds: Q %.0f/s, F %.0f/s (%.3f·Q), H %.0f/s, bound %.0f/s (%.3f·Q), async bound %.3f·Q, "+
			"inproc %.0f/s (%.3f·Q), http %.0f/s (%.3f·Q), async %.0f/s (%.3f·Q); "+
			"latency at %.0f/s fed, medians of %d runs: p50 %.1f ms, p99 %.1f ms",
			n, benchRounds, q, med["F"], med["F"]/q, med["H"], bound, bound/q, asyncBound/q,
			med["inproc"], med["inproc"]/q, med["http"], med["http"]/q, med["async"], med["async"]/q, fed, latencyRuns, p50, p99)
	}
}

// The modes, from internal/testkit/workload (the peer benchmark in
// bench/peers runs the same code).
func benchQ(tb testing.TB, n int) float64      { return workload.Q(tb, n) }
func benchFloor(tb testing.TB, n int) float64  { return workload.Floor(tb, n) }
func benchH(tb testing.TB, n int) float64      { return workload.H(tb, n) }
func benchInproc(tb testing.TB, n int) float64 { return workload.Inproc(tb, n) }
func benchHTTP(tb testing.TB, n int, async bool, maxBatch int) float64 {
	return workload.HTTP(tb, n, async, maxBatch)
}

// benchLambda runs the engine with the push dispatcher, inline, through an
// https target or (viaLambda) a sync lambda target, and returns
// reconciles/s and this process's CPU time per task (the dispatcher, and
// the in-process provider and test server: Postgres is not counted).
func benchLambda(tb testing.TB, n int, viaLambda bool) (rate float64, cpuPerTask time.Duration) {
	x := workload.NewDispatch(tb, workload.Target{Lambda: viaLambda, MaxBatch: 1})
	defer x.Close()
	x.Seed(n)
	before := processCPU(tb)
	rate = x.Converge(n)
	return rate, (processCPU(tb) - before) / time.Duration(n)
}

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	must(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLambdaTarget compares the lambda target path (sync Invoke
// through the Invoke-API test server, SigV4-signed and verified, the
// event wrapped and unwrapped) with the https target path in the same run:
// medians of benchRounds interleaved rounds of N leaf resources (10,000;
// 2,000 under -short), reconciles/s, the ratio, and process CPU per task.
//
// Run: go test ./dispatch -run '^$' -bench LambdaTarget -benchtime 1x
func BenchmarkLambdaTarget(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	for range b.N {
		var rates, cpus [2][]float64
		for round := range benchRounds {
			for i, viaLambda := range []bool{false, true} {
				r, cpu := benchLambda(b, n, viaLambda)
				rates[i], cpus[i] = append(rates[i], r), append(cpus[i], float64(cpu.Microseconds()))
				logf("round %d lambda=%v %8.0f /s, %.0f µs CPU/task", round+1, viaLambda, r, float64(cpu.Microseconds()))
			}
		}
		https, lambda := workload.Median(rates[0]), workload.Median(rates[1])
		b.ReportMetric(https, "https/s")
		b.ReportMetric(lambda, "lambda/s")
		b.ReportMetric(lambda/https, "lambda/https")
		b.ReportMetric(workload.Median(cpus[0]), "https_cpu_us/task")
		b.ReportMetric(workload.Median(cpus[1]), "lambda_cpu_us/task")
		logf("N=%d, medians of %d rounds: https %.0f/s (%.0f µs CPU/task), lambda %.0f/s (%.0f µs CPU/task), lambda/https %.3f",
			n, benchRounds, https, workload.Median(cpus[0]), lambda, workload.Median(cpus[1]), lambda/https)
	}
}

// benchLatency feeds leaf resources at rate/s for about n/rate seconds
// (at least 2s) through the inline HTTP path and returns the p50 and p99 of
// claim → resource updated, in ms (database clock on both ends), and the
// rate it achieved.
// feed creates and schedules total leaves at rate per second, every 10 ms,
// and returns the rate it reached. Each tick feeds what the rate owes by
// then, not a fixed share: a tick whose insert outlasts the period makes the
// ticker drop the next one, and a fixed share then fed half the asked rate.
func feed(x *workload.Dispatch, rate float64, total int) float64 {
	const every = 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < total; <-tick.C {
		owed := min(total, max(1, int(rate*time.Since(start).Seconds())))
		if owed > sent {
			x.Exec(`WITH r AS (INSERT INTO resources (kind, kind_version, name, spec)
				SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series($1::int, $2::int) i RETURNING id)
				SELECT schedule_eligible(array_agg(id)) FROM r`, sent, owed-1)
			sent = owed
		}
	}
	return float64(total) / time.Since(start).Seconds()
}

func benchLatency(tb testing.TB, n int, rate float64) (p50, p99, fed float64) {
	x := workload.NewDispatch(tb, workload.Target{MaxBatch: 1})
	defer x.Close()
	fed = feed(x, rate, max(n/2, int(2*rate)))
	waitFor(tb, 5*time.Minute, "the latency run to converge", func() bool {
		var lagging bool
		must(tb, x.DB.DB.Pool.QueryRow(x.Context(), `SELECT EXISTS (SELECT 1 FROM resources
			WHERE synced_gen < generation AND deletion_requested_at IS NULL AND frozen_until IS NULL)`).Scan(&lagging))
		return !lagging
	})
	must(tb, x.DB.DB.Pool.QueryRow(x.Context(), `SELECT
			1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.updated_at - r.last_claimed_at)),
			1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.updated_at - r.last_claimed_at))
		  FROM resources r`).Scan(&p50, &p99))
	return p50, p99, fed
}

// BenchmarkDispatchMode runs one round of one mode per sub-benchmark, for
// profiling a single path (go test -bench DispatchMode/http -cpuprofile …),
// and reports this process's CPU time per task over the whole round (its
// database set-up and warm-up included; Postgres is not counted), to compare
// the Go side of two builds. BenchmarkDispatch is the one that reports ratios.
func BenchmarkDispatchMode(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	for _, m := range []struct {
		name string
		run  func(testing.TB, int) float64
	}{
		{"Q", benchQ}, {"F", benchFloor}, {"H", benchH}, {"inproc", benchInproc},
		{"http", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, false, 1) }},
		{"async", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, true, 1) }},
		{"http_batch", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, false, benchMaxBatch) }},
		{"async_batch", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, true, benchMaxBatch) }},
		{"lambda", func(tb testing.TB, n int) float64 { r, _ := benchLambda(tb, n, true); return r }},
	} {
		b.Run(m.name, func(b *testing.B) {
			for range b.N {
				before := processCPU(b)
				b.ReportMetric(m.run(b, n), "rec/s")
				b.ReportMetric(float64((processCPU(b)-before).Microseconds())/float64(n), "cpu_us/task")
			}
		})
	}
}

// benchMaxBatch is the batched modes' max_batch (issue #13's goal rows).
const benchMaxBatch = workload.MaxBatch

// BenchmarkDispatchBatch measures batched deliveries (issue #13 item 2):
// the engine with the push dispatcher to a no-op webhooksdk provider,
// inline and async, unbatched and with max_batch benchMaxBatch, against Q
// measured in the same run: medians of benchRounds interleaved rounds of N
// leaf resources (10,000; 2,000 under -short). inproc, the engine with no
// HTTP at all, is the ceiling any dispatch path can reach.
//
// Run: go test ./dispatch -run '^$' -bench DispatchBatch -benchtime 1x
func BenchmarkDispatchBatch(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	modes := []struct {
		name string
		run  func(testing.TB, int) float64
	}{
		{"Q", benchQ},
		{"inproc", benchInproc},
		{"http", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, false, 1) }},
		{"http_batch", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, false, benchMaxBatch) }},
		{"async", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, true, 1) }},
		{"async_batch", func(tb testing.TB, n int) float64 { return benchHTTP(tb, n, true, benchMaxBatch) }},
	}
	for range b.N {
		rates := map[string][]float64{}
		for round := range benchRounds {
			for _, m := range modes {
				r := m.run(b, n)
				rates[m.name] = append(rates[m.name], r)
				logf("round %d %-11s %8.0f /s", round+1, m.name, r)
			}
		}
		med := map[string]float64{}
		for k, v := range rates {
			med[k] = workload.Median(v)
		}
		q := med["Q"]
		b.ReportMetric(q, "Q/s")
		for _, m := range modes[1:] {
			b.ReportMetric(med[m.name], m.name+"/s")
			b.ReportMetric(med[m.name]/q, m.name+"/Q")
		}
		logf("N=%d, max_batch %d, medians of %d rounds: Q %.0f/s; inproc %.0f/s (%.3f·Q); http %.0f/s (%.3f·Q), http batched %.0f/s (%.3f·Q); "+
			"async %.0f/s (%.3f·Q), async batched %.0f/s (%.3f·Q)",
			n, benchMaxBatch, benchRounds, q, med["inproc"], med["inproc"]/q, med["http"], med["http"]/q, med["http_batch"], med["http_batch"]/q,
			med["async"], med["async"]/q, med["async_batch"], med["async_batch"]/q)
	}
}

// logf prints a benchmark's figures on stdout: testing keeps only the first
// ten lines of a benchmark's log, which cut the summaries off.
func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
