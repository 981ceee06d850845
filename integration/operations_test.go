package integration

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// opsProvider serves kind opsk: a specChange reaction echoing the spec, and
// three verbs. snapshot and hold wait for a release each (so a test can see
// an op running and keep the next one pending); explode fails terminally.
type opsProvider struct {
	release chan struct{}
	mu      sync.Mutex
	ran     []string // the op ids delivered, in order
}

func (p *opsProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "opsk", Version: 1}
}
func (p *opsProvider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if req.TaskType != webhooksdk.TaskOperate {
		return webhooksdk.Outcome{Status: json.RawMessage(`{"echoed":` + string(req.Resource.Spec) + `}`)}, nil
	}
	p.mu.Lock()
	p.ran = append(p.ran, req.TaskID)
	p.mu.Unlock()
	switch req.Operation.Verb {
	case "explode":
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("kaboom"))
	default:
		select {
		case <-p.release:
		case <-ctx.Done():
			return webhooksdk.Outcome{}, ctx.Err()
		}
		out, _ := json.Marshal(map[string]any{"verb": req.Operation.Verb, "input": req.Operation.Input, "reaction": req.Reaction})
		return webhooksdk.Outcome{OperationOutput: out}, nil
	}
}

func (p *opsProvider) delivered(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.ran, id)
}

type opView struct {
	ID       string          `json:"id"`
	Verb     string          `json:"verb"`
	Input    json.RawMessage `json:"input"`
	State    string          `json:"state"`
	Output   json.RawMessage `json:"operation_output"`
	Error    string          `json:"error"`
	Attempts int             `json:"attempts"`
}

type problemView struct {
	Status int `json:"status"`
	Errors []struct {
		Location string `json:"location"`
	} `json:"errors"`
}

// names reports whether a problem answer has status code and names loc.
func names(code int, body []byte, want int, loc string) bool {
	var p problemView
	if code != want || json.Unmarshal(body, &p) != nil || p.Status != want {
		return false
	}
	for _, e := range p.Errors {
		if e.Location == loc {
			return true
		}
	}
	return loc == ""
}

const opsManifest = `[
	{"name":"work","trigger":"specChange","emits":["status"]},
	{"name":"snap","trigger":"operation","verb":"snapshot","emits":["operationOutput"],
	 "input_schema":{"type":"object","properties":{"label":{"type":"string"}}}},
	{"name":"hold","trigger":"operation","verb":"hold","emits":["operationOutput"]},
	{"name":"boom","trigger":"operation","verb":"explode","emits":["operationOutput"]}]`

