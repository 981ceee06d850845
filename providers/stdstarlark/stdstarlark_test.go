package stdstarlark

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// TestMain fails the package if a test leaks a goroutine (a thread's cancel watcher).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const network = `
def compose(spec, config):
    vpc = spec["name"] + "-vpc"
    app = spec["name"] + "-app"
    return struct(
        children = [
            struct(kind = "fakevpc", kind_version = 1, name = vpc,
                   spec = {"cidr": config.get("cidr", "10.0.0.0/16"), "big": 9007199254740993}),
            {"kind": "fakeapp", "kind_version": 1, "name": app, "labels": {"team": spec["team"]},
             "spec": {"replicas": spec["replicas"] * 2}},
        ],
        edges = [struct(
            dependent = struct(kind = "fakeapp", name = app),
            dependency = struct(kind = "fakevpc", name = vpc),
            values = [struct(dependent = "/vpc_id", source = "/id")],
        )],
        status = {"children": 2, "ratio": 0.5},
    )

def status(descendants):
    ready = [d["name"] for d in descendants if d["phase"] == "Ready"]
    ok = len(ready) == len(descendants)
    return struct(
        status = {"ready": len(ready), "total": len(descendants)},
        conditions = [struct(type = "Ready", status = "True" if ok else "False",
                             reason = "AllReady" if ok else "NotReady",
                             message = ", ".join(sorted(ready)))],
    )
`

func request(reaction, program, spec string) webhooksdk.Request {
	return webhooksdk.Request{
		Reaction: reaction,
		Resource: webhooksdk.Resource{Kind: "stdstarlark", KindVersion: 1, Name: "r1", Spec: json.RawMessage(spec)},
		Config:   json.RawMessage(`{"cidr":"10.1.0.0/16"}`),
		Bundle:   []byte(program),
	}
}

func TestComposeReturnsChildrenAndEdgesWithValueFlows(t *testing.T) {
	out, err := sdktest.Run(t, New("stdstarlark"), request("compose", network, `{"name":"shop","team":"blue","replicas":3}`))
	if err != nil {
		t.Fatal(err)
	}
	want := webhooksdk.Outcome{
		Status: json.RawMessage(`{"children":2,"ratio":0.5}`),
		Children: []webhooksdk.Child{
			{Kind: "fakevpc", KindVersion: 1, Name: "shop-vpc", Spec: json.RawMessage(`{"big":9007199254740993,"cidr":"10.1.0.0/16"}`)},
			{Kind: "fakeapp", KindVersion: 1, Name: "shop-app", Labels: map[string]string{"team": "blue"}, Spec: json.RawMessage(`{"replicas":6}`)},
		},
		Edges: []webhooksdk.Edge{{
			Dependent:  webhooksdk.Ref{Kind: "fakeapp", Name: "shop-app"},
			Dependency: webhooksdk.Ref{Kind: "fakevpc", Name: "shop-vpc"},
			Values:     []webhooksdk.ValueFlow{{DependentField: "/vpc_id", SourceField: "/id"}},
		}},
	}
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("outcome (-want +got):\n%s", d)
	}
}

func TestComposeReadsObserved(t *testing.T) {
	const prog = `
def compose(spec, config, observed):
    ids = {o["name"]: o["status"]["id"] for o in observed if o.get("status")}
    return struct(status = {"seen": ids})
