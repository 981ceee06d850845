package integration

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestQuarantine checks reference 003's quarantine rules over the REST API
// and real webhook endpoints: a failing child set aside stops being retried
// and stops holding its root's rollup down; a spec edit persists but does
// not release it; value flows skip it; only unquarantine releases it, to
// its latest spec; a teardown is never held up by it.
func TestQuarantine(t *testing.T) {
	t.Parallel()
	s, provs := startStacks(t, &teardownLog{})
	provs["note"].broken.Store("q-note", struct{}{})
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "stack", "kind_version": 1, "name": "q"}); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "the failing note to hold the root down", func() bool {
		root, _ := s.detail("stack/q")
		note, _ := s.detail("note/q-note")
		return root.PhaseOf() == model.PhaseDegraded && note.PhaseOf() == model.PhaseFailed
	})

	// Failed covers a failure still being retried; the list tells it from
	// a terminal one.
	for query, want := range map[string]int{"phase=Failed&failure=retrying": 1, "phase=Failed&failure=terminal": 0} {
		var page struct{ Items []model.Resource }
		if code, body := s.call("GET", "/resources?kind=note&"+query, nil); code != 200 || json.Unmarshal(body, &page) != nil || len(page.Items) != want {
			t.Errorf("GET ?%s = %d %s, want %d items", query, code, body, want)
		}
	}
	if code, body := s.call("GET", "/resources?failure=sometimes", nil); code != 422 || !strings.Contains(string(body), "query.failure") {
		t.Errorf("a bad failure filter = %d %s", code, body)
	}

	code, body := s.call("POST", "/resources/note/q-note/quarantine", nil)
	var r model.Resource
	if code != 200 || json.Unmarshal(body, &r) != nil || r.PhaseOf() != model.PhaseQuarantined {
		t.Fatalf("quarantine = %d %s", code, body)
	}
	if code, body := s.call("POST", "/resources/note/q-note/quarantine", nil); code != 200 {
		t.Errorf("quarantine again = %d %s, want a no-op", code, body)
	}
	// Its pending retry is dropped, and nothing is delivered for it.
	if d, _ := s.detail("note/q-note"); d.Task != nil {
		t.Errorf("a quarantined resource kept its task: %+v", d.Task)
	}
	// The root's rollup no longer waits on it.
	s.waitReady("stack/q")
	runs := provs["note"].worked("q-note")

	// A spec edit persists (a new generation) but does not release it.
	code, body = s.call("POST", "/resources", map[string]any{"kind": "note", "kind_version": 1, "name": "q-note", "spec": map[string]any{"rev": 2}})
	if code != 200 || json.Unmarshal(body, &r) != nil || r.PhaseOf() != model.PhaseQuarantined || r.Generation != 2 {
		t.Fatalf("edit while quarantined = %d %s", code, body)
	}
	// Value flows skip a quarantined dependent.
	if code, body := s.call("POST", "/resources/subnet/q-subnet/quarantine", nil); code != 200 {
		t.Fatalf("quarantine subnet = %d %s", code, body)
	}
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "vpc", "kind_version": 1, "name": "q-vpc", "spec": map[string]any{"rev": 3}}); code != 200 {
		t.Fatalf("edit vpc = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "the vpc's new status", func() bool {
		d, _ := s.detail("vpc/q-vpc")
		return strings.Contains(string(d.Status), `"rev":3`) && d.PhaseOf() == model.PhaseReady
	})
	if d, _ := s.detail("subnet/q-subnet"); strings.Contains(string(d.Spec), `"vpc_rev":3`) || d.PhaseOf() != model.PhaseQuarantined {
		t.Errorf("a quarantined dependent took a value flow: %s %s", d.Phase, d.Spec)
	}
	if n := provs["note"].worked("q-note"); n != runs {
		t.Errorf("a quarantined resource was delivered %d more tasks", n-runs)
	}

	// Unquarantine releases it, to its latest spec.
	provs["note"].broken.Delete("q-note")
	if code, body := s.call("POST", "/resources/note/q-note/unquarantine", nil); code != 200 {
		t.Fatalf("unquarantine = %d %s", code, body)
	}
	s.waitReady("note/q-note")
	if d, _ := s.detail("note/q-note"); !strings.Contains(string(d.Status), `"rev":2`) {
		t.Errorf("released note status = %s, want its latest spec's", d.Status)
	}
	if code, body := s.call("POST", "/resources/note/q-note/unquarantine", nil); code != 200 {
		t.Errorf("unquarantine of a live resource = %d %s, want a no-op", code, body)
	}

	// Teardown goes through a quarantined node; quarantine is refused on
	// a resource being deleted.
	if code, body := s.call("DELETE", "/resources/stack/q", nil); code != 202 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if code, body := s.call("POST", "/resources/vpc/q-vpc/quarantine", nil); code != 409 {
		t.Errorf("quarantine while deleting = %d %s, want 409", code, body)
	}
	s.waitGone("stack/q", "subnet/q-subnet")
	if code, body := s.call("POST", "/resources/note/nope/quarantine", nil); code != 404 || !strings.Contains(string(body), "note/nope") {
		t.Errorf("quarantine of a missing resource = %d %s", code, body)
	}
	s.checkInvariants()
}

