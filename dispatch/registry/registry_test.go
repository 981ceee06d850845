package registry_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/breaker"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/registry"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	st  *store.Store
	box *store.SecretBox
	ctx context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	box, err := store.NewSecretBox(bytes.Repeat([]byte{3}, store.SecretKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{st: store.New(db.Pool, store.Config{}), box: box, ctx: t.Context()}
}

func (b *bundle) endpoint(t *testing.T, name string, maxConc int, health bool, kinds ...string) {
	t.Helper()
	p := store.PutEndpointParams{Name: name, MaxConcurrency: maxConc,
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://127.0.0.1:9/" + name}}
	for _, k := range kinds {
		p.Kinds = append(p.Kinds, store.EndpointKind{Kind: k, KindVersion: 1})
	}
	if health {
		p.Health = store.EndpointHealth{URL: "http://127.0.0.1:9/" + name + "/health", HealthyThreshold: 2, UnhealthyThreshold: 3}
	}
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, p); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) registry(t *testing.T, cfg registry.Config) *registry.Registry {
	t.Helper()
	cfg.Box = b.box
	if !cfg.Egress.AllowHTTP && cfg.Egress.AllowCIDRs == nil {
		cfg.Egress.DevMode = true
	}
	r, err := registry.New(cfg, b.st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if err := r.Refresh(b.ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

func wantStatus(t *testing.T, r *registry.Registry, kind string, ready bool, reason string) {
	t.Helper()
	ok, why := r.PairStatus(kind, 1)
	if ok != ready || !strings.Contains(why, reason) {
		t.Fatalf("PairStatus(%s) = %v, %q; want %v containing %q", kind, ok, why, ready, reason)
	}
}

func TestAcquireLeastInFlightWithinLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.endpoint(t, "a", 2, false, "leaf")
	b.endpoint(t, "b", 3, false, "leaf", "other")
	r := b.registry(t, registry.Config{})

	pairs, _, spare, capacity := r.Claimable(nil)
	if len(pairs) != 2 || spare != 5 || capacity != 5 {
		t.Fatalf("Claimable = %v, %d, %d; want both pairs, 5 spare of 5", pairs, spare, capacity)
	}
	var slots []*registry.Slot
	count := map[string]int{}
	for range 5 {
		s, ok := r.Acquire("leaf/1")
		if !ok {
			t.Fatal("no slot while capacity remains")
		}
		slots = append(slots, s)
		count[s.Endpoint().Name()]++
		// Least in flight: the two never differ by more than one until a
		// limit is reached.
		if d := count["a"] - count["b"]; count["a"] < 2 && (d > 1 || d < -1) {
			t.Fatalf("unbalanced: %v", count)
		}
	}
	if count["a"] != 2 || count["b"] != 3 {
		t.Fatalf("slots per endpoint = %v, want each at its max_concurrency", count)
	}
	if _, ok := r.Acquire("leaf/1"); ok {
		t.Fatal("a slot beyond max_concurrency")
	}
	if _, _, spare, _ := r.Claimable(nil); spare != 0 {
		t.Fatalf("spare = %d when saturated", spare)
	}
	wantStatus(t, r, "leaf", true, "") // saturated is still ready
	slots[0].Done(registry.Success)
	slots[0].Done(registry.Success) // a second Done is a no-op
	if r.InFlight() != 4 {
		t.Fatalf("in flight %d, want 4", r.InFlight())
	}
	if s, ok := r.Acquire("leaf/1", slots[0].Endpoint().Name()); ok {
		t.Fatalf("acquired %s though it is excluded and the other is full", s.Endpoint().Name())
	}
	// A task queued locally takes the freed slot: nothing more to claim.
	if _, _, spare, _ = r.Claimable(map[string]int{"leaf/1": 1}); spare != 0 {
		t.Fatalf("with one queued: %d spare; want nothing claimable", spare)
	}
}

func TestShareOfMaxConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.endpoint(t, "a", 10, false, "leaf")
	b.endpoint(t, "tiny", 1, false, "small")
	r := b.registry(t, registry.Config{Share: func() float64 { return 0.25 }})
	for _, s := range r.Status() {
		if want := map[string]int{"a": 3, "tiny": 1}[s.Name]; s.Limit != want {
			t.Errorf("%s limit = %d, want %d (a quarter, at least 1)", s.Name, s.Limit, want)
		}
	}
}

func TestHealthThresholds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.endpoint(t, "a", 4, true, "leaf", "other")
	r := b.registry(t, registry.Config{})
	wantStatus(t, r, "leaf", false, "waiting for its first health probe")
	probes := r.Probes()
	if len(probes) != 1 {
		t.Fatalf("%d probes, want 1", len(probes))
	}
	e := probes[0].Endpoint
	ready := registry.ProbeResult{Ready: map[string]bool{"leaf/1": true, "other/1": false}}
	failed := registry.ProbeResult{Err: errors.New("connection refused")}

	e.ReportProbe(ready) // the first answer decides at once
	wantStatus(t, r, "leaf", true, "")
	wantStatus(t, r, "other", false, "reports other/1 not ready")
	e.ReportProbe(failed)
	e.ReportProbe(failed)
	wantStatus(t, r, "leaf", true, "") // 2 of 3
	e.ReportProbe(failed)
	wantStatus(t, r, "leaf", false, "health probe failed: connection refused")
	e.ReportProbe(ready)
	wantStatus(t, r, "leaf", false, "health probe failed") // 1 of 2
	e.ReportProbe(ready)
	wantStatus(t, r, "leaf", true, "")
	e.ReportProbe(registry.ProbeResult{Ready: map[string]bool{"other/1": true}})
	e.ReportProbe(registry.ProbeResult{Ready: map[string]bool{"other/1": true}})
	e.ReportProbe(registry.ProbeResult{Ready: map[string]bool{"other/1": true}})
	wantStatus(t, r, "leaf", false, "does not list leaf/1")
	if st, _ := r.EndpointStatus("a"); st.LastProbe == nil {
		t.Error("no last probe time")
	}
}

func TestNotReadyReasons(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.endpoint(t, "a", 4, false, "leaf")
	r := b.registry(t, registry.Config{Breaker: breaker.Config{Failures: 2, Cooldown: time.Hour}})
	wantStatus(t, r, "missing", false, "no endpoint is registered for missing/1")

	s, _ := r.Acquire("leaf/1")
	s.Endpoint().BackOff(time.Now().Add(time.Hour), "429 Too Many Requests")
	s.Done(registry.Neutral)
	wantStatus(t, r, "leaf", false, "backs off until")
	if _, ok := r.Acquire("leaf/1"); ok {
		t.Fatal("acquired a backed-off endpoint")
	}

	b.endpoint(t, "b", 4, false, "other")
	if err := r.Refresh(b.ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s, ok := r.Acquire("other/1")
		if !ok {
			t.Fatal("no slot")
		}
		s.Done(registry.Failure)
	}
	wantStatus(t, r, "other", false, "circuit breaker open")
	if st, _ := r.EndpointStatus("b"); st.Breaker != breaker.Open || st.BreakerUntil == nil {
		t.Errorf("status = %+v, want an open breaker", st)
	}

	b.endpoint(t, "c", 4, false, "third")
	if err := r.Refresh(b.ctx); err != nil {
		t.Fatal(err)
	}
	s, _ = r.Acquire("third/1")
	s.Endpoint().Disable("its target answered 410 Gone")
	s.Done(registry.Neutral)
	wantStatus(t, r, "third", false, "is disabled: its target answered 410 Gone")
}

func TestEgressPolicyMakesEndpointUnusable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.endpoint(t, "a", 4, false, "leaf")
	r := b.registry(t, registry.Config{Egress: egress.Policy{AllowHTTP: true}})
	wantStatus(t, r, "leaf", false, "is unusable: target http://127.0.0.1:9/a is refused")
	if st, _ := r.EndpointStatus("a"); st.Unusable == "" {
		t.Error("status does not say why the endpoint is unusable")
	}
}

