package integration

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/webhooksdk"
)

// teardownLog records, in order, every delete request providers received
// ("kind/name").
type teardownLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *teardownLog) add(s string) {
	l.mu.Lock()
	l.seen = append(l.seen, s)
	l.mu.Unlock()
}

func (l *teardownLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// stackProvider serves one kind of the teardown tests over HTTP. As the
// stack kind it composes <root>-vpc, -subnet, -vm (vm → subnet → vpc) and
// <root>-note (a kind with no finalizer, depending on vm), and drops the vm
// and the note when the spec says drop_vm. Every kind with a finalizer logs
// its delete requests; failing names fail their teardown.
type stackProvider struct {
	kind    string
	log     *teardownLog
	failing sync.Map // resource name -> struct{}: its teardown fails (transiently)
	broken  sync.Map // resource name -> struct{}: its reconcile fails (transiently)
	deletes atomic.Int32
	works   sync.Map // resource name -> *atomic.Int32: reconciles received
	// extra makes the stack composer also emit <root>-extra (a note): a
	// change of the world outside the spec, which only a recompose sees.
	extra   atomic.Bool
	resyncs atomic.Int32
}

func (p *stackProvider) worked(name string) int32 {
	n, _ := p.works.LoadOrStore(name, new(atomic.Int32))
	return n.(*atomic.Int32).Load()
}

func (p *stackProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *stackProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	name := req.Resource.Name
	switch {
	case req.TaskType == webhooksdk.TaskDelete:
		p.deletes.Add(1)
		if _, fail := p.failing.Load(name); fail {
			return webhooksdk.Outcome{}, errors.New("the cloud refused the delete")
		}
		p.log.add(p.kind + "/" + name)
		return webhooksdk.Outcome{}, nil
	case req.Trigger == webhooksdk.TriggerChildrenSettled:
		// Ready only while every descendant is.
		for _, d := range req.Descendants {
			if d.Phase != string(model.PhaseReady) {
				return webhooksdk.Outcome{Status: json.RawMessage(`{}`), Conditions: []webhooksdk.Condition{
					{Type: "Ready", Status: "False", Reason: "ChildNotReady", Message: d.Kind + "/" + d.Name + " is " + d.Phase}}}, nil
			}
		}
		return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
	case p.kind == "stack" && (req.Trigger == webhooksdk.TriggerSpecChange || req.Trigger == webhooksdk.TriggerResync):
		if req.Trigger == webhooksdk.TriggerResync {
			p.resyncs.Add(1)
		}
		var spec struct {
			DropVM bool `json:"drop_vm"`
		}
		if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
			return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
		}
		ref := func(kind, suffix string) webhooksdk.Ref { return webhooksdk.Ref{Kind: kind, Name: name + "-" + suffix} }
		child := func(kind, suffix string) webhooksdk.Child {
			return webhooksdk.Child{Kind: kind, KindVersion: 1, Name: name + "-" + suffix, Spec: json.RawMessage(`{}`)}
		}
		out := webhooksdk.Outcome{Status: json.RawMessage(`{}`),
			Children: []webhooksdk.Child{child("vpc", "vpc"), child("subnet", "subnet")},
			Edges: []webhooksdk.Edge{{Dependent: ref("subnet", "subnet"), Dependency: ref("vpc", "vpc"),
				Values: []webhooksdk.ValueFlow{{DependentField: "/vpc_rev", SourceField: "/rev"}}}}}
		if p.extra.Load() {
			out.Children = append(out.Children, child("note", "extra"))
		}
		if !spec.DropVM {
			out.Children = append(out.Children, child("vm", "vm"), child("note", "note"))
			out.Edges = append(out.Edges,
				webhooksdk.Edge{Dependent: ref("vm", "vm"), Dependency: ref("subnet", "subnet")},
				webhooksdk.Edge{Dependent: ref("note", "note"), Dependency: ref("vm", "vm")})
		}
		return out, nil
	default:
		n, _ := p.works.LoadOrStore(name, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if _, broken := p.broken.Load(name); broken {
			return webhooksdk.Outcome{}, errors.New("the cloud is down")
		}
		var spec struct {
			Rev int `json:"rev"`
		}
		_ = json.Unmarshal(req.Resource.Spec, &spec)
		status, _ := json.Marshal(map[string]any{"id": name, "rev": spec.Rev})
		return webhooksdk.Outcome{Status: status}, nil
	}
}

// startStacks starts the server with the stack kinds declared and served
// over HTTP; it returns the providers by kind.
func startStacks(t *testing.T, log *teardownLog) (*server, map[string]*stackProvider) {
	t.Helper()
	s := startAll(t)
	const (
		leaf     = `[{"name":"work","trigger":"specChange","emits":["status"]},{"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"test.io/teardown"}]`
		composer = `[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},` +
			`{"name":"rollup","trigger":"childrenSettled","emits":["status","conditions"]},` +
			`{"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"test.io/teardown"}]`
	)
	provs := map[string]*stackProvider{}
	var list []webhooksdk.Provider
	for kind, reactions := range map[string]string{"stack": composer, "vpc": leaf, "subnet": leaf, "vm": leaf,
		"note": `[{"name":"work","trigger":"specChange","emits":["status"]}]`} {
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
			"reactions": json.RawMessage(reactions)}); code != 201 {
			t.Fatalf("manifest %s = %d %s", kind, code, body)
		}
		provs[kind] = &stackProvider{kind: kind, log: log}
		list = append(list, provs[kind])
	}
	s.serveProvider("stacks", list...)
	return s, provs
}

