package peers_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/convergeplane/converge/bench/peers"
)

// pairs are three pairs whose ratios are known: leaves ÷ River no-op 1.0,
// 1.5, 1.2 (median 1.2); http ÷ River HTTP 0.5 each; http32 ÷ River HTTP
// 2, 4, 3.
func testPairs() []peers.Pair {
	mk := func(q, leaves, noop, http, http32, rhttp, h, inproc float64) peers.Pair {
		return peers.Pair{peers.FigQ: q, peers.FigLeaves: leaves, peers.FigRiverNoop: noop, peers.FigHTTP: http,
			peers.FigHTTPBatch: http32, peers.FigRiverHTTP: rhttp, peers.FigH: h, peers.FigInproc: inproc}
	}
	return []peers.Pair{
		mk(100, 10, 10, 5, 20, 10, 40, 30),
		mk(200, 30, 20, 10, 80, 20, 60, 100),
		mk(100, 12, 10, 5, 30, 10, 20, 40),
	}
}

func TestEvaluateTakesTheMedianOfThePerPairRatios(t *testing.T) {
	t.Parallel()
	res := peers.Evaluate(testPairs())
	want := map[string]peers.Stat{
		"leaves/River-noop":       {Median: 1.2, Min: 1, Max: 1.5},
		"HTTP-inline/River-HTTP":  {Median: 0.5, Min: 0.5, Max: 0.5},
		"HTTP-batched/River-HTTP": {Median: 3, Min: 2, Max: 4},
	}
	if len(res) != len(want) {
		t.Fatalf("%d goals, want %d", len(res), len(want))
	}
	for _, r := range res {
		if got := r.Ratio; !near(got, want[r.Name]) {
			t.Errorf("%s: %+v, want %+v", r.Name, got, want[r.Name])
		}
	}
	// Caps: inline against 1/(1/inproc + 1/H) (120/7, 37.5, 40/3 over
	// River HTTP 10, 20, 10), batched against inproc (http32/inproc 2/3,
	// 4/5, 3/4).
	if got := res[1].CapDen; !near(got, peers.Stat{Median: 12.0 / 7, Min: 4.0 / 3, Max: 1.875}) {
		t.Errorf("inline cap: %+v", got)
	}
	if got := res[2].OfCap; !near(got, peers.Stat{Median: 0.75, Min: 2.0 / 3, Max: 0.8}) {
		t.Errorf("batched of its cap: %+v", got)
	}
	if got := res[0].NumQ; !near(got, peers.Stat{Median: 0.12, Min: 0.1, Max: 0.15}) {
		t.Errorf("leaves/Q: %+v", got)
	}
}

func TestWriteSummaryPrintsAGoalLineEach(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	peers.WriteSummary(&b, testPairs())
	out := b.String()
	for _, want := range []string{
		"goal leaves/River-noop        median 1.20 (min 1.00 max 1.50)  must 1.2  moonshot 2",
		"goal HTTP-inline/River-HTTP   median 0.50 (min 0.50 max 0.50)  must 1.5  moonshot 3",
		"cap bound: bound/river-http 1.71, http at 0.29 of it",
		"goal HTTP-batched/River-HTTP  median 3.00 (min 2.00 max 4.00)  must 4  moonshot 8",
		"cap inproc: inproc/river-http 4.00, http32 at 0.75 of it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func near(a, b peers.Stat) bool {
	d := func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }
	return d(a.Median, b.Median) && d(a.Min, b.Min) && d(a.Max, b.Max)
}
