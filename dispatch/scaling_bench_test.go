package dispatch_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/internal/testkit/workload"
	"github.com/convergeplane/converge/webhooksdk"
)

// BenchmarkEngineScaling asks what serialises the pipeline (issue #41 §2,
// the last goal row, without a bigger machine): it runs N leaf resources
// (10,000; 2,000 under -short) through the engine with 1, 2 and 4
// in-process executors, and with 1 and 2 push dispatchers (inline, and
// batched by max_batch workload.MaxBatch), each executor or dispatcher with its
// own claim loop and completer over its own share of the shards, as that
// many members would split them. Each dispatcher has its own pool, engine
// and listener, as a process of its own would: of pgtest's size, and once
// (the -pgxpool modes) of the size a converge process opens by default.
// Q runs in the same rounds. It prints each mode's median rate as a ratio
// to Q, then each mode's wait profile over its rounds (waitProf): what the
// database's backends were doing, the pools' acquire waits, the CPU, the
// top Go block and mutex waits. Each mode is a sub-benchmark, so -bench
// 'EngineScaling/(Q|inproc×1)$' runs only those.
//
// Run: go test ./dispatch -run '^$' -bench EngineScaling -benchtime 1x
func BenchmarkEngineScaling(b *testing.B) {
	n, rounds := 10_000, 3
	if testing.Short() {
		n = 2_000
	}
	defer enableGoProfiles()()
	type mode struct {
		name string
		run  func(testing.TB, int) (float64, *waitProf)
	}
	modes := []mode{{"Q", func(tb testing.TB, n int) (float64, *waitProf) { return workload.Q(tb, n), nil }}}
	for _, k := range []int{1, 2, 4} {
		modes = append(modes, mode{fmt.Sprintf("inproc×%d", k), func(tb testing.TB, n int) (float64, *waitProf) { return scaleInproc(tb, n, k) }})
	}
	for _, batch := range []int{1, workload.MaxBatch} {
		name := "http"
		if batch > 1 {
			name = "http_batch"
		}
		for _, k := range []int{1, 2} {
			modes = append(modes, mode{fmt.Sprintf("%s×%d", name, k), func(tb testing.TB, n int) (float64, *waitProf) {
				return scaleHTTP(tb, n, k, batch, pgtest.PoolMaxConns)
			}})
		}
		// The pool a converge process opens unless pool_max_conns says
		// otherwise: pgx's default size.
		modes = append(modes, mode{name + "×1-pgxpool", func(tb testing.TB, n int) (float64, *waitProf) { return scaleHTTP(tb, n, 1, batch, 0) }})
	}
	for range b.N {
		rates := map[string][]float64{}
		profs := map[string]*waitProf{}
		for round := range rounds {
			for _, m := range modes {
				var (
					r float64
					p *waitProf
				)
				if !b.Run(m.name, func(b *testing.B) { r, p = m.run(b, n) }) || r == 0 {
					continue // filtered out by -bench
				}
				rates[m.name] = append(rates[m.name], r)
				if p != nil {
					if profs[m.name] == nil {
						profs[m.name] = newWaitProf()
					}
					profs[m.name].add(p)
				}
				logf("round %d %-14s %8.0f /s", round+1, m.name, r)
			}
		}
		q := math.NaN()
		if rates["Q"] != nil {
			q = workload.Median(rates["Q"])
		}
		b.ReportMetric(q, "Q/s")
		line := fmt.Sprintf("N=%d, medians of %d rounds: Q %.0f/s", n, rounds, q)
		for _, m := range modes[1:] {
			if rates[m.name] == nil {
				continue
			}
			r := workload.Median(rates[m.name])
			b.ReportMetric(r/q, m.name+"/Q")
			line += fmt.Sprintf("; %s %.0f/s (%.3f·Q", m.name, r, r/q)
			// Against one executor or dispatcher of its kind, in the same rounds.
			if kind, _, _ := strings.Cut(m.name, "×"); kind+"×1" != m.name && rates[kind+"×1"] != nil {
				line += fmt.Sprintf(", %.2f× %s×1", r/workload.Median(rates[kind+"×1"]), kind)
			}
			line += ")"
		}
		logf("%s", line)
		for _, m := range modes[1:] {
			if p := profs[m.name]; p != nil {
				p.report(m.name)
			}
		}
	}
}

// scaleLog discards the executors' and dispatchers' logs.
var scaleLog = slog.New(slog.DiscardHandler)