// resourceDetail is the part of GET /resources/{kind}/{name} the lifecycle
// tests read.
type resourceDetail struct {
	model.Resource
	LastTask *store.LastTask `json:"last_task"`
	Teardown *struct {
		Finalizers []string `json:"finalizers"`
		Remaining  int      `json:"remaining"`
		Reason     string   `json:"reason"`
		BlockedBy  *struct {
			Kind, Name, Error string
			Terminal          bool
		} `json:"blocked_by"`
	} `json:"teardown"`
	Task *struct {
		TaskType  string `json:"task_type"`
		State     string `json:"state"`
		LastError string `json:"last_error"`
	} `json:"task"`
}

// detail GETs a resource; ok is false on 404.
func (s *server) detail(path string) (d resourceDetail, ok bool) {
	s.t.Helper()
	code, body := s.call("GET", "/resources/"+path, nil)
	if code == 404 {
		return d, false
	}
	if code != 200 || json.Unmarshal(body, &d) != nil {
		s.t.Fatalf("GET %s = %d %s", path, code, body)
	}
	return d, true
}

func (s *server) waitReady(path string) {
	s.t.Helper()
	waitFor(s.t, 30*time.Second, path+" Ready", func() bool {
		d, ok := s.detail(path)
		return ok && d.PhaseOf() == model.PhaseReady
	})
}

// waitFailed waits until path is Failed with no task left, its last error
// naming reason: a provider's terminal failure.
func (s *server) waitFailed(path, reason string) {
	s.t.Helper()
	var d resourceDetail
	waitFor(s.t, 30*time.Second, path+" Failed", func() bool {
		var ok bool
		d, ok = s.detail(path)
		return ok && d.PhaseOf() == model.PhaseFailed
	})
	if d.Task != nil || !strings.Contains(d.LastError, reason) {
		s.t.Errorf("%s: task %+v, last error %q; want a terminal failure naming %q", path, d.Task, d.LastError, reason)
	}
}

func (s *server) waitGone(paths ...string) {
	s.t.Helper()
	for _, p := range paths {
		waitFor(s.t, 60*time.Second, p+" removed", func() bool {
			_, ok := s.detail(p)
			return !ok
		})
	}
}

