package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// bigProvider serves the lifecycle benchmark's kinds over HTTP: "big"
// composes n children of kind "item"; every kind's teardown is a no-op,
// and "sink" is a no-op reactor counting its deliveries.
type bigProvider struct {
	kind   string
	n      int
	calls  atomic.Int64
	paused atomic.Bool // reports not ready: its tasks wait
}

func (p *bigProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *bigProvider) Ready() bool { return !p.paused.Load() }
func (p *bigProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.calls.Add(1)
	if p.kind == "big" && req.Trigger == webhooksdk.TriggerSpecChange {
		kids := make([]webhooksdk.Child, p.n)
		for i := range kids {
			kids[i] = webhooksdk.Child{Kind: "item", KindVersion: 1, Name: fmt.Sprintf("%s-%d", req.Resource.Name, i)}
		}
		return webhooksdk.Outcome{Status: json.RawMessage(`{}`), Children: kids}, nil
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
}

// BenchmarkLifecycle measures, through the HTTP dispatcher, the teardown
// of an n-child composite whose kinds all have finalizers against its
// creation (each child then takes a delete request), and the delivery of
// n reactions (a binding on the children's 'created' edge, queued while the
// reactor reported not ready) to a no-op reactor endpoint.
//
//	go test -run '^$' -bench BenchmarkLifecycle -benchtime 1x ./integration/
func BenchmarkLifecycle(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 1_000
	}
	for range b.N {
		s := startAll(b)
		const fin = `{"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"bench.io/teardown"}`
		for kind, reactions := range map[string]string{
			"big":  `[{"name":"compose","trigger":"specChange","emits":["children","status"]},` + fin + `]`,
			"item": `[{"name":"work","trigger":"specChange","emits":["status"]},` + fin + `]`,
			"sink": `[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]`,
		} {
			if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
				"reactions": json.RawMessage(reactions)}); code != 201 {
				b.Fatalf("manifest %s = %d %s", kind, code, body)
			}
		}
		big, item, sink := &bigProvider{kind: "big", n: n}, &bigProvider{kind: "item"}, &bigProvider{kind: "sink"}
		s.serveProvider("bench", big, item, sink)

		create := func(name string) time.Duration {
			start := time.Now()
			if code, body := s.call("POST", "/resources", map[string]any{"kind": "big", "kind_version": 1, "name": name}); code != 201 {
				b.Fatalf("apply %s = %d %s", name, code, body)
			}
			waitFor(b, 10*time.Minute, name+" Ready", func() bool {
				return s.count(`SELECT count(*) FROM resources WHERE phase = 'Ready' AND (name = $1 OR name LIKE $1 || '-%')`, name) == n+1
			})
			return time.Since(start)
		}
		created := create("c1")
		start := time.Now()
		if code, body := s.call("DELETE", "/resources/big/c1", nil); code != 202 {
			b.Fatalf("delete = %d %s", code, body)
		}
		waitFor(b, 10*time.Minute, "c1 torn down", func() bool { return s.count(`SELECT count(*) FROM resources`) == 0 })
		torn := time.Since(start)
		if got := item.calls.Load(); got != int64(2*n) {
			b.Errorf("item calls = %d, want %d (one reconcile and one teardown each)", got, 2*n)
		}

		// n 'created' edges of the children, queued while the reactor is
		// paused, then delivered to it.
		if code, body := s.call("POST", "/reactor-bindings", map[string]any{"name": "items-created", "watch_kind": "item",
			"transition": "created", "reactor": "sink"}); code != 201 {
			b.Fatalf("binding = %d %s", code, body)
		}
		sink.paused.Store(true)
		create("c2")
		if got := s.count(`SELECT count(*) FROM lifecycle_outbox`); got != n {
			b.Fatalf("%d reactions queued, want %d", got, n)
		}
		start = time.Now()
		sink.paused.Store(false)
		waitFor(b, 10*time.Minute, "every reaction delivered", func() bool {
			return s.count(`SELECT count(*) FROM lifecycle_outbox`) == 0
		})
		reacted := time.Since(start)
		if got := sink.calls.Load(); got < int64(n) {
			b.Errorf("the reactor received %d deliveries, want at least %d", got, n)
		}
		b.ReportMetric(created.Seconds(), "create_s")
		b.ReportMetric(torn.Seconds(), "teardown_s")
		b.ReportMetric(torn.Seconds()/created.Seconds(), "teardown/create")
		b.ReportMetric(float64(n)/reacted.Seconds(), "reactions/s")
		fmt.Printf("lifecycle: n=%d  create %.2fs  teardown %.2fs (%.2fx create)  %d reactions delivered in %.2fs (%.0f/s, including the probe that sees the reactor ready)\n",
			n, created.Seconds(), torn.Seconds(), torn.Seconds()/created.Seconds(), sink.calls.Load(), reacted.Seconds(), float64(n)/reacted.Seconds())
	}
}
