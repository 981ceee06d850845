package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	conctl "github.com/convergeplane/converge/cmd/conctl/cli"
	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// server is a real converge control plane (API, drainer, reaper) on its own
// database, listening on loopback.
type server struct {
	t    testing.TB
	db   *pgtest.Database
	base string
	*engine
}

func startServer(t *testing.T) *server {
	t.Helper()
	e := newEngine(t, engineOpts{noDrain: true}) // the server runs its own drainer
	cfg := convergecli.Config{DatabaseURL: e.db.DSN, Role: convergecli.RoleControl, ListenAddr: "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, MemberID: "e2e"}
	s, err := convergecli.Start(t.Context(), cfg, e.log)
	must(t, err)
	t.Cleanup(func() { must(t, s.Stop()) })
	return &server{t: t, db: e.db, base: "http://" + s.Addr(), engine: e}
}

// conctl runs the CLI against the server and returns its exit code and output.
func (s *server) conctl(args ...string) (int, string, string) {
	s.t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "CONVERGE_SERVER" {
			return s.base
		}
		return ""
	}
	code := conctl.Run(context.Background(), args, strings.NewReader(""), &out, &errb, getenv)
	return code, out.String(), errb.String()
}

func (s *server) call(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.base+"/api/v1"+path, r)
	must(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(s.t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestConctlVersioningWalkthrough performs reference 004's versioning and
// provider-config walkthroughs with conctl against a real server and checks
// the outcome each step states.
func TestConctlVersioningWalkthrough(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	f := func(name string) string { return filepath.Join("..", "examples", "versioning", "testdata", name) }
	step := func(wantCode int, wantOut string, args ...string) string {
		t.Helper()
		code, out, errs := s.conctl(args...)
		if code != wantCode || !strings.Contains(out+errs, wantOut) {
			t.Fatalf("conctl %s: exit %d, want %d containing %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, wantOut, out, errs)
		}
		return out + errs
	}
	step(0, "manifest/vpc/v1 created", "apply", "--type", "manifest", "-f", f("vpc.kind.json"))
	step(0, "manifest/vpc/v2 created", "apply", "--type", "manifest", "-f", f("vpc-v2.kind.json"))
	// 1) additive change to v1: accepted. 2) breaking change: 409, no override.
	step(0, "configured", "apply", "--type", "manifest", "-f", f("vpc-v1-additive.json"))
	out := step(1, "409", "apply", "--type", "manifest", "-f", f("vpc-v1-breaking.json"))
	if !strings.Contains(out, "kind_version") {
		t.Errorf("the 409 does not tell the user to publish a new kind_version:\n%s", out)
	}
	// 3) both versions exist; the version is required on get.
	step(0, "vpc", "get", "manifest", "vpc", "--kind-version", "1")
	step(0, "vpc", "get", "manifest", "vpc", "--kind-version", "2")
	step(2, "kind-version", "get", "manifest", "vpc")
	// 4) a v1 resource using the new optional field; 5) a v2 resource.
	step(0, "created", "apply", "--type", "resource", "-f", f("resource-vpc-v1-tagged.json"))
	step(0, "created", "apply", "--type", "resource", "-f", f("resource-vpc-v2.json"))
	var before model.Resource
	code, body := s.call("GET", "/resources/vpc/sample-vpc-tagged", nil)
	must(t, json.Unmarshal(body, &before))
	if code != 200 || before.KindVersion != 1 {
		t.Fatalf("GET tagged = %d %s", code, body)
	}
	// 6) flip v1 -> v2 in place: same id, new version.
	step(0, "configured", "apply", "--type", "resource", "-f", f("resource-vpc-flip-to-v2.json"))
	var after model.Resource
	_, body = s.call("GET", "/resources/vpc/sample-vpc-tagged", nil)
	must(t, json.Unmarshal(body, &after))
	if after.ID != before.ID || after.KindVersion != 2 || after.Generation != before.Generation+1 {
		t.Errorf("flip: id %s->%s, version %d, generation %d->%d; want the same id at v2, one generation later",
			before.ID, after.ID, after.KindVersion, before.Generation, after.Generation)
	}

	// Provider configs: per-version defaults coexist; a second default is
	// refused; custom configs attach only to their own (kind, kind_version).
	step(0, "created", "apply", "--type", "providerconfig", "-f", f("providerconfig-vpc-v1-default.json"))
	step(0, "created", "apply", "--type", "providerconfig", "-f", f("providerconfig-vpc-v2-default.json"))
	step(1, "409", "apply", "--type", "providerconfig", "-f", f("providerconfig-vpc-v1-second-default.json"))
	step(0, "created", "apply", "--type", "providerconfig", "-f", f("providerconfig-vpc-v1-custom.json"))
	step(0, "created", "apply", "--type", "providerconfig", "-f", f("providerconfig-vpc-v2-custom.json"))
	step(0, "created", "apply", "--type", "resource", "-f", f("resource-vpc-v1-with-custom.json"))
	out = step(1, "422", "apply", "--type", "resource", "-f", f("resource-vpc-v1-config-mismatch.json"))
	if !strings.Contains(out, "vpc/2") || !strings.Contains(out, "vpc/1") {
		t.Errorf("the mismatch error does not name both versions:\n%s", out)
	}
	if code, _ := s.call("GET", "/resources/vpc/sample-vpc-v1-mismatch", nil); code != 404 {
		t.Errorf("the refused resource exists (GET = %d)", code)
	}
}

// TestEngineOverTheAPI drives the engine black-box: kinds and resources go
// in through the REST API, an in-process executor does the work, and the
// outcome is read back through the API.
func TestEngineOverTheAPI(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, m := range []map[string]any{
		{"kind": "leaf", "kind_version": 1, "spec_schema": map[string]any{"type": "object"},
			"reactions": json.RawMessage(leafReactions)},
		{"kind": "comp", "kind_version": 1, "reactions": json.RawMessage(compReactions)},
	} {
		if code, body := s.call("PUT", fmt.Sprintf("/kinds/%s/manifest", m["kind"]), m); code != 201 {
			t.Fatalf("PUT manifest %s = %d %s", m["kind"], code, body)
		}
	}
	s.run(inproc.Config{}, standardHandlers(s.engine, nil))
	s.listen()

	spec := compSpec{Children: []childSpec{{Name: "a"}, {Name: "b", After: []string{"a"}, Flow: true}, {Name: "c"}}}
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "comp", "kind_version": 1, "name": "root", "spec": spec}); code != 201 {
		t.Fatalf("POST resource = %d %s", code, body)
	}
	var root model.Resource
	waitFor(t, 20*time.Second, "root Ready through the API", func() bool {
		_, body := s.call("GET", "/resources/comp/root", nil)
		_ = json.Unmarshal(body, &root)
		return root.PhaseOf() == model.PhaseReady
	})
	var page struct {
		Items []model.Resource `json:"items"`
	}
	_, body := s.call("GET", "/resources?owner="+root.ID+"&phase=Ready", nil)
	must(t, json.Unmarshal(body, &page))
	if len(page.Items) != 3 {
		t.Errorf("Ready children listed = %d, want 3", len(page.Items))
	}
	var b map[string]any
	for _, it := range page.Items {
		if it.Name == "b" {
			must(t, json.Unmarshal(it.Spec, &b))
		}
	}
	if b["upstream_id"] != "id-a" {
		t.Errorf("b.spec.upstream_id = %v, want id-a (value flow)", b["upstream_id"])
	}

	// The engine's reads.
	var kids struct{ Items []model.Resource }
	if code, body := s.call("GET", "/resources/comp/root/children", nil); code != 200 || json.Unmarshal(body, &kids) != nil || len(kids.Items) != 3 {
		t.Errorf("children = %d %s", code, body)
	}
	var deps struct{ Upstream, Downstream []map[string]any }
	if code, body := s.call("GET", "/resources/leaf/b/dependencies", nil); code != 200 || json.Unmarshal(body, &deps) != nil ||
		len(deps.Upstream) != 1 || len(deps.Downstream) != 0 {
		t.Errorf("dependencies of b = %d %s", code, body)
	}
	var g struct{ Nodes, Edges []map[string]any }
	if code, body := s.call("GET", "/resources/comp/root/graph", nil); code != 200 || json.Unmarshal(body, &g) != nil ||
		len(g.Nodes) != 4 || len(g.Edges) != 1 {
		t.Errorf("graph = %d %s", code, body)
	}
	// The log says what a person reads, whichever way the task was queued
	// (the API's create, a composer's new child, the gate once an upstream
	// synced): the apply, the composition, the phase change to Ready. No
	// step of a task (queued, claimed, a success that moved no phase): the
	// root's compose succeeded without leaving Reconciling.
	for path, want := range map[string][]string{
		"comp/root": {"applied", "composed", "succeeded"},
		"leaf/a":    {"succeeded"},
		"leaf/b":    {"succeeded"},
	} {
		if got := taskEvents(t, s, path); !slices.Equal(got, want) {
			t.Errorf("%s's events, oldest first = %q, want %q", path, got, want)
		}
	}
	// A settled resource has no live task: the drain removed it.
	// It names the task it last applied.
	type detailView struct {
		Phase     string          `json:"phase"`
		Task      json.RawMessage `json:"task"`
		UpdatedAt time.Time       `json:"updated_at"`
		LastTask  *store.LastTask `json:"last_task"`
	}
	getA := func() detailView {
		var d detailView
		if code, body := s.call("GET", "/resources/leaf/a", nil); code != 200 || json.Unmarshal(body, &d) != nil {
			t.Fatalf("detail of a = %d %s", code, body)
		}
		return d
	}
	// Its times are there, in order: queued, claimed, applied (updated_at).
	first := getA()
	if first.Phase != "Ready" || first.Task != nil || first.LastTask == nil || first.LastTask.TaskID == "" ||
		first.LastTask.ClaimEpoch < 1 || first.LastTask.ClaimedAt.IsZero() || first.LastTask.ClaimedAt.After(first.UpdatedAt) ||
		first.LastTask.EnqueuedAt == nil || first.LastTask.EnqueuedAt.After(first.LastTask.ClaimedAt) {
		t.Errorf("detail of a = %+v (last task %+v)", first, first.LastTask)
	}
	// Reconcile re-runs a settled resource without a generation bump, as a
	// new task.
	if code, body := s.call("POST", "/resources/leaf/a/reconcile", nil); code != 202 {
		t.Errorf("reconcile = %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "a re-run by the reconcile", func() bool { return s.calls.get("a") == 2 })
	waitFor(t, 10*time.Second, "a's re-run applied", func() bool {
		lt := getA().LastTask
		return lt != nil && first.LastTask != nil && lt.TaskID != first.LastTask.TaskID && lt.ClaimedAt.After(first.LastTask.ClaimedAt)
	})
	if code, body := s.call("POST", "/resources/leaf/nope/reconcile", nil); code != 404 || !strings.Contains(string(body), "leaf/nope") {
		t.Errorf("reconcile of a missing resource = %d %s", code, body)
	}
	// The server registered itself in the cluster view.
	var members struct {
		Items []struct {
			MemberID string `json:"member_id"`
			Role     string `json:"role"`
			Ready    bool   `json:"ready"`
			ShardLo  *int   `json:"shard_lo"`
			ShardHi  *int   `json:"shard_hi"`
		} `json:"items"`
	}
	if code, body := s.call("GET", "/cluster-members", nil); code != 200 || json.Unmarshal(body, &members) != nil ||
		len(members.Items) != 1 || members.Items[0].MemberID != "e2e" || !members.Items[0].Ready ||
		members.Items[0].ShardLo == nil || *members.Items[0].ShardLo != 0 || *members.Items[0].ShardHi != 255 {
		t.Errorf("cluster members = %d %s", code, body)
	}
	if code, out, errs := s.conctl("list", "cluster"); code != 0 || !regexp.MustCompile(`(?m)^e2e\s+control\s+true\s+0-255\s`).MatchString(out) {
		t.Errorf("conctl list cluster = %d\n%s%s", code, out, errs)
	}
	s.checkInvariants()
}

// taskEvents lists a resource's events, oldest first, and fails the test on
// one the log no longer writes (a task's queued or claimed step).
func taskEvents(t *testing.T, s *server, path string) []string {
	t.Helper()
	var evs struct {
		Items []struct{ Type, Message string }
	}
	code, body := s.call("GET", "/resources/"+path+"/events?limit=100", nil)
	if code != 200 || json.Unmarshal(body, &evs) != nil {
		t.Fatalf("events of %s = %d %s", path, code, body)
	}
	var got []string
	for _, e := range slices.Backward(evs.Items) {
		switch e.Type {
		case "scheduled", "claimed":
			t.Errorf("%s: a %s event (%q): a task's steps are not logged", path, e.Type, e.Message)
		case "applied", "composed", "succeeded":
			got = append(got, e.Type)
		}
	}
	return got
}