// TestCascadeDelete drives teardown through the REST API against real
// webhook endpoints: dependents before dependencies and the root last, a
// kind without a finalizer removed without a request, a delete of a
// dependency taking its dependents along, a failing teardown blocking its
// ancestors visibly until it heals, and a composer's prune going through
// the same protocol.
func TestCascadeDelete(t *testing.T) {
	t.Parallel()
	log := &teardownLog{}
	s, provs := startStacks(t, log)
	for _, root := range []string{"s1", "s2", "s3", "s4"} {
		if code, body := s.call("POST", "/resources", map[string]any{"kind": "stack", "kind_version": 1, "name": root}); code != 201 {
			t.Fatalf("apply %s = %d %s", root, code, body)
		}
	}
	for _, root := range []string{"s1", "s2", "s3", "s4"} {
		s.waitReady("stack/" + root)
	}
	for _, p := range []string{"vm/s1-vm", "note/s1-note"} {
		if d, _ := s.detail(p); d.PhaseOf() != model.PhaseReady {
			t.Fatalf("%s = %s before any delete", p, d.Phase)
		}
	}

	// The whole tree: vm, subnet, vpc, then the root; the note (no
	// finalizer) goes first, without a request.
	code, body := s.call("DELETE", "/resources/stack/s1", nil)
	var marked model.Resource
	if code != 202 || json.Unmarshal(body, &marked) != nil || marked.PhaseOf() != model.PhaseDeleting {
		t.Fatalf("DELETE stack/s1 = %d %s", code, body)
	}
	s.waitGone("stack/s1", "vpc/s1-vpc", "subnet/s1-subnet", "vm/s1-vm", "note/s1-note")
	if got, want := log.list(), []string{"vm/s1-vm", "subnet/s1-subnet", "vpc/s1-vpc", "stack/s1"}; !slices.Equal(got, want) {
		t.Errorf("teardown order = %q, want %q", got, want)
	}
	if code, _ := s.call("DELETE", "/resources/stack/s1", nil); code != 404 {
		t.Errorf("DELETE of a removed resource = %d, want 404", code)
	}

	// Deleting a dependency takes its dependents along (dependents first);
	// the root that owns them is not deleted.
	before := len(log.list())
	if code, body := s.call("DELETE", "/resources/vpc/s2-vpc", nil); code != 202 {
		t.Fatalf("DELETE vpc/s2-vpc = %d %s", code, body)
	}
	s.waitGone("vpc/s2-vpc", "subnet/s2-subnet", "vm/s2-vm", "note/s2-note")
	if got, want := log.list()[before:], []string{"vm/s2-vm", "subnet/s2-subnet", "vpc/s2-vpc"}; !slices.Equal(got, want) {
		t.Errorf("teardown order from the vpc = %q, want %q", got, want)
	}
	if d, ok := s.detail("stack/s2"); !ok || d.PhaseOf() == model.PhaseDeleting {
		t.Errorf("stack/s2 = %v %s, want it kept", ok, d.Phase)
	}

	// A teardown that keeps failing blocks everything above it, visibly,
	// and retries with backoff; once it heals the tree goes.
	provs["vm"].failing.Store("s3-vm", struct{}{})
	if code, body := s.call("DELETE", "/resources/stack/s3", nil); code != 202 {
		t.Fatalf("DELETE stack/s3 = %d %s", code, body)
	}
	var root resourceDetail
	waitFor(t, 30*time.Second, "stack/s3 to show the failing vm as its blocker", func() bool {
		root, _ = s.detail("stack/s3")
		return root.Teardown != nil && root.Teardown.BlockedBy != nil
	})
	if root.PhaseOf() != model.PhaseDeleting || root.Teardown.BlockedBy.Name != "s3-vm" ||
		!strings.Contains(root.Teardown.BlockedBy.Error, "the cloud refused the delete") ||
		!strings.Contains(root.Teardown.Reason, "vm/s3-vm") || root.Teardown.Remaining != 3 ||
		!slices.Equal(root.Teardown.Finalizers, []string{"test.io/teardown"}) {
		t.Errorf("stack/s3 while blocked = %s %+v", root.Phase, root.Teardown)
	}
	vm, _ := s.detail("vm/s3-vm")
	if vm.Task == nil || vm.Task.TaskType != "delete" || !strings.Contains(vm.Task.LastError, "refused") || vm.Teardown == nil {
		t.Errorf("vm/s3-vm while failing: task %+v, teardown %+v", vm.Task, vm.Teardown)
	}
	waitFor(t, 30*time.Second, "a retried teardown", func() bool { return provs["vm"].deletes.Load() >= 4 })
	if slices.Contains(log.list(), "subnet/s3-subnet") {
		t.Error("the subnet was torn down while its dependent vm still existed")
	}
	provs["vm"].failing.Delete("s3-vm")
	s.waitGone("stack/s3", "vpc/s3-vpc", "subnet/s3-subnet", "vm/s3-vm")

	// A composer that stops emitting a child with a finalizer tears it down
	// through the protocol (and its dependent note along with it).
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "stack", "kind_version": 1, "name": "s4",
		"spec": map[string]any{"drop_vm": true}}); code != 200 {
		t.Fatalf("re-apply s4 = %d %s", code, body)
	}
	s.waitGone("vm/s4-vm", "note/s4-note")
	if !slices.Contains(log.list(), "vm/s4-vm") {
		t.Errorf("the pruned vm was removed without its teardown: %q", log.list())
	}
	s.waitReady("stack/s4")
	if n := s.count(`SELECT count(*) FROM work_queue WHERE task_type = 'delete'`); n != 0 {
		t.Errorf("%d delete tasks left behind", n)
	}
	s.checkInvariants()
}
