package peers_test

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/convergeplane/converge/bench/peers"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/internal/testkit/workload"
)

// The benchmark's knobs (make bench-peers PEERS_FLAGS='-peers.pairs=5').
var (
	nFlag        = flag.Int("peers.n", 10_000, "tasks per workload (2,000 under -short)")
	pairsFlag    = flag.Int("peers.pairs", 3, "alternated pairs")
	noopWorkers  = flag.Int("peers.noop-workers", peers.NoopWorkers, "River no-op MaxWorkers")
	httpWorkers  = flag.Int("peers.http-workers", peers.HTTPWorkers, "River HTTP MaxWorkers")
	cooldownFlag = flag.Duration("peers.cooldown", peers.FetchCooldown, "River FetchCooldown")
	sweepFlag    = flag.Bool("peers.sweep", false, "instead: River no-op over workers {100,200,500} × cooldown {1ms,2ms,10ms}, once each")
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// BenchmarkPeers runs, on the same PostgreSQL server, each on a fresh
// database, in -peers.pairs pairs: Q; the engine's no-op leaves beside
// River's no-op jobs; the engine's HTTP path inline and batched beside
// River with a worker making the same signed POST to the same provider;
// and what caps the HTTP paths: H (bare signed POSTs) and the engine's
// in-process rate, alone and combined (peers.Bound). Odd pairs
// run the engine first, even pairs River first, so a drift of the
// machine's speed during a pair favours neither. It prints a line per pair
// and the goals' ratios, each the median over the pairs of the ratio
// within a pair.
//
// Run: make bench-peers (cd bench/peers && go test -run '^$' -bench Peers -benchtime 1x)
func BenchmarkPeers(b *testing.B) {
	n := *nFlag
	if testing.Short() {
		n = min(n, 2_000)
	}
	if *sweepFlag {
		sweep(b, n)
		return
	}
	noop := peers.RiverConfig{Workers: *noopWorkers, FetchCooldown: *cooldownFlag}
	hook := peers.RiverConfig{Workers: *httpWorkers, FetchCooldown: *cooldownFlag}
	fmt.Printf("peers: n=%d pairs=%d; River v0.51.2: no-op %d workers, HTTP %d workers, FetchCooldown %s, FetchPollInterval River's default\n",
		n, *pairsFlag, noop.Workers, hook.Workers, *cooldownFlag)
	fmt.Printf("river fetch cap (workers/cooldown): no-op %.0f jobs/s, HTTP %.0f jobs/s\n", noop.FetchCap(), hook.FetchCap())
	type run struct {
		fig string
		f   func(testing.TB, int) float64
	}
	engine := []run{
		{peers.FigLeaves, workload.Leaves},
		{peers.FigHTTP, func(tb testing.TB, n int) float64 { return workload.HTTP(tb, n, false, 1) }},
		{peers.FigHTTPBatch, func(tb testing.TB, n int) float64 { return workload.HTTP(tb, n, false, workload.MaxBatch) }},
	}
	river := []run{
		{peers.FigRiverNoop, func(tb testing.TB, n int) float64 { return peers.RiverNoop(tb, n, noop) }},
		{peers.FigRiverHTTP, func(tb testing.TB, n int) float64 { return peers.RiverHTTP(tb, n, hook) }},
	}
	caps := []run{{peers.FigH, workload.H}, {peers.FigInproc, workload.Inproc}}
	// Lines go to stdout: testing keeps only the first lines of a
	// benchmark's log, which would cut the summary off.
	for range b.N {
		var pairs []peers.Pair
		for i := 1; i <= *pairsFlag; i++ {
			order := slices.Concat([]run{{peers.FigQ, workload.Q}}, engine, river, caps)
			if i%2 == 0 {
				order = slices.Concat([]run{{peers.FigQ, workload.Q}}, river, engine, caps)
			}
			p := peers.Pair{}
			for _, r := range order {
				p[r.fig] = r.f(b, n)
			}
			peers.WritePair(os.Stdout, i, p)
			warnCap(p[peers.FigRiverNoop], noop)
			warnCap(p[peers.FigRiverHTTP], hook)
			pairs = append(pairs, p)
		}
		for _, r := range peers.WriteSummary(os.Stdout, pairs) {
			b.ReportMetric(r.Ratio.Median, r.Name)
			b.ReportMetric(r.NumQ.Median, r.Num+"/Q")
			b.ReportMetric(r.DenQ.Median, r.Den+"/Q")
			if r.Cap != "" {
				b.ReportMetric(r.CapDen.Median, r.Cap+"/"+r.Den)
			}
		}
	}
}

// warnCap warns when River came within a third of its fetch cap: then the
// cap, not River, may be what was measured.
func warnCap(rate float64, c peers.RiverConfig) {
	if rate > c.FetchCap()/3 {
		fmt.Printf("WARNING: River reached %.0f jobs/s, more than a third of its fetch cap %.0f (%d workers / %s): shorten -peers.cooldown\n",
			rate, c.FetchCap(), c.Workers, c.FetchCooldown)
	}
}

// sweep runs River no-op over workers × cooldown once each, for choosing
// NoopWorkers and FetchCooldown, with Q first and last for the machine's
// state.
func sweep(b *testing.B, n int) {
	q := workload.Q(b, n)
	fmt.Printf("sweep: n=%d, Q %.0f/s\n", n, q)
	for _, w := range []int{100, 200, 500} {
		for _, c := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond} {
			cfg := peers.RiverConfig{Workers: w, FetchCooldown: c}
			r := peers.RiverNoop(b, n, cfg)
			fmt.Printf("sweep: river-noop workers %3d cooldown %4s: %6.0f jobs/s (%.3f·Q, %.2f of its fetch cap)\n",
				w, c, r, r/q, r/cfg.FetchCap())
		}
	}
	fmt.Printf("sweep: Q again %.0f/s\n", workload.Q(b, n))
}
