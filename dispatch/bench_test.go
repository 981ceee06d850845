package dispatch_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/drainer"
	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/internal/testkit/benchq"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
	sdklambda "github.com/convergeplane/converge/webhooksdk/lambda"
)

// Benchmark parameters: the concurrency every mode gets (the endpoint's
// max_concurrency, the in-process executor's Concurrency, H's workers), Q's
// claimers and batch, and the interleaved rounds whose medians are reported.
const (
	benchConcurrency = 256
	benchQWorkers    = 2
	benchQBatch      = 256
	benchRounds      = 5
)

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
			med[k] = median(v)
		}
		var p50s, p99s []float64
		var fed float64
		for range latencyRuns {
			p50, p99, f := benchLatency(b, n, med["http"]/2)
			p50s, p99s, fed = append(p50s, p50), append(p99s, p99), f
		}
		logf("latency p99 of the %d runs (ms): %.0f", latencyRuns, p99s)
		p50, p99 := median(p50s), median(p99s)
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

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchDB is one run's private database with the drain duty running (for
// compositions; the leaves' outcomes are applied as they complete).
type benchDB struct {
	tb   testing.TB
	db   *pgtest.Database
	eng  *engine.Engine
	st   *store.Store
	lis  *store.Listener
	ctx  context.Context
	stop []func()
}

var benchLog = slog.New(slog.DiscardHandler) // a discarding logger

func newBenchDB(tb testing.TB) *benchDB {
	tb.Helper()
	db := benchPool(tb)
	x := &benchDB{tb: tb, db: db, eng: engine.New(db.Pool, engine.Config{}), st: store.New(db.Pool, store.Config{}), ctx: tb.Context()}
	x.lis = x.st.NewListener(benchLog)
	x.exec(`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`)
	dr := drainer.New(drainer.Config{}, x.eng, x.lis.Subscribe("outbox_ready"), benchLog)
	must(tb, dr.Start(x.ctx))
	x.stop = append(x.stop, dr.Stop)
	return x
}

// benchPool is a benchmark's database, its pool configured as a converge
// process configures its own (engine.PoolDefaults) and its connections
// opened and warmed before anything is timed, as a running process has
// them. Cold, a run's first second went to loading catalogs and plans on
// 20 new backends, and the tasks claimed in it made the run's whole
// latency tail.
func benchPool(tb testing.TB) *pgtest.Database {
	tb.Helper()
	db := pgtest.NewWith(tb, func(c *pgxpool.Config) { engine.PoolDefaults(c, benchLog) })
	pgtest.Warm(tb, db.Pool)
	return db
}

func (x *benchDB) exec(sql string, args ...any) {
	x.tb.Helper()
	_, err := x.db.Pool.Exec(x.ctx, sql, args...)
	must(x.tb, err)
}

func (x *benchDB) listen() {
	must(x.tb, x.lis.Start(x.ctx))
	x.stop = append(x.stop, x.lis.Stop)
}

// close stops every duty (last started first) and closes the pool now, so
// the rounds do not pile up connections.
func (x *benchDB) close() {
	for i := len(x.stop) - 1; i >= 0; i-- {
		x.stop[i]()
	}
	x.db.Pool.Close()
}

// seed warms the engine with a tenth of the load (as benchq warms Q: the
// ratios compare steady states), then inserts n leaf resources, not yet
// scheduled.
func (x *benchDB) seed(n int) {
	x.exec(`INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'leaf', 1, 'w-' || i, jsonb_build_object('i', i) FROM generate_series(1, $1) i`, max(n/10, 1))
	x.settle(x.schedule())
	x.exec(`INSERT INTO resources (kind, kind_version, name, spec)
		SELECT 'leaf', 1, 'r-' || i, jsonb_build_object('i', i) FROM generate_series(1, $1) i`, n)
	x.exec(`VACUUM ANALYZE resources`)
}

// schedule schedules every lagging resource and returns when it committed.
func (x *benchDB) schedule() time.Time {
	x.exec(`SELECT schedule_eligible(array_agg(id)) FROM resources WHERE synced_gen < generation`)
	return time.Now()
}

