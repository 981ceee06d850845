package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/webhooksdk"
)

// seen records the resources a provider was sent, by name.
type seen struct {
	mu    sync.Mutex
	names []string
}

func (s *seen) provider(kind string) *provider {
	return newProvider(kind, func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		s.mu.Lock()
		s.names = append(s.names, req.Resource.Name)
		s.mu.Unlock()
		return echo(ctx, req)
	})
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.names)
	slices.Sort(out)
	return out
}

// TestNamespacedEndpointRouting: two real providers over HTTP, one the
// default namespace's endpoint, one team-a's. team-a's resources reach
// team-a's endpoint only; team-b, which has no endpoint of its own, and the
// default namespace reach the default namespace's. While team-a's endpoint
// is disabled its resources wait for it: it still serves the kind, so they
// are never sent to the default namespace's endpoint.
func TestNamespacedEndpointRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	e.exec(`INSERT INTO namespaces (name) VALUES ('team-a'), ('team-b')`)
	var common, teamA seen
	e.sdk(e.endpoint("common", endpointOpts{kinds: []string{"leaf"}}), nil, common.provider("leaf"))
	e.sdk(e.endpoint("team-a-leaves", endpointOpts{kinds: []string{"leaf"}}), nil, teamA.provider("leaf"))
	e.exec(`UPDATE endpoints SET namespace = 'team-a' WHERE name = 'team-a-leaves'`)
	d := e.dispatcher(dispatch.Config{})
	e.listen()

	applyIn := func(ns, name string) {
		t.Helper()
		var id string
		must(t, e.db.Pool.QueryRow(e.ctx, `INSERT INTO resources (namespace, kind, kind_version, name, spec)
			VALUES ($1, 'leaf', 1, $2, '{}') RETURNING id`, ns, name).Scan(&id))
		e.exec(`SELECT schedule_eligible(ARRAY[$1::uuid])`, id)
	}
	var wantA, wantCommon []string
	for i := range 5 {
		for _, ns := range []string{"team-a", "team-b", "default"} {
			name := fmt.Sprintf("%s-%d", ns, i)
			applyIn(ns, name)
			if ns == "team-a" {
				wantA = append(wantA, name)
			} else {
				wantCommon = append(wantCommon, name)
			}
		}
	}
	e.waitReady("leaf", 15, 30*time.Second)
	// Each attempt is logged in its resource's namespace.
	waitFor(t, 10*time.Second, "the 15 attempts to be logged", func() bool {
		return e.count(`SELECT count(*) FROM endpoint_deliveries`) == 15
	})
	if n := e.count(`SELECT count(*) FROM endpoint_deliveries d JOIN resources r ON r.id = d.resource_id
		WHERE d.namespace <> r.namespace`); n != 0 {
		t.Errorf("%d attempts logged in another namespace than their resource's", n)
	}
	slices.Sort(wantA)
	slices.Sort(wantCommon)
	if got := teamA.list(); !slices.Equal(got, wantA) {
		t.Errorf("team-a's endpoint was sent %v; want team-a's resources %v", got, wantA)
	}
	if got := common.list(); !slices.Equal(got, wantCommon) {
		t.Errorf("the default namespace's endpoint was sent %v; want team-b's and default's %v", got, wantCommon)
	}

	must(t, e.st.DisableEndpoint(e.ctx, "team-a-leaves", "the test disabled it"))
	waitFor(t, 10*time.Second, "team-a's endpoint to be disabled on the dispatcher", func() bool {
		pairs, own, _, _ := d.Registry().Claimable(nil)
		return !slices.Contains(pairs, "team-a:leaf/1") && slices.Contains(own, "team-a:leaf/1")
	})
	applyIn("team-a", "team-a-late")
	applyIn("team-b", "team-b-late")
	e.waitPhase("leaf", "team-b-late", "Ready", 30*time.Second)
	if slices.Contains(common.list(), "team-a-late") {
		t.Errorf("team-a's resource went to the default namespace's endpoint while team-a's own was disabled")
	}
	if n := e.count(`SELECT count(*) FROM resources WHERE name = 'team-a-late' AND phase = 'Ready'`); n != 0 {
		t.Errorf("team-a's resource became Ready while its namespace's only endpoint was disabled")
	}
	// Not even claimed: a claim for the default namespace's endpoints
	// leaves it alone.
	if n := e.count(`SELECT count(*) FROM work_queue w JOIN resources r ON r.id = w.resource_id
		WHERE r.name = 'team-a-late' AND w.state = 'pending' AND w.claim_epoch = 0`); n != 1 {
		t.Errorf("team-a's resource was claimed while its namespace's only endpoint was disabled")
	}
	e.checkNoDoubleApply()
}

// TestNamespaceMaxInFlightAcrossEndpoints: a namespace's max_in_flight
// holds across every endpoint serving it, and each outcome gives its token
// back: all of the namespace's resources converge, never more than the
// quota at once.
func TestNamespaceMaxInFlightAcrossEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	e.exec(`INSERT INTO namespaces (name, max_in_flight) VALUES ('team-a', 3)`)
	common := &recorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		t := time.NewTimer(15 * time.Millisecond)
		defer t.Stop()
		<-t.C
		_, _ = w.Write(resultBody(env, `{}`))
	})}
	for _, n := range []string{"one", "two"} {
		s := e.endpoint(n, endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 10})
		s.set(common)
	}
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.exec(`WITH r AS (INSERT INTO resources (namespace, kind, kind_version, name, spec)
		SELECT 'team-a', 'leaf', 1, 'leaf-' || i, '{}' FROM generate_series(1, 60) i RETURNING id)
		SELECT schedule_eligible(array_agg(id)) FROM r`)
	e.waitReady("leaf", 60, 30*time.Second)
	if p := common.peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak concurrency across both endpoints %d, want at most team-a's max_in_flight (3)", p)
	}
	if n := e.count(`SELECT coalesce(sum(in_flight), 0) FROM namespace_inflight`); n != 0 {
		t.Errorf("%d tokens still out once every task finished", n)
	}
}
