package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
)

// rateRef returns a pointer to v, for the optional rate settings.
func rateRef[T any](v T) *T { return &v }

// rateEndpoint creates endpoint name limited to rate requests per second
// with burst (nil: the default) and returns the stored endpoint.
func rateEndpoint(t *testing.T, b *endpointBundle, name string, rate float64, burst *int, adaptive bool) store.Endpoint {
	t.Helper()
	p := endpointParams(name)
	p.RateLimit, p.Burst, p.RateAdaptive = &rate, burst, adaptive
	ep, _, err := b.st.CreateEndpoint(b.ctx, b.box, p)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// ageBucket moves the bucket's clock back by d: as if d had passed since
// its last refill (and its last decrease).
func ageBucket(t *testing.T, b *endpointBundle, name string, d time.Duration) {
	t.Helper()
	if _, err := b.db.Pool.Exec(b.ctx, `UPDATE endpoint_rate_buckets SET refilled_at = refilled_at - make_interval(secs => $2),
	    lowered_at = lowered_at - make_interval(secs => $2) WHERE endpoint = $1`, name, d.Seconds()); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*max(1, math.Abs(b)) }

func TestEndpointRateSettings(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	ep := rateEndpoint(t, b, "r", 2.5, nil, true)
	if ep.RateLimit == nil || *ep.RateLimit != 2.5 || ep.Burst == nil || *ep.Burst != 3 || !ep.RateAdaptive {
		t.Fatalf("rate_limit %v, burst %v, adaptive %v; want 2.5, ceil(2.5) = 3, true", ep.RateLimit, ep.Burst, ep.RateAdaptive)
	}
	if ep.RateState == nil || ep.RateState.EffectiveRate != 2.5 {
		t.Fatalf("rate_state = %+v, want effective_rate 2.5 before any lease", ep.RateState)
	}
	// Re-applied without a limit: unlimited, no state shown.
	ep2, res, _, err := b.st.PutEndpoint(b.ctx, b.box, endpointParams("r"))
	if err != nil || res != store.ApplyConfigured {
		t.Fatalf("put = %v, %v", res, err)
	}
	if ep2.RateLimit != nil || ep2.Burst != nil || ep2.RateAdaptive || ep2.RateState != nil {
		t.Fatalf("unlimited endpoint shows %v %v %v %+v", ep2.RateLimit, ep2.Burst, ep2.RateAdaptive, ep2.RateState)
	}
	l, err := b.st.LeaseRateTokens(b.ctx, "r", 7, 0)
	if err != nil || l.Granted != 7 || l.Effective != 0 {
		t.Fatalf("lease of an unlimited endpoint = %+v, %v; want all 7 granted, no rate", l, err)
	}
}

// TestRateLeaseBucket walks the shared bucket: it starts full (burst),
// grants no more than it holds, refills at the rate up to its size, and
// says how long until a chunk is there again.
func TestRateLeaseBucket(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	rateEndpoint(t, b, "b", 10, rateRef(4), false)

	l, err := b.st.LeaseRateTokens(b.ctx, "b", 3, 0)
	if err != nil || l.Granted != 3 || l.Effective != 10 {
		t.Fatalf("first lease = %+v, %v; want 3 of a full bucket of 4, at 10/s", l, err)
	}
	l, _ = b.st.LeaseRateTokens(b.ctx, "b", 3, 0)
	if l.Granted != 1 {
		t.Fatalf("second lease granted %d, want the 1 left", l.Granted)
	}
	// Empty: nothing until 3 tokens have accrued at 10/s (0.3 s), less what
	// accrued since.
	l, _ = b.st.LeaseRateTokens(b.ctx, "b", 3, 0)
	if l.Granted != 0 || l.Wait <= 250*time.Millisecond || l.Wait > 300*time.Millisecond {
		t.Fatalf("lease of an empty bucket = %+v, want 0 granted and a wait just under 300ms", l)
	}
	// 0.25 s later: 2.5 tokens accrued, 2 granted, the half kept.
	if _, err := b.db.Pool.Exec(b.ctx, `UPDATE endpoint_rate_buckets SET tokens = 0 WHERE endpoint = 'b'`); err != nil {
		t.Fatal(err)
	}
	ageBucket(t, b, "b", 250*time.Millisecond)
	if l, _ = b.st.LeaseRateTokens(b.ctx, "b", 3, 0); l.Granted != 2 {
		t.Fatalf("after 0.25 s at 10/s granted %d, want 2", l.Granted)
	}
	// An hour later: never more than the bucket's size.
	ageBucket(t, b, "b", time.Hour)
	if l, _ = b.st.LeaseRateTokens(b.ctx, "b", 100, 0); l.Granted != 4 {
		t.Fatalf("after an hour granted %d, want the burst, 4", l.Granted)
	}
	// Waited requests reported with leases add up in the shared row.
	for _, n := range []int64{2, 5} {
		if _, err := b.st.LeaseRateTokens(b.ctx, "b", 1, n); err != nil {
			t.Fatal(err)
		}
	}
	ep, err := b.st.GetEndpoint(b.ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if ep.RateState == nil || ep.RateState.Waited != 7 || ep.RateState.EffectiveRate != 10 {
		t.Fatalf("rate_state = %+v, want waited 7 at 10/s", ep.RateState)
	}
}

// TestRateAdaptiveRule checks the adaptive rule of
// migrations/engine/rate_limits.sql: a throttle halves the effective rate
// (floor rate/32, at most once a second, and empties the bucket); the rate
// climbs back by rate/60 per second, full within 60 s.
func TestRateAdaptiveRule(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	rateEndpoint(t, b, "a", 64, nil, true)
	rateEndpoint(t, b, "fixed", 64, nil, false)

	eff, err := b.st.ReportRateThrottle(b.ctx, "a")
	if err != nil || eff != 32 {
		t.Fatalf("first throttle: effective %v, %v; want 64/2 = 32", eff, err)
	}
	if l, _ := b.st.LeaseRateTokens(b.ctx, "a", 10, 0); l.Granted != 0 || l.Effective < 32 || l.Effective > 33 {
		t.Fatalf("lease after a throttle = %+v, want an emptied bucket at about 32/s", l)
	}
	// A second throttle within the second (an answer to a request sent
	// before the decrease) is counted, not applied.
	if eff, _ = b.st.ReportRateThrottle(b.ctx, "a"); eff < 32 || eff > 33 {
		t.Fatalf("throttle within a second: effective %v, want still about 32", eff)
	}
	// 30 s later the rate has climbed by 64·30/60 = 32: full.
	ageBucket(t, b, "a", 30*time.Second)
	if l, _ := b.st.LeaseRateTokens(b.ctx, "a", 1, 0); !near(l.Effective, 64) {
		t.Fatalf("30 s after a halving to 32/s: effective %v, want 64", l.Effective)
	}
	// Repeated throttles, each a second apart, halve down to the floor,
	// 64/32 = 2 (each second also recovers 64/60).
	var last float64
	for range 10 {
		ageBucket(t, b, "a", time.Second)
		if last, err = b.st.ReportRateThrottle(b.ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if last != 2 {
		t.Fatalf("after 10 throttles a second apart: effective %v, want the floor 2", last)
	}
	// Recovery from the floor: after 15 s, 2 + 64·15/60 = 18; the bucket
	// gained the integral of the ramp, (2 + 18)/2 · 15 = 150, capped at its
	// size burst·18/64 = 64·18/64 = 18.
	ageBucket(t, b, "a", 15*time.Second)
	l, _ := b.st.LeaseRateTokens(b.ctx, "a", 1000, 0)
	if l.Effective < 18 || l.Effective > 18.5 || l.Granted != 18 {
		t.Fatalf("15 s after the floor: %+v, want effective 18 and the bucket's size 18 granted", l)
	}
	ep, _ := b.st.GetEndpoint(b.ctx, "a")
	if ep.RateState == nil || ep.RateState.Throttles != 12 || ep.RateState.LoweredAt == nil {
		t.Fatalf("rate_state = %+v, want 12 throttles and a decrease still recovering", ep.RateState)
	}
	// A non-adaptive endpoint counts throttles and keeps its rate.
	if eff, _ := b.st.ReportRateThrottle(b.ctx, "fixed"); eff != 64 {
		t.Fatalf("throttle of a non-adaptive endpoint: effective %v, want 64", eff)
	}
}

// TestRateAccruedIntegral checks rate_accrued against the closed form of the
// recovery ramp.
func TestRateAccruedIntegral(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	var got float64
	// Lowered to 10 of 40 at t0: full at t0 + 45 s. Over [t0, t0 + 60 s]:
	// (10 + 40)/2 · 45 + 40 · 15 = 1125 + 600 = 1725.
	err := b.db.Pool.QueryRow(b.ctx, `SELECT rate_accrued(40, 10, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z')`).Scan(&got)
	if err != nil || !near(got, 1725) {
		t.Fatalf("rate_accrued over the ramp and past it = %v, %v; want 1725", got, err)
	}
	// Inside the ramp, [t0 + 15 s, t0 + 30 s]: (20 + 30)/2 · 15 = 375.
	err = b.db.Pool.QueryRow(b.ctx, `SELECT rate_accrued(40, 10, '2026-01-01T00:00:00Z', '2026-01-01T00:00:15Z', '2026-01-01T00:00:30Z')`).Scan(&got)
	if err != nil || !near(got, 375) {
		t.Fatalf("rate_accrued inside the ramp = %v, %v; want 375", got, err)
	}
	// Never lowered: the rate times the time.
	err = b.db.Pool.QueryRow(b.ctx, `SELECT rate_accrued(40, NULL, NULL, '2026-01-01T00:00:00Z', '2026-01-01T00:00:02.5Z')`).Scan(&got)
	if err != nil || !near(got, 100) {
		t.Fatalf("rate_accrued at full rate = %v, %v; want 100", got, err)
	}
}