// TestOperations invokes verbs on a resource through the API and real
// webhook deliveries: an op goes pending → running → succeeded with its
// output, a failing verb fails its op while the resource stays Ready, a
// pending op is cancelled and never delivered, and bad requests are refused
// without writing anything.
func TestOperations(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/opsk/manifest", map[string]any{"kind": "opsk", "kind_version": 1,
		"reactions": json.RawMessage(opsManifest)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &opsProvider{release: make(chan struct{})}
	s.serveProvider("opsk", p)
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "opsk", "kind_version": 1, "name": "r1", "spec": map[string]any{"n": 1}}); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	s.waitPhase("opsk", "r1", string(model.PhaseReady), 30*time.Second)

	invoke := func(verb string, input any) opView {
		t.Helper()
		code, body := s.call("POST", "/resources/opsk/r1/ops", map[string]any{"verb": verb, "input": input})
		var op opView
		if code != 202 || json.Unmarshal(body, &op) != nil || op.ID == "" || op.State != "pending" {
			t.Fatalf("invoke %s = %d %s", verb, code, body)
		}
		return op
	}
	get := func(id string) opView {
		t.Helper()
		code, body := s.call("GET", "/resources/opsk/r1/ops/"+id, nil)
		var op opView
		if code != 200 || json.Unmarshal(body, &op) != nil {
			t.Fatalf("get op = %d %s", code, body)
		}
		return op
	}
	waitState := func(id, state string) opView {
		t.Helper()
		var op opView
		waitFor(t, 30*time.Second, "op "+id+" "+state, func() bool { op = get(id); return op.State == state })
		return op
	}

	// pending → running → succeeded, with the provider's output.
	snap := invoke("snapshot", map[string]any{"label": "a"})
	waitState(snap.ID, "running")
	p.release <- struct{}{}
	done := waitState(snap.ID, "succeeded")
	var out struct {
		Verb     string `json:"verb"`
		Reaction string `json:"reaction"`
		Input    struct{ Label string }
	}
	if json.Unmarshal(done.Output, &out) != nil || out.Verb != "snapshot" || out.Reaction != "snap" || out.Input.Label != "a" || done.Attempts != 1 {
		t.Errorf("succeeded op = %+v (output %s)", done, done.Output)
	}

	// A failing verb fails its op, not the resource.
	boom := invoke("explode", nil)
	failed := waitState(boom.ID, "failed")
	if !strings.Contains(failed.Error, "kaboom") {
		t.Errorf("failed op error = %q", failed.Error)
	}
	if r := s.waitPhase("opsk", "r1", string(model.PhaseReady), 5*time.Second); r.SyncedGen != r.Generation {
		t.Errorf("resource after a failed op = %+v", r)
	}
	var res struct {
		Phase     string `json:"phase"`
		LastError string `json:"last_error"`
	}
	if _, body := s.call("GET", "/resources/opsk/r1", nil); json.Unmarshal(body, &res) != nil || res.Phase != "Ready" || res.LastError != "" {
		t.Errorf("resource after a failed op = %s", body)
	}

	// One op at a time: the second waits pending and is cancelled.
	hold := invoke("hold", nil)
	waitState(hold.ID, "running")
	next := invoke("snapshot", map[string]any{"label": "b"})
	if code, body := s.call("DELETE", "/resources/opsk/r1/ops/"+hold.ID, nil); !names(code, body, 409, "") {
		t.Errorf("cancel a running op = %d %s", code, body)
	}
	code, body := s.call("DELETE", "/resources/opsk/r1/ops/"+next.ID, nil)
	var cancelled opView
	if code != 200 || json.Unmarshal(body, &cancelled) != nil || cancelled.State != "cancelled" {
		t.Fatalf("cancel a pending op = %d %s", code, body)
	}
	if code, body := s.call("DELETE", "/resources/opsk/r1/ops/"+next.ID, nil); !names(code, body, 409, "") {
		t.Errorf("cancel a cancelled op = %d %s", code, body)
	}
	p.release <- struct{}{}
	waitState(hold.ID, "succeeded")
	last := invoke("snapshot", map[string]any{"label": "c"})
	waitState(last.ID, "running")
	p.release <- struct{}{}
	waitState(last.ID, "succeeded")
	if p.delivered(next.ID) {
		t.Error("the cancelled op was delivered")
	}
	if get(next.ID).State != "cancelled" {
		t.Error("the cancelled op changed state")
	}

	// Newest first.
	var list struct{ Items []opView }
	if code, body := s.call("GET", "/resources/opsk/r1/ops", nil); code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list = %d %s", code, body)
	}
	var ids []string
	for _, op := range list.Items {
		ids = append(ids, op.ID)
	}
	if want := []string{last.ID, next.ID, hold.ID, boom.ID, snap.ID}; !slices.Equal(ids, want) {
		t.Errorf("list = %v, want %v", ids, want)
	}

	// Bad requests change nothing.
	before := s.count(`SELECT count(*) FROM resource_operations`)
	for _, c := range []struct {
		body any
		code int
		loc  string
	}{
		{map[string]any{"verb": "nope"}, 404, "body.verb"},
		{map[string]any{"input": map[string]any{}}, 422, "body.verb"},
		{map[string]any{"verb": "snapshot", "input": map[string]any{"label": 5}}, 422, "body.input.label"},
		{map[string]any{"verb": "snapshot", "input": []int{1}}, 422, "body.input"},
		{map[string]any{"verb": "snapshot", "extra": 1}, 400, "body"},
	} {
		if code, body := s.call("POST", "/resources/opsk/r1/ops", c.body); !names(code, body, c.code, c.loc) {
			t.Errorf("POST ops %v = %d %s; want %d naming %s", c.body, code, body, c.code, c.loc)
		}
	}
	if code, body := s.call("POST", "/resources/opsk/none/ops", map[string]any{"verb": "snapshot"}); code != 404 {
		t.Errorf("op on a missing resource = %d %s", code, body)
	}
	if code, body := s.call("GET", "/resources/opsk/r1/ops/not-a-uuid", nil); code != 404 {
		t.Errorf("get a malformed op id = %d %s", code, body)
	}
	if after := s.count(`SELECT count(*) FROM resource_operations`); after != before {
		t.Errorf("bad requests wrote %d ops", after-before)
	}
	s.checkInvariants()
}

