package registry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/registry"
)

// poll waits until cond holds, failing after 10s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func rateStatus(t *testing.T, r *registry.Registry, name string) registry.EndpointStatus {
	t.Helper()
	s, ok := r.EndpointStatus(name)
	if !ok {
		t.Fatalf("no endpoint %s", name)
	}
	return s
}

// TestRateLeaseOnThePod walks a pod's side of a rate limit: an idle
// endpoint leases nothing and lets one task be claimed; the delivery that
// finds no token leases a chunk (100 ms at the rate); the next chunk is
// leased ahead when half is spent, so the pod never holds more than 1.5
// chunks; a dry bucket makes the pair "rate limited"; a throttle drops what
// the pod holds.
func TestRateLeaseOnThePod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rate, burst := 50.0, 12 // chunk = ceil(50 · 0.1) = 5
	p := store.PutEndpointParams{Name: "lim", MaxConcurrency: 100, RateLimit: &rate, Burst: &burst,
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://127.0.0.1:9/lim"},
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}}}
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, p); err != nil {
		t.Fatal(err)
	}
	r := b.registry(t, registry.Config{})

	pairs, _, spare, capacity := r.Claimable(nil)
	if len(pairs) != 1 || spare != 1 || capacity != 5 {
		t.Fatalf("idle: Claimable = %v, %d, %d; want [leaf/1], one task (no token yet), capacity a chunk (5)", pairs, spare, capacity)
	}
	if s := rateStatus(t, r, "lim"); s.RateTokens != 0 || s.RateLimit != rate {
		t.Fatalf("idle: %d tokens at %v/s; want none leased at 50/s", s.RateTokens, s.RateLimit)
	}
	if _, ok := r.Acquire("leaf/1"); ok {
		t.Fatal("Acquire without a token succeeded")
	}
	poll(t, "a chunk of 5 tokens", func() bool { return rateStatus(t, r, "lim").RateTokens == 5 })
	if n := rateStatus(t, r, "lim").RateLeases; n != 1 {
		t.Fatalf("%d leases for the first chunk, want 1", n)
	}
	// Leasing ahead starts (synchronously, inside Acquire) only when half
	// the chunk is spent: 5 → 4 → 3 lease nothing, 3 → 2 leases the next.
	for i, want := range []int64{1, 1, 2} {
		slot, ok := r.Acquire("leaf/1")
		if !ok {
			t.Fatalf("request %d: no slot with tokens in hand", i+1)
		}
		slot.Done(registry.Neutral)
		if n := rateStatus(t, r, "lim").RateLeases; n != want {
			t.Fatalf("after request %d: %d leases, want %d", i+1, n, want)
		}
	}
	poll(t, "the next chunk, leased ahead", func() bool { return rateStatus(t, r, "lim").RateTokens == 2+5 })

	sent := 3
	start := time.Now()
	most := 0
	for {
		slot, ok := r.Acquire("leaf/1")
		if !ok {
			if ready, why := r.PairStatus("leaf", 1); !ready {
				if !strings.Contains(why, "endpoint lim is rate limited (50 requests/s): no token before ") {
					t.Fatalf("PairStatus says %q, want it rate limited", why)
				}
				break
			}
			time.Sleep(time.Millisecond) // a lease in flight
			continue
		}
		slot.Done(registry.Neutral)
		sent++
		most = max(most, rateStatus(t, r, "lim").RateTokens)
	}
	elapsed := time.Since(start)
	if most > 5/2+5 {
		t.Errorf("the pod held %d tokens, more than 1.5 chunks (7)", most)
	}
	// Everything sent came out of the bucket: its burst and what accrued.
	if limit := float64(burst) + rate*elapsed.Seconds() + 1; float64(sent) > limit {
		t.Errorf("sent %d in %s; the bucket holds at most %.0f", sent, elapsed, limit)
	}
	if sent < burst {
		t.Errorf("sent %d before the bucket ran dry, want at least its burst, %d", sent, burst)
	}
	// The bucket refills: tokens come again without anyone asking (the pod
	// was busy), and the claim loop may claim again.
	poll(t, "the next chunk after the bucket refilled", func() bool { return rateStatus(t, r, "lim").RateTokens > 0 })
	if s := rateStatus(t, r, "lim"); s.RateWaited != 0 || s.EffectiveRate != rate {
		t.Errorf("waited %d at %v/s; want none waited yet (only tokens leased after a dry bucket count), at 50/s", s.RateWaited, s.EffectiveRate)
	}
	slot, ok := r.Acquire("leaf/1")
	if !ok {
		t.Fatal("no slot with tokens in hand")
	}
	slot.Done(registry.Neutral)
	if s := rateStatus(t, r, "lim"); s.RateWaited != 1 {
		t.Errorf("a request on a chunk leased after the bucket ran dry: waited %d, want 1", s.RateWaited)
	}
	slot.Endpoint().Throttled()
	if s := rateStatus(t, r, "lim"); s.RateTokens != 0 {
		t.Errorf("after a throttle the pod holds %d tokens, want 0", s.RateTokens)
	}
}