func TestRefreshKeepsRuntimeState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.endpoint(t, "a", 4, false, "leaf")
	r := b.registry(t, registry.Config{})
	s, _ := r.Acquire("leaf/1")
	if _, _, _, err := b.st.PutEndpoint(b.ctx, b.box, store.PutEndpointParams{Name: "a", MaxConcurrency: 9,
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://127.0.0.1:9/a"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(b.ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := r.EndpointStatus("a")
	if st.Limit != 9 || st.InFlight != 1 {
		t.Fatalf("after a config change: limit %d in flight %d; want 9 and the slot still counted", st.Limit, st.InFlight)
	}
	s.Done(registry.Success)
	if err := b.st.DeleteEndpoint(b.ctx, "", "a", store.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(b.ctx); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, r, "leaf", false, "no endpoint is registered")
}

// TestProbeFailuresBeforeFirstHealthy: a new endpoint's first probes fail
// while its provider is set up (it does not hold the secret yet). They
// decided its pairs unready at once, so the first healthy answers were
// then outvoted, and a failed probe taken as a half-open breaker's trial
// re-opened it with a doubled cooldown. Until the endpoint first answers,
// failures count for nothing.
func TestProbeFailuresBeforeFirstHealthy(t *testing.T) {
	t.Parallel()
	signature := registry.ProbeResult{Err: errors.New("answered 401 Unauthorized: signature mismatch")}
	ready := registry.ProbeResult{Ready: map[string]bool{"leaf/1": true}}

	t.Run("Readiness", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.endpoint(t, "a", 4, true, "leaf")
		r := b.registry(t, registry.Config{})
		e := r.Probes()[0].Endpoint
		for range 5 {
			e.ReportProbe(signature)
		}
		wantStatus(t, r, "leaf", false, "not healthy yet: health probe failed: answered 401")
		if st, _ := r.EndpointStatus("a"); st.Breaker != breaker.Closed {
			t.Fatalf("breaker %s after early failures, want closed", st.BreakerState)
		}
		e.ReportProbe(ready) // the first healthy answer decides at once
		wantStatus(t, r, "leaf", true, "")
		// From now on failures count as before: three turn it unready.
		e.ReportProbe(signature)
		e.ReportProbe(signature)
		wantStatus(t, r, "leaf", true, "")
		e.ReportProbe(signature)
		wantStatus(t, r, "leaf", false, "health probe failed: answered 401")
	})

	t.Run("HalfOpenBreaker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.endpoint(t, "a", 4, false, "leaf") // no health URL yet
		r := b.registry(t, registry.Config{Breaker: breaker.Config{Failures: 1, Cooldown: time.Nanosecond, MaxCooldown: time.Hour}})
		slot, ok := r.Acquire("leaf/1")
		if !ok {
			t.Fatal("no slot")
		}
		slot.Done(registry.Failure) // opens the breaker; half-open a nanosecond later
		// The operator adds a health URL; the provider does not serve it yet.
		if _, _, _, err := b.st.PutEndpoint(b.ctx, b.box, store.PutEndpointParams{Name: "a", MaxConcurrency: 4,
			Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
			Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://127.0.0.1:9/a"},
			Health: store.EndpointHealth{URL: "http://127.0.0.1:9/a/health"}}); err != nil {
			t.Fatal(err)
		}
		if err := r.Refresh(b.ctx); err != nil {
			t.Fatal(err)
		}
		before, _ := r.EndpointStatus("a")
		if before.BreakerUntil == nil {
			t.Fatal("breaker not open")
		}
		e := r.Probes()[0].Endpoint
		e.ReportProbe(signature)
		after, _ := r.EndpointStatus("a")
		if after.BreakerUntil == nil || !after.BreakerUntil.Equal(*before.BreakerUntil) || after.Breaker != breaker.HalfOpen {
			t.Fatalf("an early failed probe moved the breaker: %s until %v, was until %v", after.BreakerState, after.BreakerUntil, before.BreakerUntil)
		}
		e.ReportProbe(ready) // a healthy probe is the trial that closes it
		if st, _ := r.EndpointStatus("a"); st.Breaker != breaker.Closed {
			t.Fatalf("breaker %s after a healthy probe, want closed", st.BreakerState)
		}
	})
}

