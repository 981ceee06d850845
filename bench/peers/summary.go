package peers

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/convergeplane/converge/internal/testkit/workload"
)

// The figures one pair measures, by name: Q, the engine's workloads
// (internal/testkit/workload) and River's.
const (
	FigQ         = "Q"
	FigLeaves    = "leaves"
	FigRiverNoop = "river-noop"
	FigHTTP      = "http"
	FigHTTPBatch = "http32"
	FigRiverHTTP = "river-http"
	FigH         = "H"
	FigInproc    = "inproc"
	// FigBound is derived from two other figures: the most inline HTTP can reach
	// when the engine's work and the bare POSTs share the machine's cores
	// (see Bound).
	FigBound = "bound"
)

// Figures lists every figure in the order a pair line prints them.
func Figures() []string {
	return []string{FigQ, FigLeaves, FigRiverNoop, FigHTTP, FigHTTPBatch, FigRiverHTTP, FigH, FigInproc}
}

// Pair is one pair's rates, in tasks or jobs per second, by figure.
type Pair map[string]float64

// Bound returns p with FigBound set: inline HTTP does the engine's work
// (at inproc's rate alone) and a signed POST (at H's alone) for every task
// on the same cores, so its time per task is at least the sum of theirs.
func Bound(p Pair) Pair {
	out := make(Pair, len(p)+1)
	for k, v := range p {
		out[k] = v
	}
	out[FigBound] = 1 / (1/p[FigInproc] + 1/p[FigH])
	return out
}

// Goal is one of issue 41's goal rows: Num ÷ Den at least Must (Moonshot
// beyond). Cap, when set, is the figure that bounds Num with today's engine
// (FigBound for inline HTTP; inproc for batched HTTP: no executor is
// faster than none).
type Goal struct {
	Name     string
	Num, Den string
	Must     float64
	Moonshot float64
	Cap      string
}

// Goals are the goal rows the peer benchmark reports.
func Goals() []Goal {
	return []Goal{
		{Name: "leaves/River-noop", Num: FigLeaves, Den: FigRiverNoop, Must: 1.2, Moonshot: 2},
		{Name: "HTTP-inline/River-HTTP", Num: FigHTTP, Den: FigRiverHTTP, Must: 1.5, Moonshot: 3, Cap: FigBound},
		{Name: "HTTP-batched/River-HTTP", Num: FigHTTPBatch, Den: FigRiverHTTP, Must: 4, Moonshot: 8, Cap: FigInproc},
	}
}

// Stat is the median, min and max of a figure over the pairs.
type Stat struct{ Median, Min, Max float64 }

func (s Stat) String() string {
	return fmt.Sprintf("median %.2f (min %.2f max %.2f)", s.Median, s.Min, s.Max)
}

// Over is the Stat of num ÷ den computed within each pair: each pair's
// figures share the machine's state of the moment, so ratios within a pair
// are steadier than ratios of medians.
func Over(pairs []Pair, num, den string) Stat {
	rs := make([]float64, 0, len(pairs))
	for _, p := range pairs {
		rs = append(rs, p[num]/p[den])
	}
	return Stat{Median: workload.Median(rs), Min: slices.Min(rs), Max: slices.Max(rs)}
}

// GoalResult is a goal as the pairs measured it.
type GoalResult struct {
	Goal
	// Ratio is Num ÷ Den.
	Ratio Stat
	// NumQ and DenQ are Num ÷ Q and Den ÷ Q.
	NumQ, DenQ Stat
	// CapDen is Cap ÷ Den, the most Ratio could be; OfCap is Num ÷ Cap.
	// Both zero without a Cap.
	CapDen, OfCap Stat
}

// Evaluate measures every goal over pairs (at least one).
func Evaluate(pairs []Pair) []GoalResult {
	bounded := make([]Pair, len(pairs))
	for i, p := range pairs {
		bounded[i] = Bound(p)
	}
	pairs = bounded
	var out []GoalResult
	for _, g := range Goals() {
		r := GoalResult{Goal: g, Ratio: Over(pairs, g.Num, g.Den),
			NumQ: Over(pairs, g.Num, FigQ), DenQ: Over(pairs, g.Den, FigQ)}
		if g.Cap != "" {
			r.CapDen, r.OfCap = Over(pairs, g.Cap, g.Den), Over(pairs, g.Num, g.Cap)
		}
		out = append(out, r)
	}
	return out
}

// WritePair prints one pair's line: every rate, with each engine figure's
// ratio to its River peer.
func WritePair(w io.Writer, i int, p Pair) {
	var b strings.Builder
	fmt.Fprintf(&b, "pair %d:", i)
	for _, f := range Figures() {
		fmt.Fprintf(&b, " %s %.0f/s", f, p[f])
	}
	for _, g := range Goals() {
		fmt.Fprintf(&b, " | %s %.2f", g.Name, p[g.Num]/p[g.Den])
	}
	fmt.Fprintln(w, b.String())
}

// WriteSummary prints the median rates over the pairs, then one line per
// goal: the median of the per-pair ratios with their min and max, the
// issue's thresholds, each side ÷ Q, and the cap that bounds the goal.
func WriteSummary(w io.Writer, pairs []Pair) []GoalResult {
	var b strings.Builder
	fmt.Fprintf(&b, "medians of %d pairs:", len(pairs))
	for _, f := range Figures() {
		var xs []float64
		for _, p := range pairs {
			xs = append(xs, p[f])
		}
		fmt.Fprintf(&b, " %s %.0f/s", f, workload.Median(xs))
		if f != FigQ {
			fmt.Fprintf(&b, " (%.3f·Q)", Over(pairs, f, FigQ).Median)
		}
	}
	fmt.Fprintln(w, b.String())
	res := Evaluate(pairs)
	for _, r := range res {
		line := fmt.Sprintf("goal %-24s %s  must %g  moonshot %g  | %s %.3f·Q, %s %.3f·Q",
			r.Name, r.Ratio, r.Must, r.Moonshot, r.Num, r.NumQ.Median, r.Den, r.DenQ.Median)
		if r.Cap != "" {
			line += fmt.Sprintf("  | cap %s: %s/%s %.2f, %s at %.2f of it",
				r.Cap, r.Cap, r.Den, r.CapDen.Median, r.Num, r.OfCap.Median)
		}
		fmt.Fprintln(w, line)
	}
	return res
}