// converge schedules the seeded resources and returns the rate at which
// they all reach Ready, timed from the commit of the scheduling.
func (x *benchDB) converge(n int) float64 {
	x.tb.Helper()
	start := x.schedule()
	rate := float64(n) / x.settle(start).Seconds()
	var ready int
	must(x.tb, x.db.Pool.QueryRow(x.ctx, `SELECT count(*) FROM resources WHERE phase = 'Ready' AND name LIKE 'r-%'`).Scan(&ready))
	if ready != n {
		x.tb.Fatalf("%d of %d resources Ready", ready, n)
	}
	return rate
}

// settle waits until no resource lags and returns the time since start.
func (x *benchDB) settle(start time.Time) time.Duration {
	x.tb.Helper()
	// A coarse tick: the probe scans resources, and polling it hard would
	// take CPU from the engine it measures.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := start.Add(5 * time.Minute)
	for {
		var lagging bool
		must(x.tb, x.db.Pool.QueryRow(x.ctx, `SELECT EXISTS (SELECT 1 FROM resources
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

// benchQ is the raw claim+complete ceiling (internal/testkit/benchq) with
// benchQWorkers claimers of benchQBatch rows, each over its own shard range.
func benchQ(tb testing.TB, n int) float64 {
	x := newBenchDB(tb)
	defer x.close()
	q, err := benchq.Run(x.ctx, x.db.Pool, n, benchq.Config{Workers: benchQWorkers, Batch: benchQBatch})
	must(tb, err)
	return q
}

// benchFloor is F (internal/testkit/benchq.Floor) on a database with no engine
// duties running: the floor does its own completing.
func benchFloor(tb testing.TB, n int) float64 {
	db := benchPool(tb)
	defer db.Pool.Close()
	f, err := benchq.Floor(tb.Context(), db.Pool, n, benchq.FloorConfig{})
	must(tb, err)
	return f
}

// benchEnvelope is a leaf task envelope as the dispatcher sends it, for H.
func benchEnvelope(i int) []byte {
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	env := webhooksdk.Envelope{Type: "task", TaskID: id, ClaimEpoch: 1, Attempt: 1, TaskType: "reconcile",
		Reaction: "work", Trigger: "specChange", Kind: "leaf", KindVersion: 1,
		Resource: &webhooksdk.Resource{ID: id, Kind: "leaf", KindVersion: 1, Name: "r-" + strconv.Itoa(i),
			Spec: json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`), Generation: 1, Phase: "Reconciling"},
		Callback: &webhooksdk.Callback{URL: "http://127.0.0.1:1/v1/tasks/" + id + "/outcome", Token: "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}
	b, _ := json.Marshal(env)
	return b
}

// noop is the provider every dispatch mode runs: it does nothing.
func noop(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
}

// newSecret returns a fresh signing secret.
func newSecret(tb testing.TB) string {
	s, err := webhooksdk.GenerateSecret()
	must(tb, err)
	return s
}

// benchH is the HTTP ceiling: benchConcurrency workers POST signed
// envelopes to a no-op webhooksdk provider through the egress client and
// the HTTPS target, as the dispatcher does, with no database.
func benchH(tb testing.TB, n int) float64 {
	secret := newSecret(tb)
	h, err := webhooksdk.Handler([]webhooksdk.Provider{newProvider("leaf", noop)}, webhooksdk.WithSecrets(secret),
		webhooksdk.WithLogger(benchLog))
	must(tb, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	client, err := egress.NewClient(egress.ClientConfig{Policy: egress.Policy{DevMode: true}, MaxIdleConnsPerHost: benchConcurrency})
	must(tb, err)
	defer client.CloseIdleConnections()
	tgt := transport.NewHTTPS(client, srv.URL, "converge-dispatch/bench", 16<<20)
	signer, err := webhooksdk.NewSigner(secret)
	must(tb, err)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = benchEnvelope(i)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				now := time.Now()
				msgID := "msg_h_" + strconv.Itoa(i)
				resp, err := tgt.Deliver(tb.Context(), &transport.Delivery{MsgID: msgID, Timestamp: now, Body: bodies[i],
					Signature: signer.Sign(msgID, now, bodies[i])})
				if err != nil || resp.Status != http.StatusOK {
					tb.Errorf("H delivery %d: %v %v", i, resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(n) / time.Since(start).Seconds()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h.Shutdown(ctx)
	return rate
}

// benchInproc runs the engine with the in-process executor.
func benchInproc(tb testing.TB, n int) float64 {
	x := newBenchDB(tb)
	defer x.close()
	ex := inproc.New(inproc.Config{Concurrency: benchConcurrency, Handlers: map[string]inproc.Handler{
		"leaf/1": inproc.HandlerFunc(func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
		}),
	}}, x.eng, x.lis.Subscribe("work_ready"), benchLog)
	must(tb, ex.Start(x.ctx))
	x.stop = append(x.stop, ex.Stop)
	x.listen()
	x.seed(n)
	return x.converge(n)
}

// benchDispatch is the push dispatcher wired to a no-op webhooksdk provider
// and the callback API, all on loopback.
type benchDispatch struct {
	*benchDB
	d *dispatch.Dispatcher
}

func newBenchDispatch(tb testing.TB, async bool, maxBatch int) *benchDispatch {
	return newBenchTarget(tb, async, false, maxBatch)
}

// newBenchTarget is newBenchDispatch with the provider behind a lambda
// target (sync Invoke through the Invoke-API test server) when viaLambda.
func newBenchTarget(tb testing.TB, async, viaLambda bool, maxBatch int) *benchDispatch {
	x := newBenchDB(tb)
	key := make([]byte, store.SecretKeyBytes)
	_, _ = rand.Read(key)
	box, err := store.NewSecretBox(key)
	must(tb, err)
	tokenKey := make([]byte, 32)
	_, _ = rand.Read(tokenKey)
	var cbh forward // the dispatcher's receiver, once it exists
	cbSrv := httptest.NewServer(&cbh)
	x.stop = append(x.stop, cbSrv.Close)

	var (
		handler atomic.Pointer[http.Handler]
		fn      atomic.Pointer[sdklambda.Handler] // the Lambda adapter, serving the same providers
	)
	provSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	x.stop = append(x.stop, provSrv.Close)
	tgt := store.EndpointTarget{Type: store.TargetHTTPS, URL: provSrv.URL + "/converge"}
	var aws func(context.Context) (awssdk.Config, error)
	if viaLambda {
		ls := lambdatest.New(tb)
		ls.Add("bench-fn", func(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
			return fn.Load().Serve(ctx, ev)
		})
		tgt = store.EndpointTarget{Type: store.TargetLambda, Function: "bench-fn", Region: lambdatest.Region, EndpointURL: ls.URL}
		aws = lambdatest.AWSConfig
		x.stop = append(x.stop, func() {
			if ls.Invalid.Load() != 0 {
				tb.Errorf("%d Invoke calls with an invalid signature", ls.Invalid.Load())
			}
		})
	}
	_, secret, err := x.st.CreateEndpoint(x.ctx, box, store.PutEndpointParams{Name: "bench",
		Kinds:          []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target:         tgt,
		MaxConcurrency: benchConcurrency,
		MaxBatch:       maxBatch})
	must(tb, err)
	work := noop
	opts := []webhooksdk.Option{webhooksdk.WithSecrets(secret.Reveal()), webhooksdk.WithLogger(benchLog)}
	if async {
		// Answer 202 at once; the no-op work takes just long enough that the
		// zero sync budget expires first. The callback client keeps its
		// connections alive (the default transport keeps 2 per host).
		work = func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
			t := time.NewTimer(100 * time.Microsecond)
			defer t.Stop()
			<-t.C
			return noop(ctx, req)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = benchConcurrency
		opts = append(opts, webhooksdk.WithSyncBudget(0), webhooksdk.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
		x.stop = append(x.stop, tr.CloseIdleConnections)
	}
	h, err := webhooksdk.Handler([]webhooksdk.Provider{newProvider("leaf", work)}, opts...)
	must(tb, err)
	var hh http.Handler = h
	handler.Store(&hh)
	if viaLambda {
		lh, err := sdklambda.New([]webhooksdk.Provider{newProvider("leaf", work)}, opts...)
		must(tb, err)
		fn.Store(lh)
	}
	x.stop = append(x.stop, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
	})

	d, err := dispatch.New(dispatch.Config{SecretBox: box, TokenKey: tokenKey, CallbackBaseURL: cbSrv.URL, DevMode: true,
		AWS: aws, Logger: benchLog}, x.eng, x.st, dispatch.Wakeups{WorkReady: x.lis.Subscribe("work_ready"),
		EndpointsChanged: x.lis.Subscribe("endpoints_changed")})
	must(tb, err)
	cb := d.Callbacks()
	cbh.h.Store(&cb)
	must(tb, d.Start(x.ctx))
	x.stop = append(x.stop, d.Stop)
	x.listen()
	waitFor(tb, 10*time.Second, "the endpoint to be ready", func() bool { ok, _ := d.Registry().PairStatus("leaf", 1); return ok })
	return &benchDispatch{benchDB: x, d: d}
}

// benchHTTP runs the engine with the push dispatcher (inline or async),
// the endpoint's max_batch set to maxBatch (1: no batching).
func benchHTTP(tb testing.TB, n int, async bool, maxBatch int) float64 {
	x := newBenchDispatch(tb, async, maxBatch)
	defer x.close()
	x.seed(n)
	return x.converge(n)
}

// benchLambda runs the engine with the push dispatcher, inline, through an
// https target or (viaLambda) a sync lambda target, and returns
// reconciles/s and this process's CPU time per task (the dispatcher, and
// the in-process provider and test server: Postgres is not counted).
func benchLambda(tb testing.TB, n int, viaLambda bool) (rate float64, cpuPerTask time.Duration) {
	x := newBenchTarget(tb, false, viaLambda, 1)
	defer x.close()
	x.seed(n)
	before := processCPU(tb)
	rate = x.converge(n)
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
		https, lambda := median(rates[0]), median(rates[1])
		b.ReportMetric(https, "https/s")
		b.ReportMetric(lambda, "lambda/s")
		b.ReportMetric(lambda/https, "lambda/https")
		b.ReportMetric(median(cpus[0]), "https_cpu_us/task")
		b.ReportMetric(median(cpus[1]), "lambda_cpu_us/task")
		logf("N=%d, medians of %d rounds: https %.0f/s (%.0f µs CPU/task), lambda %.0f/s (%.0f µs CPU/task), lambda/https %.3f",
			n, benchRounds, https, median(cpus[0]), lambda, median(cpus[1]), lambda/https)
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
func (x *benchDispatch) feed(rate float64, total int) float64 {
	const every = 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < total; <-tick.C {
		owed := min(total, max(1, int(rate*time.Since(start).Seconds())))
		if owed > sent {
			x.exec(`WITH r AS (INSERT INTO resources (kind, kind_version, name, spec)
				SELECT 'leaf', 1, 'l-' || i, '{}' FROM generate_series($1::int, $2::int) i RETURNING id)
				SELECT schedule_eligible(array_agg(id)) FROM r`, sent, owed-1)
			sent = owed
		}
	}
	return float64(total) / time.Since(start).Seconds()
}

func benchLatency(tb testing.TB, n int, rate float64) (p50, p99, fed float64) {
	x := newBenchDispatch(tb, false, 1)
	defer x.close()
	fed = x.feed(rate, max(n/2, int(2*rate)))
	waitFor(tb, 5*time.Minute, "the latency run to converge", func() bool {
		var lagging bool
		must(tb, x.db.Pool.QueryRow(x.ctx, `SELECT EXISTS (SELECT 1 FROM resources
			WHERE synced_gen < generation AND deletion_requested_at IS NULL AND frozen_until IS NULL)`).Scan(&lagging))
		return !lagging
	})
	must(tb, x.db.Pool.QueryRow(x.ctx, `SELECT
			1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM r.updated_at - r.last_claimed_at)),
			1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM r.updated_at - r.last_claimed_at))
		  FROM resources r`).Scan(&p50, &p99))
	return p50, p99, fed
}

// BenchmarkDispatchMode runs one round of one mode per sub-benchmark, for
// profiling a single path (go test -bench DispatchMode/http -cpuprofile …).
// BenchmarkDispatch is the one that reports ratios.
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
				b.ReportMetric(m.run(b, n), "rec/s")
			}
		})
	}
}

// benchMaxBatch is the batched modes' max_batch (issue #13's goal rows).
const benchMaxBatch = 32

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
			med[k] = median(v)
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