// probeProvider reports each resource's health from a switch the test
// flips out of band.
type probeProvider struct {
	sick  atomic.Bool
	mu    sync.Mutex
	calls map[webhooksdk.Trigger]int
}

func (p *probeProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "probe", Version: 1}
}
func (p *probeProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.mu.Lock()
	p.calls[req.Trigger]++
	p.mu.Unlock()
	ready := webhooksdk.Condition{Type: "Ready", Status: "True"}
	if p.sick.Load() {
		ready = webhooksdk.Condition{Type: "Ready", Status: "False", Reason: "Unreachable", Message: "the instance stopped answering"}
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`), Conditions: []webhooksdk.Condition{ready}}, nil
}

func (p *probeProvider) count(tr webhooksdk.Trigger) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[tr]
}

// TestResyncDrift enables resync on a running server through the live
// kind config (the first kind to resync: no restart), and checks that a
// health change out of band turns the resource Degraded and back without a
// spec change.
func TestResyncDrift(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/probe/manifest", map[string]any{"kind": "probe", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"observe","trigger":"specChange","emits":["status","conditions"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &probeProvider{calls: map[webhooksdk.Trigger]int{}}
	s.serveProvider("probe", p)
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "probe", "kind_version": 1, "name": "p1"}); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	s.waitReady("probe/p1")

	// Drift without resync goes unseen.
	p.sick.Store(true)
	if code, body := s.call("PUT", "/kinds/probe/versions/1/config", map[string]any{"resync_interval_secs": 1}); code != 200 {
		t.Fatalf("enable resync = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "p1 Degraded by a resync", func() bool {
		d, _ := s.detail("probe/p1")
		return d.PhaseOf() == model.PhaseDegraded
	})
	d, _ := s.detail("probe/p1")
	if d.Generation != 1 || p.count(webhooksdk.TriggerResync) == 0 {
		t.Errorf("after drift: generation %d, %d resyncs", d.Generation, p.count(webhooksdk.TriggerResync))
	}
	p.sick.Store(false)
	s.waitReady("probe/p1")

	// Disabled live: no more resyncs.
	if code, body := s.call("PUT", "/kinds/probe/versions/1/config", map[string]any{"resync_interval_secs": 0}); code != 200 {
		t.Fatalf("disable resync = %d %s", code, body)
	}
	time.Sleep(2 * time.Second) // a resync already queued may still run
	n := p.count(webhooksdk.TriggerResync)
	time.Sleep(7 * time.Second) // more than a reaper pass and the old interval
	if m := p.count(webhooksdk.TriggerResync); m != n {
		t.Errorf("%d resyncs after resync was disabled", m-n)
	}
	s.checkInvariants()
}

// versionProvider serves one version of kind ver and records the versions
// of the tasks it received.
type versionProvider struct {
	version int
	wrong   atomic.Int32
}

func (p *versionProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "ver", Version: p.version}
}
func (p *versionProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if req.KindVersion != p.version || req.Resource.KindVersion != p.version {
		p.wrong.Add(1)
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{"served_by":` + string(rune('0'+p.version)) + `}`)}, nil
}