// TestSpecHistory records a root resource's specs, bounds them, rolls back
// to an earlier one, records nothing for a composed child, and refuses bad
// rollbacks.
func TestSpecHistory(t *testing.T) {
	t.Parallel()
	s := startAllWith(t, func(c *convergecli.Config) { c.SpecHistoryLimit = 4 })
	for kind, reactions := range map[string]string{
		"echo":  `[{"name":"work","trigger":"specChange","emits":["status"]}]`,
		"hcomp": `[{"name":"compose","trigger":"specChange","emits":["children","status"]}]`,
	} {
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
			"reactions": json.RawMessage(reactions)}); code != 201 {
			t.Fatalf("manifest %s = %d %s", kind, code, body)
		}
	}
	p := &echoProvider{}
	p.ready.Store(true)
	s.serveProvider("hist", p, composerProvider{})

	apply := func(n int) {
		t.Helper()
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "echo", "kind_version": 1, "name": "h1",
			"labels": map[string]string{"n": string(rune('0' + n))}, "spec": map[string]any{"n": n}}); code != 200 && code != 201 {
			t.Fatalf("apply %d = %d %s", n, code, body)
		}
	}
	type rev struct {
		Revision   int64             `json:"revision"`
		Generation int64             `json:"generation"`
		Spec       struct{ N int }   `json:"spec"`
		Labels     map[string]string `json:"labels"`
	}
	history := func(name string) []rev {
		t.Helper()
		var h struct{ Items []rev }
		if code, body := s.call("GET", "/resources/echo/"+name+"/spec-history", nil); code != 200 || json.Unmarshal(body, &h) != nil {
			t.Fatalf("history = %d %s", code, body)
		}
		return h.Items
	}
	for n := 1; n <= 3; n++ {
		apply(n)
	}
	apply(3) // unchanged: no revision
	h := history("h1")
	if len(h) != 3 || h[0].Revision != 3 || h[0].Spec.N != 3 || h[2].Revision != 1 || h[2].Spec.N != 1 || h[2].Generation != 1 || h[2].Labels["n"] != "1" {
		t.Fatalf("history = %+v", h)
	}

	// Rollback to revision 1: a new generation with the old spec, converged,
	// and recorded as revision 4.
	code, body := s.call("POST", "/resources/echo/h1/rollback", map[string]any{"revision": 1})
	var r struct {
		Generation int64           `json:"generation"`
		Spec       struct{ N int } `json:"spec"`
	}
	if code != 200 || json.Unmarshal(body, &r) != nil || r.Generation != 4 || r.Spec.N != 1 {
		t.Fatalf("rollback = %d %s", code, body)
	}
	got := s.waitPhase("echo", "h1", string(model.PhaseReady), 30*time.Second)
	if !strings.Contains(string(got.Status), `"n": 1`) && !strings.Contains(string(got.Status), `"n":1`) {
		t.Errorf("status after the rollback = %s", got.Status)
	}
	if h := history("h1"); len(h) != 4 || h[0].Revision != 4 || h[0].Spec.N != 1 || h[0].Generation != 4 {
		t.Errorf("history after the rollback = %+v", h)
	}

	// The bound (4) keeps the newest.
	apply(5)
	apply(6)
	h = history("h1")
	if len(h) != 4 || h[0].Revision != 6 || h[3].Revision != 3 {
		t.Errorf("bounded history = %+v", h)
	}

	// A composed child records nothing.
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "hcomp", "kind_version": 1, "name": "c1"}); code != 201 {
		t.Fatalf("apply composer = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "the composed child", func() bool { _, ok := s.get("echo", "c1-child"); return ok })
	if h := history("c1-child"); len(h) != 0 {
		t.Errorf("a child's history = %+v", h)
	}
	if n := s.count(`SELECT count(*) FROM resource_spec_history h JOIN resources r ON r.id = h.resource_id WHERE r.owner_id IS NOT NULL`); n != 0 {
		t.Errorf("%d history rows for children", n)
	}

	// Bad rollbacks.
	before := s.count(`SELECT count(*) FROM resource_spec_history`)
	for _, c := range []struct {
		body any
		code int
		loc  string
	}{
		{map[string]any{"revision": 99}, 404, "body.revision"},
		{map[string]any{"revision": 1}, 404, "body.revision"}, // trimmed by the bound
		{map[string]any{}, 422, "body.revision"},
		{map[string]any{"revision": "x"}, 422, "body.revision"},
		{map[string]any{"revision": 0}, 422, "body.revision"},
	} {
		if code, body := s.call("POST", "/resources/echo/h1/rollback", c.body); !names(code, body, c.code, c.loc) {
			t.Errorf("rollback %v = %d %s; want %d naming %s", c.body, code, body, c.code, c.loc)
		}
	}
	if code, body := s.call("POST", "/resources/echo/none/rollback", map[string]any{"revision": 1}); code != 404 {
		t.Errorf("rollback of a missing resource = %d %s", code, body)
	}
	if after := s.count(`SELECT count(*) FROM resource_spec_history`); after != before {
		t.Errorf("bad rollbacks wrote %d revisions", after-before)
	}
}

// composerProvider composes one echo child named after its resource.
type composerProvider struct{}

func (composerProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "hcomp", Version: 1}
}
func (composerProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{Status: json.RawMessage(`{}`), Children: []webhooksdk.Child{
		{Kind: "echo", KindVersion: 1, Name: req.Resource.Name + "-child", Spec: json.RawMessage(`{"n":7}`)}}}, nil
}