// shareOf returns the i-th of k equal shard ranges.
func shareOf(i, k int) func() (int, int) {
	lo, hi := i*256/k, (i+1)*256/k-1
	return func() (int, int) { return lo, hi }
}

// scaleInproc runs the leaves with k in-process executors on one pool.
func scaleInproc(tb testing.TB, n, k int) (float64, *waitProf) {
	x := workload.NewDB(tb)
	defer x.Close()
	for i := range k {
		ex := inproc.New(inproc.Config{Claimer: fmt.Sprintf("inproc-%d", i), Range: shareOf(i, k), Concurrency: workload.Concurrency,
			Handlers: map[string]inproc.Handler{"leaf/1": inproc.HandlerFunc(workload.Noop)}}, x.Eng, x.Lis.Subscribe("work_ready"), scaleLog)
		must(tb, ex.Start(x.Context()))
		x.OnClose(ex.Stop)
	}
	x.Listen()
	x.Seed(n)
	return profiled(tb, x, n, x.DB.Pool)
}

// scaleHTTP runs the leaves with k push dispatchers to one no-op provider
// endpoint with max_batch maxBatch; each dispatcher has its own pool of
// conns connections (0: pgx's default size), engine, store and listener.
func scaleHTTP(tb testing.TB, n, k, maxBatch int, conns int32) (float64, *waitProf) {
	x := workload.NewDB(tb)
	defer x.Close()
	box, tokenKey := workload.Keys(tb)
	var cbh forward // the first dispatcher's receiver (inline answers: unused)
	cbSrv := httptest.NewServer(&cbh)
	x.OnClose(cbSrv.Close)
	provSrv := httptest.NewUnstartedServer(nil)
	_, secret, err := x.St.CreateEndpoint(x.Context(), box, store.PutEndpointParams{Name: "bench",
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://" + provSrv.Listener.Addr().String() + "/converge"},
		// Each dispatcher's share of max_concurrency is its share of the
		// shards, so k dispatchers have workload.Concurrency in all.
		MaxConcurrency: workload.Concurrency, MaxBatch: maxBatch})
	must(tb, err)
	h, err := webhooksdk.Handler([]webhooksdk.Provider{webhooksdk.WorkFunc("leaf", 1, workload.Noop)}, webhooksdk.WithSecrets(secret.Reveal()),
		webhooksdk.WithLogger(scaleLog))
	must(tb, err)
	provSrv.Config.Handler = h
	provSrv.Start()
	x.OnClose(provSrv.Close)
	pools := []*pgxpool.Pool{x.DB.Pool}
	for i := range k {
		cfg, err := pgxpool.ParseConfig(x.DB.DSN)
		must(tb, err)
		cfg.MaxConns = cmp.Or(conns, cfg.MaxConns)
		engine.PoolDefaults(cfg, scaleLog)
		db, err := pgxpool.NewWithConfig(x.Context(), cfg)
		must(tb, err)
		pgtest.Warm(tb, db)
		x.OnClose(db.Close)
		pools = append(pools, db)
		st := store.New(db, store.Config{})
		lis := st.NewListener(scaleLog)
		d, err := dispatch.New(dispatch.Config{Claimer: fmt.Sprintf("dispatch-%d", i), Range: shareOf(i, k), SecretBox: box, TokenKey: tokenKey,
			CallbackBaseURL: cbSrv.URL, DevMode: true, Logger: scaleLog}, engine.New(db, engine.Config{}), st,
			dispatch.Wakeups{WorkReady: lis.Subscribe("work_ready"), EndpointsChanged: lis.Subscribe("endpoints_changed")})
		must(tb, err)
		if i == 0 {
			cb := d.Callbacks()
			cbh.h.Store(&cb)
		}
		must(tb, d.Start(x.Context()))
		x.OnClose(d.Stop)
		must(tb, lis.Start(x.Context()))
		x.OnClose(lis.Stop)
		waitFor(tb, 10*time.Second, "the endpoint to be ready", func() bool { ok, _ := d.Registry().PairStatus("leaf", 1); return ok })
	}
	x.Listen()
	x.Seed(n)
	return profiled(tb, x, n, pools...)
}

// profiled converges the seeded leaves under a waitProf.
func profiled(tb testing.TB, x *workload.DB, n int, pools ...*pgxpool.Pool) (float64, *waitProf) {
	w, err := startWaits(context.WithoutCancel(x.Context()), x.DB.DSN, pools...)
	must(tb, err)
	rate := x.Converge(n)
	return rate, w.finish()
}
