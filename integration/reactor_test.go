package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// bomProvider is a composite root: it composes spec.parts "part" children
// and rolls up how many of them are Ready.
type bomProvider struct{}

func (bomProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "bom", Version: 1}
}
func (bomProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if req.Trigger == webhooksdk.TriggerChildrenSettled {
		ready := 0
		for _, d := range req.Descendants {
			if d.Phase == "Ready" {
				ready++
			}
		}
		return webhooksdk.Outcome{Status: json.RawMessage(fmt.Sprintf(`{"ready_parts":%d}`, ready))}, nil
	}
	var spec struct{ Parts int }
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	var kids []webhooksdk.Child
	for i := range spec.Parts {
		kids = append(kids, webhooksdk.Child{Kind: "part", KindVersion: 1,
			Name: fmt.Sprintf("%s-p%d", req.Resource.Name, i), Spec: json.RawMessage(`{}`)})
	}
	return webhooksdk.Outcome{Children: kids}, nil
}

// partProvider is a leaf; a spec with "fail": true fails terminally.
type partProvider struct{}

func (partProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "part", Version: 1}
}
func (partProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec struct{ Fail bool }
	_ = json.Unmarshal(req.Resource.Spec, &spec)
	if spec.Fail {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("asked to fail"))
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
}

// sinkProvider is a reactor that records every delivery. While failing is
// set it fails them; while hang is set it blocks until release is closed.
type sinkProvider struct {
	failing, hang atomic.Bool
	running       atomic.Int32
	release       chan struct{}
	mu            sync.Mutex
	deliveries    []webhooksdk.Request
	done          map[string]webhooksdk.Request // succeeded, by dedup token
}

func (p *sinkProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "sink", Version: 1}
}
func (p *sinkProvider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.running.Add(1)
	defer p.running.Add(-1)
	p.mu.Lock()
	p.deliveries = append(p.deliveries, req)
	p.mu.Unlock()
	if p.hang.Load() {
		select {
		case <-p.release:
		case <-ctx.Done():
		}
		return webhooksdk.Outcome{}, errors.New("stalled")
	}
	if p.failing.Load() {
		return webhooksdk.Outcome{}, errors.New("sink unavailable")
	}
	p.mu.Lock()
	p.done[req.DedupToken] = req
	p.mu.Unlock()
	return webhooksdk.Outcome{SideEffectDone: true}, nil
}

// seen returns the number of deliveries and the distinct dedup tokens.
func (p *sinkProvider) seen() (int, map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tokens := map[string]bool{}
	for _, d := range p.deliveries {
		tokens[d.DedupToken] = true
	}
	return len(p.deliveries), tokens
}

func (p *sinkProvider) succeeded(token string) (webhooksdk.Request, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.done[token]
	return r, ok
}