`
	req := request("compose", prog, `{}`)
	req.Observed = []webhooksdk.Resource{
		{Kind: "fakevpc", KindVersion: 1, Name: "a", Status: json.RawMessage(`{"id":"vpc-1"}`), Phase: "Ready"},
		{Kind: "fakevpc", KindVersion: 1, Name: "b", Phase: "Reconciling"},
	}
	out, err := sdktest.Run(t, New("stdstarlark"), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Status) != `{"seen":{"a":"vpc-1"}}` {
		t.Errorf("status = %s", out.Status)
	}
}

func TestStatusRollsUp(t *testing.T) {
	req := request("rollup", network, `{}`)
	req.Descendants = []webhooksdk.Resource{
		{Kind: "fakevpc", KindVersion: 1, Name: "shop-vpc", Phase: "Ready"},
		{Kind: "fakeapp", KindVersion: 1, Name: "shop-app", Phase: "Failed"},
	}
	out, err := sdktest.Run(t, New("stdstarlark"), req)
	if err != nil {
		t.Fatal(err)
	}
	want := webhooksdk.Outcome{
		Status:     json.RawMessage(`{"ready":1,"total":2}`),
		Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "False", Reason: "NotReady", Message: "shop-vpc"}},
	}
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("outcome (-want +got):\n%s", d)
	}
}

func TestRollupWithoutStatusIsEmpty(t *testing.T) {
	out, err := sdktest.Run(t, New("stdstarlark"), request("rollup", "def compose(spec, config):\n    return {}\n", `{}`))
	if err != nil || !cmp.Equal(out, webhooksdk.Outcome{}) {
		t.Errorf("rollup = %+v, %v; want an empty outcome", out, err)
	}
}

// TestInfiniteLoopStopsAtTheStepLimit: the step count is deterministic, so a program
// that exceeds it always will: terminal. The error names the step limit, not the
// wall-clock one (CallTimeout, transient), so the steps stopped it first — proven by
// the error, not by timing the call, which a loaded machine makes meaningless.
func TestInfiniteLoopStopsAtTheStepLimit(t *testing.T) {
	for name, prog := range map[string]string{
		"compose":   "def compose(spec, config):\n    n = 0\n    while True:\n        n += 1\n",
		"top level": "def compose(spec, config):\n    return {}\nx = 0\nwhile True:\n    x += 1\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := sdktest.Run(t, New("stdstarlark"), request("compose", prog, `{}`))
			if !webhooksdk.IsTerminal(err) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("step limit of %d exceeded", MaxSteps)) {
				t.Fatalf("err = %v; want a terminal step-limit error", err)
			}
			if !strings.HasPrefix(err.Error(), "compose.star:") {
				t.Errorf("err = %v; want it to start with the program position", err)
			}
		})
	}
}

// TestCancellationIsTransient: a task stopped by its deadline (or supersession) is not
// the program's fault.
func TestCancellationIsTransient(t *testing.T) {
	req := request("compose", "def compose(spec, config):\n    while True:\n        pass\n", `{}`)
	req.Deadline = time.Now().Add(20 * time.Millisecond)
	_, err := sdktest.Run(t, New("stdstarlark"), req)
	if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "compose stopped") {
		t.Errorf("err = %v; want a transient stop", err)
	}
}

// TestEmptyBundleIsTransient: the provider config may not have propagated yet.
func TestEmptyBundleIsTransient(t *testing.T) {
	_, err := sdktest.Run(t, New("stdstarlark"), request("compose", "", `{}`))
	if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "config.data is empty") {
		t.Errorf("empty bundle: err = %v; want transient naming config.data", err)
	}
}

func TestOutcomeSizeIsCapped(t *testing.T) {
	prog := "def compose(spec, config):\n    return struct(status = {\"blob\": \"x\" * " + fmt.Sprint(MaxOutcome) + "})\n"
	_, err := sdktest.Run(t, New("stdstarlark"), request("compose", prog, `{}`))
	if !webhooksdk.IsTerminal(err) || !strings.Contains(fmt.Sprint(err), "-byte cap") {
		t.Errorf("err = %v; want the outcome cap, terminal", err)
	}
}

// TestBadProgramsAreNamed: every mistake is terminal and its message names the place.
func TestBadProgramsAreNamed(t *testing.T) {
	for _, tc := range []struct{ name, prog, want string }{
		{"syntax", "def compose(spec, config)\n    return {}\n", "compose.star:2:1: got newline, want ':'"},
		{"no compose", "def other():\n    pass\n", "compose.star: no compose function defined"},
		{"compose arity", "def compose(spec):\n    return {}\n", "compose.star:1:1: compose must take (spec, config)"},
		{"status arity", "def compose(spec, config):\n    return {}\ndef status():\n    return {}\n", "compose.star:3:1: status must take (descendants)"},
		{"status not a function", "def compose(spec, config):\n    return {}\nstatus = 1\n", "compose.star: status must be a function taking (descendants)"},
		{"runtime", "def compose(spec, config):\n    x = 1\n    return spec[\"missing\"]\n", "compose.star:3:16: in compose: key \"missing\" not in dict"},
		{"fail", "def compose(spec, config):\n    fail(\"no region\")\n", "compose.star:2:9: in compose: fail: no region"},
		{"not a struct", "def compose(spec, config):\n    return 1\n", "compose.star:1:1: compose returned result: want a struct or dict, got int"},
		{"unknown field", "def compose(spec, config):\n    return struct(childs = [])\n", `result: unknown field "childs"`},
		{"no kind_version", "def compose(spec, config):\n    return struct(children = [struct(kind = \"k\", name = \"n\")])\n", "children[0].kind_version: want an int"},
		{"spec not JSON", "def compose(spec, config):\n    return struct(children = [struct(kind = \"k\", kind_version = 1, name = \"n\", spec = {\"f\": len})])\n", "children[0].spec.f: a builtin_function_or_method is not JSON"},
		{"flow not a pointer", "def compose(spec, config):\n    r = struct(kind = \"k\", name = \"n\")\n    return struct(edges = [struct(dependent = r, dependency = r, values = [struct(dependent = \"x\", source = \"/y\")])])\n", "edges[0].values[0]: fields must be JSON Pointers"},
		{"global state", "seen = []\ndef compose(spec, config):\n    seen.append(1)\n    return {}\n", "compose.star:3:16: in compose: append: cannot append to frozen list"},
		{"cycle", "def compose(spec, config):\n    l = []\n    l.append(l)\n    return struct(status = {\"l\": l})\n", "nested deeper than 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sdktest.Run(t, New("stdstarlark"), request("compose", tc.prog, `{}`))
			if !webhooksdk.IsTerminal(err) || !strings.Contains(fmt.Sprint(err), tc.want) {
				t.Errorf("err = %v; want terminal containing %q", err, tc.want)
			}
		})
	}
}

// TestCompiledProgramsAreCached: OnConfig compiles, Work reuses it, and the cache stays
// bounded however many bundles pass through.
func TestCompiledProgramsAreCached(t *testing.T) {
	p := New("stdstarlark").(*provider)
	bundle := []byte(network)
	p.OnConfig(webhooksdk.ProviderConfig{Data: bundle})
	first, err := p.program(t.Context(), bundle)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := p.program(t.Context(), bundle); again != first {
		t.Error("the same bundle compiled twice")
	}
	for i := range 2 * maxCached {
		p.OnConfig(webhooksdk.ProviderConfig{Data: fmt.Appendf(nil, "def compose(spec, config):\n    return {}\nn = %d\n", i)})
	}
	if len(p.cache) > maxCached {
		t.Errorf("cache holds %d programs, cap %d", len(p.cache), maxCached)
	}
}

func TestManifestIsTheKind(t *testing.T) {
	var m struct {
		Kind        string `json:"kind"`
		KindVersion int    `json:"kind_version"`
		Reactions   []struct {
			Name, Trigger string
			Emits         []string
		} `json:"reactions"`
	}
	if err := json.Unmarshal(Manifest(), &m); err != nil {
		t.Fatal(err)
	}
	kv := New("stdstarlark").Kind()
	if m.Kind != kv.Kind || m.KindVersion != kv.Version || len(m.Reactions) != 2 ||
		m.Reactions[0].Name != reactionCompose || m.Reactions[1].Name != reactionRollup {
		t.Errorf("manifest = %+v; want %s with compose and rollup", m, kv)
	}
}

// TestDocsExample runs the worked example of docs/std-providers.md (stdstarlark), the
// bundle example/site zipped.
func TestDocsExample(t *testing.T) {
	var zipped bytes.Buffer
	w := zip.NewWriter(&zipped)
	if err := w.AddFS(os.DirFS("example/site")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	prog := zipped.Bytes()
	var res struct {
		Spec json.RawMessage `json:"spec"`
	}
	b, err := os.ReadFile("example/resource.json")
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("example/resource.json: %v", err)
	}
	out, err := sdktest.Run(t, New("stdstarlark"), request("compose", string(prog), string(res.Spec)))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Children) != 3 || out.Children[2].Kind != "cdn" || len(out.Edges) != 1 ||
		out.Edges[0].Dependency.Name != "docs-site-bucket-0" || out.Edges[0].Values[0].DependentField != "/origin" {
		t.Errorf("compose = %+v; want two buckets and a cdn wired to the first", out)
	}
	req := request("rollup", string(prog), string(res.Spec))
	req.Descendants = []webhooksdk.Resource{{Kind: "cdn", Name: "docs-site-cdn", Phase: "Reconciling"}}
	out, err = sdktest.Run(t, New("stdstarlark"), req)
	if err != nil || len(out.Conditions) != 1 || out.Conditions[0].Message != "cdn/docs-site-cdn is Reconciling" {
		t.Errorf("rollup = %+v, %v; want the cdn named not ready", out, err)
	}
}