// TestClaimableCountsBatches: a slot of an endpoint with max_batch n carries
// n tasks, so claims fill its batches; one batch takes one slot.
func TestClaimableCountsBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, store.PutEndpointParams{Name: "batched", MaxConcurrency: 2, MaxBatch: 8,
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://127.0.0.1:9/batched"}}); err != nil {
		t.Fatal(err)
	}
	r := b.registry(t, registry.Config{})
	if _, _, spare, capacity := r.Claimable(nil); spare != 16 || capacity != 16 {
		t.Fatalf("Claimable spare %d of %d, want 16 of 16 (2 slots × max_batch 8)", spare, capacity)
	}
	s, ok := r.Acquire("leaf/1")
	if !ok || s.Endpoint().MaxBatch() != 8 {
		t.Fatalf("Acquire = %v; want a slot of an endpoint with max_batch 8", ok)
	}
	if _, _, spare, _ := r.Claimable(map[string]int{"leaf/1": 3}); spare != 5 {
		t.Fatalf("one slot busy, 3 queued: %d spare, want 8 - 3 = 5", spare)
	}
	s.Done(registry.Success)
}

// TestRouteByNamespace: a namespace's task goes to its own endpoints
// serving the pair, else to the default namespace's; a namespace's own
// pairs are listed for the claim whether their endpoints are ready or not,
// and RouteStatus names its own endpoints when its tasks park.
func TestRouteByNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, _, err := b.st.PutNamespace(b.ctx, store.PutNamespaceParams{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	b.endpoint(t, "common", 2, false, "leaf", "other")
	p := store.PutEndpointParams{Namespace: "team-a", Name: "a-leaves", MaxConcurrency: 1,
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: "http://127.0.0.1:9/a"},
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}}}
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, p); err != nil {
		t.Fatal(err)
	}
	p.Name, p.Kinds = "a-common", []store.EndpointKind{{Kind: "other", KindVersion: 1}}
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, p); err != nil {
		t.Fatal(err)
	}
	if err := b.st.DisableEndpoint(b.ctx, "a-common", "gone"); err != nil {
		t.Fatal(err)
	}
	r := b.registry(t, registry.Config{})
	// A namespace's parked pair names its own endpoints, not default's.
	if ok, why := r.RouteStatus("team-a", "other", 1); ok || !strings.Contains(why, "of namespace team-a") || !strings.Contains(why, "a-common is disabled") {
		t.Errorf("RouteStatus(team-a, other) = %v, %q; want parked by its own disabled endpoint", ok, why)
	}
	if ok, why := r.RouteStatus("team-b", "other", 1); !ok {
		t.Errorf("RouteStatus(team-b, other) = %v, %q; want ready (default's endpoint)", ok, why)
	}
	for _, c := range []struct{ ns, pair, want string }{
		{"team-a", "other/1", "team-a:other/1"},
		{"team-a", "leaf/1", "team-a:leaf/1"},
		{"team-b", "leaf/1", "leaf/1"},
		{"default", "leaf/1", "leaf/1"},
	} {
		if got := r.Route(c.ns, c.pair); got != c.want {
			t.Errorf("Route(%s, %s) = %s; want %s", c.ns, c.pair, got, c.want)
		}
	}
	pairs, own, _, _ := r.Claimable(nil)
	slices.Sort(pairs)
	slices.Sort(own)
	wantOwn := []string{"team-a:leaf/1", "team-a:other/1"}
	if want := []string{"leaf/1", "other/1", "team-a:leaf/1"}; !slices.Equal(pairs, want) || !slices.Equal(own, wantOwn) {
		t.Fatalf("Claimable = %v, own %v; want %v, own %v", pairs, own, want, wantOwn)
	}
	if s, ok := r.Acquire("team-a:leaf/1"); !ok || s.Endpoint().Name() != "a-leaves" {
		t.Fatalf("Acquire(team-a:leaf/1) = %v, %v; want a-leaves", s, ok)
	}
	// team-a's endpoint is full: its pair is no longer claimable, and
	// still its own.
	pairs, own, _, _ = r.Claimable(nil)
	if slices.Contains(pairs, "team-a:leaf/1") || !slices.Contains(own, "team-a:leaf/1") {
		t.Fatalf("with a-leaves full: Claimable = %v, own %v", pairs, own)
	}
	if s, ok := r.Acquire("leaf/1"); !ok || s.Endpoint().Name() != "common" {
		t.Fatalf("Acquire(leaf/1) = %v, %v; want common", s, ok)
	}
}