// startReactors starts the product with the bom, part and sink kinds
// published and served over HTTP.
func startReactors(t *testing.T) (*server, *sinkProvider) {
	t.Helper()
	s := startAll(t)
	for _, m := range []map[string]any{
		{"kind": "bom", "kind_version": 1, "reactions": json.RawMessage(`[
			{"name":"compose","trigger":"specChange","emits":["children","status"]},
			{"name":"rollup","trigger":"childrenSettled","emits":["status"]}]`)},
		{"kind": "part", "kind_version": 1, "reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)},
		{"kind": "sink", "kind_version": 1, "reactions": json.RawMessage(`[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]`)},
	} {
		if code, body := s.call("PUT", fmt.Sprintf("/kinds/%s/manifest", m["kind"]), m); code != 201 {
			t.Fatalf("manifest %s = %d %s", m["kind"], code, body)
		}
	}
	sink := &sinkProvider{done: map[string]webhooksdk.Request{}, release: make(chan struct{})}
	s.serveProvider("work", bomProvider{}, partProvider{})
	s.serveProvider("sink", sink)
	return s, sink
}

func (s *server) bind(b map[string]any) {
	s.t.Helper()
	if code, body := s.call("POST", "/reactor-bindings", b); code != 201 {
		s.t.Fatalf("binding %s = %d %s", b["name"], code, body)
	}
}

func (s *server) apply(kind, name string, labels map[string]string, spec any) string {
	s.t.Helper()
	code, body := s.call("POST", "/resources", map[string]any{"kind": kind, "kind_version": 1, "name": name, "labels": labels, "spec": spec})
	var r struct{ ID string }
	if (code != 201 && code != 200) || json.Unmarshal(body, &r) != nil {
		s.t.Fatalf("apply %s/%s = %d %s", kind, name, code, body)
	}
	return r.ID
}

// TestReactorBindingsFire: a binding on a composite root's synced edge
// fires once per generation with the rolled-up status, through failures
// (redelivered under the same dedup token) until the reactor succeeds and
// the delivery is acked; label_match filters, a disabled binding never
// fires, and a hard delete fires 'deleted' with the resource's snapshot.
func TestReactorBindingsFire(t *testing.T) {
	t.Parallel()
	s, sink := startReactors(t)
	s.bind(map[string]any{"name": "bom-synced", "watch_kind": "bom", "transition": "synced", "reactor": "sink"})
	s.bind(map[string]any{"name": "bom-synced-off", "watch_kind": "bom", "transition": "synced", "reactor": "sink", "enabled": false})
	s.bind(map[string]any{"name": "blue-created", "watch_kind": "bom", "transition": "created", "reactor": "sink",
		"label_match": map[string]string{"team": "blue"}})
	s.bind(map[string]any{"name": "bom-deleted", "watch_kind": "bom", "transition": "deleted", "reactor": "sink"})

	// The sink fails until the detail shows the delivery retried.
	sink.failing.Store(true)
	red := s.apply("bom", "red", map[string]string{"team": "red"}, map[string]any{"parts": 2})
	blue := s.apply("bom", "blue", map[string]string{"team": "blue"}, map[string]any{"parts": 1})
	var detail struct {
		Status           json.RawMessage `json:"status"`
		PendingReactions []struct {
			Binding    string `json:"binding"`
			Transition string `json:"transition"`
			LastError  string `json:"last_error"`
			Generation int64  `json:"generation"`
			Attempts   int    `json:"attempts"`
		} `json:"pending_reactions"`
	}
	waitFor(t, 30*time.Second, "red's synced delivery retried twice", func() bool {
		_, body := s.call("GET", "/resources/bom/red", nil)
		if json.Unmarshal(body, &detail) != nil || len(detail.PendingReactions) != 1 {
			return false
		}
		p := detail.PendingReactions[0]
		return p.Attempts >= 2 && p.LastError != ""
	})
	sink.failing.Store(false)

	tok := func(id, transition string, gen int, binding string) string {
		return fmt.Sprintf("%s:%s:%d:%s", id, transition, gen, binding)
	}
	redSynced1 := tok(red, "synced", 1, "bom-synced")
	want := []string{redSynced1, tok(blue, "synced", 1, "bom-synced"), tok(blue, "created", 1, "blue-created")}
	waitAcked := func(tokens []string) {
		t.Helper()
		waitFor(t, 30*time.Second, "every delivery acked", func() bool {
			for _, k := range tokens {
				if _, ok := sink.succeeded(k); !ok {
					return false
				}
			}
			return s.count(`SELECT count(*) FROM lifecycle_outbox`) == 0
		})
	}
	waitAcked(want)
	req, _ := sink.succeeded(redSynced1)
	if req.TaskType != webhooksdk.TaskReact || req.Trigger != webhooksdk.TriggerReactor || req.Reaction != "react" ||
		req.Transition != webhooksdk.TransitionSynced || req.KindVersion != 1 {
		t.Errorf("react request = %+v", req)
	}
	if req.Resource.ID != red || req.Resource.Phase != "Ready" || string(req.Resource.Status) != `{"ready_parts":2}` {
		t.Errorf("react resource = %+v, want red Ready with the rolled-up status", req.Resource)
	}

	// A new generation fires again.
	s.apply("bom", "red", map[string]string{"team": "red"}, map[string]any{"parts": 3})
	want = append(want, tok(red, "synced", 2, "bom-synced"))
	waitAcked(want)
	if req, _ := sink.succeeded(want[3]); string(req.Resource.Status) != `{"ready_parts":3}` {
		t.Errorf("generation 2's status = %s", req.Resource.Status)
	}

	// Removing the row fires 'deleted' from the snapshot: the API's DELETE
	// marks blue, and the teardown removes its part and then blue.
	if code, body := s.call("DELETE", "/resources/bom/blue", nil); code != 202 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	want = append(want, tok(blue, "deleted", 1, "bom-deleted"))
	waitAcked(want)
	if req, _ := sink.succeeded(want[4]); req.Resource.Name != "blue" ||
		string(req.Resource.Status) != `{"ready_parts":1}` || req.Resource.Labels["team"] != "blue" {
		t.Errorf("deleted resource = %+v, want blue's snapshot", req.Resource)
	}

	// Exactly the transitions were delivered, each under one token; the
	// failures were redeliveries of the same token.
	n, tokens := sink.seen()
	if len(tokens) != len(want) {
		t.Errorf("distinct dedup tokens = %v, want %v", tokens, want)
	}
	if n <= len(want) {
		t.Errorf("deliveries = %d, want more than %d (the failures were redelivered)", n, len(want))
	}
	s.checkInvariants()
}

// TestReactorLeaseLapse: a delivery whose claim lapses (the dispatcher
// stopped heartbeating it) is re-claimed and delivered again under the same
// dedup token; once it succeeds it is acked.
func TestReactorLeaseLapse(t *testing.T) {
	t.Parallel()
	s, sink := startReactors(t)
	s.bind(map[string]any{"name": "part-created", "watch_kind": "part", "transition": "created", "reactor": "sink"})
	sink.hang.Store(true)
	id := s.apply("part", "p", nil, map[string]any{})
	waitFor(t, 30*time.Second, "the first delivery", func() bool { n, _ := sink.seen(); return n == 1 })
	// The lease lapses, as if the dispatcher holding it had died.
	sink.hang.Store(false)
	_, err := s.db.Pool.Exec(t.Context(), `UPDATE lifecycle_outbox SET lease_until = now() - interval '1 second'`)
	must(t, err)
	token := fmt.Sprintf("%s:created:1:part-created", id)
	waitFor(t, 30*time.Second, "the redelivery acked", func() bool {
		_, ok := sink.succeeded(token)
		return ok && s.count(`SELECT count(*) FROM lifecycle_outbox`) == 0
	})
	n, tokens := sink.seen()
	if n < 2 || len(tokens) != 1 || !tokens[token] {
		t.Errorf("deliveries = %d with tokens %v, want >= 2 of %s", n, tokens, token)
	}
	// The stalled first run ends; its late result finds nothing to apply.
	close(sink.release)
	waitFor(t, 30*time.Second, "the stalled run to end", func() bool { return sink.running.Load() == 0 })
	s.checkInvariants()
}

// TestReactorNoBinding: with no binding, resources created, composed,
// synced, failed and deleted write no lifecycle_outbox row.
func TestReactorNoBinding(t *testing.T) {
	t.Parallel()
	s, sink := startReactors(t)
	s.apply("bom", "quiet", nil, map[string]any{"parts": 2})
	s.apply("part", "bad", nil, map[string]any{"fail": true})
	waitFor(t, 30*time.Second, "quiet Ready and bad Failed", func() bool {
		return s.count(`SELECT count(*) FROM resources WHERE phase = 'Ready'`) == 3 &&
			s.count(`SELECT count(*) FROM resources WHERE name = 'bad' AND phase = 'Failed'`) == 1
	})
	// The teardown removes the parts and then the root.
	if code, body := s.call("DELETE", "/resources/bom/quiet", nil); code != 202 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "quiet and its parts removed", func() bool {
		return s.count(`SELECT count(*) FROM resources WHERE name LIKE 'quiet%'`) == 0
	})
	if n := s.count(`SELECT count(*) FROM lifecycle_outbox`); n != 0 {
		t.Errorf("lifecycle_outbox rows = %d, want 0", n)
	}
	if n, _ := sink.seen(); n != 0 {
		t.Errorf("the sink got %d deliveries", n)
	}
	s.checkInvariants()
}