// TestVersionRouting: resources of v1, v2 and v3 with endpoints for v1 and
// v2 only. v1 and v2 converge on their own endpoints; v3 parks with the
// reason in its detail, and converges once a v3 endpoint registers.
func TestVersionRouting(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	for v := 1; v <= 3; v++ {
		if code, body := s.call("PUT", "/kinds/ver/manifest", map[string]any{"kind": "ver", "kind_version": v,
			"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
			t.Fatalf("manifest v%d = %d %s", v, code, body)
		}
	}
	p1, p2, p3 := &versionProvider{version: 1}, &versionProvider{version: 2}, &versionProvider{version: 3}
	s.serveProvider("ver-v1", p1)
	s.serveProvider("ver-v2", p2)
	for v, name := range map[int]string{1: "a", 2: "b", 3: "c"} {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "ver", "kind_version": v, "name": name}); code != 201 {
			t.Fatalf("apply %s = %d %s", name, code, body)
		}
	}
	s.waitReady("ver/a")
	s.waitReady("ver/b")
	var parked struct {
		Phase  string `json:"phase"`
		Parked string `json:"parked"`
	}
	waitFor(t, 20*time.Second, "c to park with a reason", func() bool {
		_, body := s.call("GET", "/resources/ver/c", nil)
		return json.Unmarshal(body, &parked) == nil && parked.Parked != ""
	})
	if parked.Phase != "Reconciling" || !strings.Contains(parked.Parked, "ver") || !strings.Contains(parked.Parked, "3") {
		t.Errorf("c = %+v", parked)
	}
	s.serveProvider("ver-v3", p3)
	s.waitReady("ver/c")
	for _, p := range []*versionProvider{p1, p2, p3} {
		if p.wrong.Load() != 0 {
			t.Errorf("the v%d endpoint received %d tasks of another version", p.version, p.wrong.Load())
		}
	}
	for name, want := range map[string]string{"a": `{"served_by":1}`, "b": `{"served_by":2}`, "c": `{"served_by":3}`} {
		if d, _ := s.detail("ver/" + name); string(d.Status) != want {
			t.Errorf("%s status = %s, want %s", name, d.Status, want)
		}
	}
	s.checkInvariants()
}

// TestResyncRecomposes: a composer's resync applies its children only when
// the kind's resync_recomposes says so, and both settings are live.
func TestResyncRecomposes(t *testing.T) {
	t.Parallel()
	s, provs := startStacks(t, &teardownLog{})
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "stack", "kind_version": 1, "name": "r"}); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	s.waitReady("stack/r")
	provs["stack"].extra.Store(true)
	if code, body := s.call("PUT", "/kinds/stack/versions/1/config", map[string]any{"resync_interval_secs": 1}); code != 200 {
		t.Fatalf("enable resync = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "two resyncs of the stack", func() bool { return provs["stack"].resyncs.Load() >= 2 })
	if _, ok := s.detail("note/r-extra"); ok {
		t.Fatal("a resync without resync_recomposes applied the composer's children")
	}
	if d, _ := s.detail("stack/r"); d.Generation != 1 || d.PhaseOf() != model.PhaseReady {
		t.Errorf("stack/r after resyncs: generation %d, %s", d.Generation, d.Phase)
	}
	if code, body := s.call("PUT", "/kinds/stack/versions/1/config", map[string]any{"resync_interval_secs": 1, "resync_recomposes": true}); code != 200 {
		t.Fatalf("enable recompose = %d %s", code, body)
	}
	s.waitReady("note/r-extra")
	s.checkInvariants()
}
