package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkClassicDemo converges the classic demo's large BOM with the real
// classic-provider process on loopback (no simulated work, no faults), then
// the same number of independent no-op leaves served over HTTP by webhooksdk
// through the same server and dispatcher, and reports both rates and their
// ratio (issue #15: goal ≥ 0.5, moonshot 0.8) with p50/p99 time to Ready.
//
// The statussink binding is left out: it is a reactor on the root, not one
// of the resources counted, and it would need an S3 store.
//
// Times come from the database, so polling adds no error: a resource's time
// to Ready is its first `succeeded` event at the generation it is Ready at
// (logged by the drain in the transaction that makes it Ready; `at` is that
// transaction's now()) minus the apply's created_at. last_claimed_at and
// updated_at are not it: the former is when the task was claimed, and the
// latter moves on every later write. A rate is n over the last resource's
// time to Ready.
//
//	make bench-demo
func BenchmarkClassicDemo(b *testing.B) {
	for range b.N {
		s := startAll(b)
		bin := buildClassicProvider(b)
		o := classicObjectsOf(b, bin, "large")
		o.Bindings = nil
		s.startClassicProvider(bin, o.Manifests, "FAKE_WORK_DELAY=0", "FAKE_FAULT_RATE=0")
		s.applyClassic(o, "")
		if code, body := s.call("PUT", "/kinds/leaf/manifest", map[string]any{"kind": "leaf", "kind_version": 1,
			"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
			b.Fatalf("leaf manifest = %d %s", code, body)
		}
		s.serveProvider("leaves", &bigProvider{kind: "leaf"})
		// A task for a kind whose endpoint has not passed its first probe
		// parks: neither clock may start before both endpoints are ready.
		s.waitEndpointReady("classic")
		s.waitEndpointReady("leaves")

		bom := o.Resources[0]
		n := len(bomChildren(bom))
		s.applyResource(bom)
		s.waitAllReady(`kind <> 'leaf'`, n+1)
		bomT := s.readyTimes(`kind NOT IN ('classicbom', 'leaf')`, `SELECT created_at FROM resources WHERE kind = 'classicbom'`, n)

		// The leaves are created and scheduled in one transaction, as the
		// composer creates the BOM's children in one drain: the API's cost per
		// apply (one request per resource) is in neither figure.
		ctx := b.Context()
		tx, err := s.db.Pool.Begin(ctx)
		must(b, err)
		_, err = tx.Exec(ctx, `INSERT INTO resources (kind, kind_version, name, spec)
			SELECT 'leaf', 1, 'leaf-' || i, '{}' FROM generate_series(1, $1::int) i`, n)
		must(b, err)
		_, err = tx.Exec(ctx, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE kind = 'leaf'`)
		must(b, err)
		must(b, tx.Commit(ctx))
		s.waitAllReady(`kind = 'leaf'`, n)
		leafT := s.readyTimes(`kind = 'leaf'`, `SELECT min(created_at) FROM resources WHERE kind = 'leaf'`, n)

		bomRate, leafRate := float64(n)/bomT.last.Seconds(), float64(n)/leafT.last.Seconds()
		b.ReportMetric(bomRate, "bom_resources/s")
		b.ReportMetric(leafRate, "leaves/s")
		b.ReportMetric(bomRate/leafRate, "bom/leaves")
		fmt.Printf("classic demo, large BOM: %d resources in %.2fs, %.0f resources/s, time to Ready p50 %.2fs p99 %.2fs\n",
			n, bomT.last.Seconds(), bomRate, bomT.p50.Seconds(), bomT.p99.Seconds())
		fmt.Printf("no-op leaves:            %d leaves    in %.2fs, %.0f leaves/s,    time to Ready p50 %.2fs p99 %.2fs\n",
			n, leafT.last.Seconds(), leafRate, leafT.p50.Seconds(), leafT.p99.Seconds())
		fmt.Printf("ratio (BOM resources/s ÷ leaves/s): %.2f (goal ≥ 0.5, moonshot 0.8)\n", bomRate/leafRate)
	}
}

// waitEndpointReady waits until the dispatcher takes every kind of endpoint
// name.
func (s *server) waitEndpointReady(name string) {
	s.t.Helper()
	waitFor(s.t, 30*time.Second, name+" ready", func() bool {
		_, body := s.call("GET", "/endpoints/"+name, nil)
		var ep struct {
			Live struct {
				Kinds []struct{ Ready bool } `json:"kinds"`
			} `json:"live"`
		}
		if json.Unmarshal(body, &ep) != nil || len(ep.Live.Kinds) == 0 {
			return false
		}
		for _, k := range ep.Live.Kinds {
			if !k.Ready {
				return false
			}
		}
		return true
	})
}

// waitAllReady waits until n resources matching where are Ready, polling
// coarsely: the probe would otherwise take CPU from the server it measures.
func (s *server) waitAllReady(where string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	for s.count(`SELECT count(*) FROM resources WHERE phase = 'Ready' AND `+where) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: fewer than %d Ready after 20 minutes", where, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readyStats are times to Ready: the median, the 99th percentile and the
// last.
type readyStats struct{ p50, p99, last time.Duration }

// readyTimes measures the times to Ready of the n resources matching where
// from t0, a query for the apply's timestamp.
func (s *server) readyTimes(where, t0 string, n int) readyStats {
	s.t.Helper()
	var got int
	var p50, p99, last float64
	must(s.t, s.db.Pool.QueryRow(context.WithoutCancel(s.t.Context()), `
		WITH d AS (
			SELECT extract(epoch FROM (SELECT min(e.at) FROM resource_events e
			        WHERE e.resource_id = r.id AND e.type = 'succeeded' AND e.generation = r.generation) - (`+t0+`)) AS s
			  FROM resources r WHERE r.phase = 'Ready' AND `+where+`)
		SELECT count(s), percentile_disc(0.5) WITHIN GROUP (ORDER BY s), percentile_disc(0.99) WITHIN GROUP (ORDER BY s), max(s) FROM d`).
		Scan(&got, &p50, &p99, &last))
	if got != n {
		s.t.Fatalf("%s: %d resources with a Ready time, want %d", where, got, n)
	}
	sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	return readyStats{sec(p50), sec(p99), sec(last)}
}
