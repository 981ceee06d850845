package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/convergeplane/converge/examples/classic"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// bomFixture reads a classicbom resource fixture's name and spec.
func bomFixture(t *testing.T, file string) (name string, spec BOMSpec, raw json.RawMessage) {
	t.Helper()
	b, err := classic.Fixture(file)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Name string          `json:"name"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if err := json.Unmarshal(r.Spec, &spec); err != nil {
		t.Fatalf("%s spec: %v", file, err)
	}
	return r.Name, spec, r.Spec
}

func bomRequest(name string, spec json.RawMessage, reaction string) webhooksdk.Request {
	return webhooksdk.Request{Reaction: reaction, KindVersion: 1, TaskType: webhooksdk.TaskReconcile,
		Resource: webhooksdk.Resource{Kind: "classicbom", KindVersion: 1, Name: name, Spec: spec}}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// composeBOM runs compose through the provider, the way the Handler would,
// failing the test on an error or on an outcome the core would reject.
func composeBOM(t *testing.T, name string, spec json.RawMessage) webhooksdk.Outcome {
	t.Helper()
	out, err := sdktest.Run(t, &bom{}, bomRequest(name, spec, "compose"))
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	return out
}

func childKey(kind, name string) string { return kind + "/" + name }

func childrenByKey(t *testing.T, out webhooksdk.Outcome) map[string]webhooksdk.Child {
	t.Helper()
	m := make(map[string]webhooksdk.Child, len(out.Children))
	for _, c := range out.Children {
		k := childKey(c.Kind, c.Name)
		if _, dup := m[k]; dup {
			t.Errorf("child %s is emitted twice", k)
		}
		m[k] = c
	}
	return m
}

// vpc's spec schema (vpc.kind.json) as the core checks a composed child.
var (
	cidrPattern = regexp.MustCompile(`^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$`)
	hexID       = regexp.MustCompile(`^[0-9a-f]{12}$`)
)

// TestComposeFixtures checks the fan-out of each BOM fixture against the
// shape the package documents, computed independently from the spec.
func TestComposeFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file     string
		children int // documented in the README
	}{
		{"resource-classicbom.json", 26},
		{"resource-classicbom-updated.json", 26},
		{"resource-classicbom-large.json", 5447},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			root, spec, raw := bomFixture(t, tc.file)
			out := composeBOM(t, root, raw)
			if len(out.Children) != tc.children {
				t.Errorf("compose emitted %d children, want %d", len(out.Children), tc.children)
			}

			teams, netDomains, netTeams := 0, 0, 0
			for _, d := range spec.Domains {
				teams += len(d.Teams)
				if d.networked() {
					netDomains++
					netTeams += len(d.Teams)
				}
			}
			want := map[string]int{"account": teams + netDomains, "vpc": teams, "route": netTeams, "tgw": netDomains}
			got := map[string]int{}
			for _, c := range out.Children {
				got[c.Kind]++
				if c.KindVersion != 1 {
					t.Errorf("child %s/%s has kind_version %d, want an explicit 1", c.Kind, c.Name, c.KindVersion)
				}
				if c.Labels["bom"] != root || c.Labels["domain"] == "" {
					t.Errorf("child %s/%s has labels %v, want bom=%s and a domain", c.Kind, c.Name, c.Labels, root)
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("children per kind = %v, want %v", got, want)
			}
			children := childrenByKey(t, out)
			if len(children) != len(out.Children) {
				t.Errorf("%d children but %d distinct kind/name pairs", len(out.Children), len(children))
			}

			var st map[string]int
			if err := json.Unmarshal(out.Status, &st); err != nil {
				t.Fatalf("compose status %s: %v", out.Status, err)
			}
			if wantSt := map[string]int{"domains": len(spec.Domains), "teams": teams, "children": tc.children}; !maps.Equal(st, wantSt) {
				t.Errorf("compose status = %v, want %v", st, wantSt)
			}

			checkEdges(t, root, spec, out, children)
			checkSpecs(t, root, spec, children)
		})
	}
}

// checkEdges checks every edge joins two emitted children, carries one value
// flow of the same field on both sides, and that exactly the documented
// edges exist: vpc.account_id ← account, tgw.account_id ← tgw-host account,
// route.vpc_id ← vpc, route.tgw_id ← tgw.
func checkEdges(t *testing.T, root string, spec BOMSpec, out webhooksdk.Outcome, children map[string]webhooksdk.Child) {
	t.Helper()
	type edge struct{ dependent, dependency, field string }
	got := map[edge]int{}
	for _, e := range out.Edges {
		if len(e.Values) != 1 {
			t.Errorf("edge %v → %v has %d value flows, want 1", e.Dependent, e.Dependency, len(e.Values))
			continue
		}
		v := e.Values[0]
		if v.DependentField != v.SourceField {
			t.Errorf("edge %v → %v flows %s into %s, want the same field", e.Dependent, e.Dependency, v.SourceField, v.DependentField)
		}
		for _, r := range []webhooksdk.Ref{e.Dependent, e.Dependency} {
			if _, ok := children[childKey(r.Kind, r.Name)]; !ok {
				t.Errorf("edge names %s/%s, which compose did not emit", r.Kind, r.Name)
			}
		}
		got[edge{childKey(e.Dependent.Kind, e.Dependent.Name), childKey(e.Dependency.Kind, e.Dependency.Name), v.DependentField}]++
	}
	want := map[edge]int{}
	for _, d := range spec.Domains {
		base := root + "-" + d.Name
		if d.networked() {
			want[edge{childKey("tgw", base), childKey("account", base+"-tgw-host"), "/account_id"}] = 1
		}
		for _, team := range d.Teams {
			n := base + "-" + team
			want[edge{childKey("vpc", n), childKey("account", n), "/account_id"}] = 1
			if d.networked() {
				want[edge{childKey("route", n), childKey("vpc", n), "/vpc_id"}] = 1
				want[edge{childKey("route", n), childKey("tgw", base), "/tgw_id"}] = 1
			}
		}
	}
	if !maps.Equal(got, want) {
		for e, n := range got {
			if want[e] != n {
				t.Errorf("edge %+v emitted %d times, want %d", e, n, want[e])
			}
		}
		for e := range want {
			if got[e] == 0 {
				t.Errorf("edge %+v missing", e)
			}
		}
	}
}

// checkSpecs checks each child's spec and labels: the names derive from the
// root, the domain and the team only, and the specs satisfy the kinds'
// schemas before any value has flowed.
func checkSpecs(t *testing.T, root string, spec BOMSpec, children map[string]webhooksdk.Child) {
	t.Helper()
	decodeChild := func(c webhooksdk.Child, into any) {
		t.Helper()
		dec := json.NewDecoder(strings.NewReader(string(c.Spec)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Errorf("%s/%s spec %s: %v", c.Kind, c.Name, c.Spec, err)
		}
	}
	for _, d := range spec.Domains {
		base := root + "-" + d.Name
		if d.networked() {
			host, tg := children[childKey("account", base+"-tgw-host")], children[childKey("tgw", base)]
			var as accountSpec
			decodeChild(host, &as)
			if as.TeamName != d.Name+"-tgw-host" {
				t.Errorf("tgw-host account %s team_name = %q, want %q", host.Name, as.TeamName, d.Name+"-tgw-host")
			}
			var ts tgwSpec
			decodeChild(tg, &ts)
			if ts.Name != base || ts.AccountID != "" {
				t.Errorf("tgw %s spec = %+v, want name %q and no account_id before it flows", tg.Name, ts, base)
			}
			for _, c := range []webhooksdk.Child{host, tg} {
				if want := map[string]string{"bom": root, "domain": d.Name, "role": "tgw-host"}; !maps.Equal(c.Labels, want) {
					t.Errorf("%s/%s labels = %v, want %v", c.Kind, c.Name, c.Labels, want)
				}
			}
		}
		for _, team := range d.Teams {
			n := base + "-" + team
			labels := map[string]string{"bom": root, "domain": d.Name, "team": team}
			acct := children[childKey("account", n)]
			var as accountSpec
			decodeChild(acct, &as)
			if as.TeamName != team {
				t.Errorf("account %s team_name = %q, want %q", n, as.TeamName, team)
			}
			v := children[childKey("vpc", n)]
			var vs vpcSpec
			decodeChild(v, &vs)
			if vs.AccountID != placeholderAccount || len(vs.AccountID) != 12 {
				t.Errorf("vpc %s account_id = %q, want the 12-character placeholder", n, vs.AccountID)
			}
			if !cidrPattern.MatchString(vs.CIDR) || vs.CIDR != cidr(n) {
				t.Errorf("vpc %s cidr = %q, want %q matching vpc's schema", n, vs.CIDR, cidr(n))
			}
			if vs.Region != "" || vs.Tags != nil {
				t.Errorf("vpc %s spec = %+v, want no region or tags", n, vs)
			}
			rt, ok := children[childKey("route", n)]
			if ok != d.networked() {
				t.Errorf("route %s emitted = %v, want %v (domain networked = %v)", n, ok, d.networked(), d.networked())
			}
			if ok && string(rt.Spec) != "{}" {
				t.Errorf("route %s spec = %s, want {} until vpc_id and tgw_id flow in", n, rt.Spec)
			}
			for _, c := range []webhooksdk.Child{acct, v, rt} {
				if c.Kind != "" && !maps.Equal(c.Labels, labels) {
					t.Errorf("%s/%s labels = %v, want %v", c.Kind, c.Name, c.Labels, labels)
				}
			}
		}
	}
}

// TestComposeNetworkingFalse: a domain without networking gets per-team
// accounts and vpcs only; no tgw, tgw-host account or route refers to it.
func TestComposeNetworkingFalse(t *testing.T) {
	t.Parallel()
	no, yes := false, true
	spec := BOMSpec{Domains: []Domain{
		{Name: "off", Networking: &no, Teams: []string{"a", "b"}},
		{Name: "on", Networking: &yes, Teams: []string{"c"}},
		{Name: "default", Teams: []string{"d"}},
	}}
	out := composeBOM(t, "r", mustJSON(t, spec))
	var got []string
	for _, c := range out.Children {
		got = append(got, childKey(c.Kind, c.Name))
	}
	slices.Sort(got)
	want := []string{
		"account/r-default-d", "account/r-default-tgw-host", "account/r-off-a", "account/r-off-b",
		"account/r-on-c", "account/r-on-tgw-host",
		"route/r-default-d", "route/r-on-c",
		"tgw/r-default", "tgw/r-on",
		"vpc/r-default-d", "vpc/r-off-a", "vpc/r-off-b", "vpc/r-on-c",
	}
	if !slices.Equal(got, want) {
		t.Errorf("children =\n%v\nwant\n%v", got, want)
	}
	for _, e := range out.Edges {
		if strings.HasPrefix(e.Dependent.Name, "r-off") && e.Dependent.Kind != "vpc" {
			t.Errorf("networking:false domain has an edge %v → %v", e.Dependent, e.Dependency)
		}
	}
	if len(out.Edges) != 4+2*2+2 { // 4 vpc→account, 2 routes × 2, 2 tgw→host
		t.Errorf("compose emitted %d edges, want 10", len(out.Edges))
	}
}

// TestComposeStable: composing twice gives identical output, so a recompose
// with an unchanged BOM changes nothing.
func TestComposeStable(t *testing.T) {
	t.Parallel()
	root, _, raw := bomFixture(t, "resource-classicbom.json")
	a, b := composeBOM(t, root, raw), composeBOM(t, root, raw)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two composes of the same BOM differ:\n%s\n%s", mustJSON(t, a), mustJSON(t, b))
	}
}

// TestComposeRemoveTeam: removing one team removes exactly that team's
// account, vpc and route (and their edges); every other child keeps its
// name, labels and spec.
func TestComposeRemoveTeam(t *testing.T) {
	t.Parallel()
	root, spec, raw := bomFixture(t, "resource-classicbom.json")
	before := composeBOM(t, root, raw)
	for di, d := range spec.Domains {
		for ti, team := range d.Teams {
			t.Run(d.Name+"/"+team, func(t *testing.T) {
				t.Parallel()
				smaller := BOMSpec{Domains: slices.Clone(spec.Domains)}
				smaller.Domains[di].Teams = slices.Delete(slices.Clone(d.Teams), ti, ti+1)
				after := composeBOM(t, root, mustJSON(t, smaller))
				gone := root + "-" + d.Name + "-" + team
				wantRemoved := []string{"account/" + gone, "vpc/" + gone}
				if d.networked() {
					wantRemoved = append(wantRemoved, "route/"+gone)
				}
				removed, added := diffChildren(t, before, after)
				slices.Sort(wantRemoved)
				if !slices.Equal(removed, wantRemoved) || len(added) != 0 {
					t.Errorf("removed %v and added %v, want removed %v only", removed, added, wantRemoved)
				}
				for _, e := range after.Edges {
					if e.Dependent.Name == gone || e.Dependency.Name == gone {
						t.Errorf("edge %v → %v still names the removed team", e.Dependent, e.Dependency)
					}
				}
				wantEdges := 1 // vpc → account
				if d.networked() {
					wantEdges += 2 // route → vpc, route → tgw
				}
				if len(before.Edges)-len(after.Edges) != wantEdges {
					t.Errorf("edges went from %d to %d, want %d fewer", len(before.Edges), len(after.Edges), wantEdges)
				}
			})
		}
	}
}

// TestComposeUpdatedBOM: the updated fixture is the small one with
// payments/fraud removed and payments/refunds added, the recompose the
// README demonstrates.
func TestComposeUpdatedBOM(t *testing.T) {
	t.Parallel()
	root, _, small := bomFixture(t, "resource-classicbom.json")
	uroot, _, updated := bomFixture(t, "resource-classicbom-updated.json")
	if root != uroot {
		t.Fatalf("the small BOM is %q and the updated one %q: want the same root", root, uroot)
	}
	removed, added := diffChildren(t, composeBOM(t, root, small), composeBOM(t, root, updated))
	wantRemoved := []string{"account/classic-payments-fraud", "route/classic-payments-fraud", "vpc/classic-payments-fraud"}
	wantAdded := []string{"account/classic-payments-refunds", "route/classic-payments-refunds", "vpc/classic-payments-refunds"}
	if !slices.Equal(removed, wantRemoved) || !slices.Equal(added, wantAdded) {
		t.Errorf("small → updated removed %v and added %v, want %v and %v", removed, added, wantRemoved, wantAdded)
	}
}

// diffChildren returns the sorted kind/name of the children only in a and
// only in b, and fails the test if a child in both differs.
func diffChildren(t *testing.T, a, b webhooksdk.Outcome) (removed, added []string) {
	t.Helper()
	am, bm := childrenByKey(t, a), childrenByKey(t, b)
	for k, c := range am {
		d, ok := bm[k]
		if !ok {
			removed = append(removed, k)
			continue
		}
		if !reflect.DeepEqual(c, d) {
			t.Errorf("child %s changed: %+v → %+v", k, c, d)
		}
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			added = append(added, k)
		}
	}
	slices.Sort(removed)
	slices.Sort(added)
	return removed, added
}

func TestComposeEmptyBOM(t *testing.T) {
	t.Parallel()
	out := composeBOM(t, "empty", json.RawMessage(`{"domains": []}`))
	if len(out.Children) != 0 || len(out.Edges) != 0 {
		t.Errorf("an empty BOM composed %d children and %d edges", len(out.Children), len(out.Edges))
	}
	if got := string(out.Status); got != `{"children":0,"domains":0,"teams":0}` {
		t.Errorf("status = %s", got)
	}
}

func TestBOMBadSpecIsTerminal(t *testing.T) {
	t.Parallel()
	for _, reaction := range []string{"compose", "rollup"} {
		for _, spec := range []string{`{"domains": 3}`, `[]`, `not json`, `{"domains": [{"name": 1}]}`} {
			_, err := (&bom{}).Work(t.Context(), bomRequest("r", json.RawMessage(spec), reaction))
			if !webhooksdk.IsTerminal(err) {
				t.Errorf("%s with spec %s: err = %v, want a terminal error", reaction, spec, err)
			} else if !strings.Contains(err.Error(), "decode classicbom spec") {
				t.Errorf("%s with spec %s: err = %q, want it to say it could not decode the spec", reaction, spec, err)
			}
		}
	}
}

func TestBOMUnknownReaction(t *testing.T) {
	t.Parallel()
	_, err := (&bom{}).Work(t.Context(), bomRequest("r", json.RawMessage(`{}`), "explode"))
	var term *webhooksdk.TerminalError
	if !errors.As(err, &term) || !strings.Contains(err.Error(), `"explode"`) {
		t.Errorf("unknown reaction: err = %v, want a terminal error naming it", err)
	}
}

// TestBOMNeverFaulted: the composer ignores the fault rate, so the graph
// always builds.
func TestBOMNeverFaulted(t *testing.T) {
	t.Parallel()
	b := &bom{o: Options{FaultRate: 1}}
	for i := range 20 {
		if _, err := b.Work(t.Context(), bomRequest("r", json.RawMessage(`{"domains":[{"name":"d","teams":["t"]}]}`), "compose")); err != nil {
			t.Fatalf("compose %d with FaultRate 1: %v", i, err)
		}
	}
}

func TestBOMProvider(t *testing.T) {
	t.Parallel()
	b := &bom{}
	if got := b.Kind(); got != (webhooksdk.KindVersion{Kind: "classicbom", Version: 1}) {
		t.Errorf("Kind() = %v", got)
	}
}

func descendants(spec map[string][]string) []webhooksdk.Resource {
	var out []webhooksdk.Resource
	for _, kind := range slices.Sorted(maps.Keys(spec)) {
		for i, phase := range spec[kind] {
			out = append(out, webhooksdk.Resource{Kind: kind, KindVersion: 1, Name: fmt.Sprintf("%s-%02d", kind, i), Phase: phase})
		}
	}
	return out
}

type rollupStatus struct {
	Domains  int              `json:"domains"`
	Teams    int              `json:"teams"`
	Children int              `json:"children"`
	Ready    int              `json:"ready"`
	Total    int              `json:"total"`
	ByKind   map[string]tally `json:"by_kind"`
	NotReady []string         `json:"not_ready"`
}

func runRollup(t *testing.T, spec string, desc []webhooksdk.Resource) (rollupStatus, webhooksdk.Outcome) {
	t.Helper()
	req := bomRequest("classic", json.RawMessage(spec), "rollup")
	req.Trigger = webhooksdk.TriggerChildrenSettled
	req.Descendants = desc
	out, err := sdktest.Run(t, &bom{}, req)
	if err != nil {
		t.Fatalf("rollup: %v", err)
	}
	var st rollupStatus
	dec := json.NewDecoder(strings.NewReader(string(out.Status)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("rollup status %s: %v", out.Status, err)
	}
	return st, out
}

func TestRollup(t *testing.T) {
	t.Parallel()
	const spec = `{"domains": [{"name": "a", "teams": ["x", "y"]}, {"name": "b", "networking": false, "teams": ["z"]}]}`
	r, nr := "Ready", "Reconciling"
	for _, tc := range []struct {
		name    string
		desc    map[string][]string
		byKind  map[string]tally
		ready   int
		message string // empty: Ready True
	}{
		{name: "all ready",
			desc:   map[string][]string{"account": {r, r, r, r}, "vpc": {r, r, r}, "tgw": {r}, "route": {r, r}},
			byKind: map[string]tally{"account": {4, 4}, "vpc": {3, 3}, "tgw": {1, 1}, "route": {2, 2}},
			ready:  10},
		{name: "some not ready",
			desc:    map[string][]string{"account": {r, "Failed", r, r}, "vpc": {r, nr, "Degraded"}, "tgw": {r}, "route": {"Deleting", r}},
			byKind:  map[string]tally{"account": {3, 4}, "vpc": {1, 3}, "tgw": {1, 1}, "route": {1, 2}},
			ready:   6,
			message: "6 of 10 children ready"},
		// One short of all: the boundary between True and False.
		{name: "one not ready",
			desc:    map[string][]string{"account": {r, r}, "vpc": {r, "Orphaned"}},
			byKind:  map[string]tally{"account": {2, 2}, "vpc": {1, 2}},
			ready:   3,
			message: "3 of 4 children ready"},
		{name: "none ready",
			desc:    map[string][]string{"vpc": {nr, nr}},
			byKind:  map[string]tally{"vpc": {0, 2}},
			message: "0 of 2 children ready"},
		{name: "no descendants", desc: nil, byKind: map[string]tally{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			desc := descendants(tc.desc)
			st, out := runRollup(t, spec, desc)
			if st.Domains != 2 || st.Teams != 3 {
				t.Errorf("domains, teams = %d, %d; want 2, 3 from the spec", st.Domains, st.Teams)
			}
			if st.Children != len(desc) || st.Total != len(desc) || st.Ready != tc.ready {
				t.Errorf("children %d, total %d, ready %d; want %d, %d, %d", st.Children, st.Total, st.Ready, len(desc), len(desc), tc.ready)
			}
			if !maps.Equal(st.ByKind, tc.byKind) {
				t.Errorf("by_kind = %v, want %v", st.ByKind, tc.byKind)
			}
			var wantNotReady []string
			for _, d := range desc {
				if d.Phase != "Ready" {
					wantNotReady = append(wantNotReady, d.Kind+"/"+d.Name+" is "+d.Phase)
				}
			}
			slices.Sort(wantNotReady)
			if !slices.Equal(st.NotReady, wantNotReady) {
				t.Errorf("not_ready = %q, want %q", st.NotReady, wantNotReady)
			}
			want := webhooksdk.Condition{Type: "Ready", Status: "True", Reason: "AllChildrenReady"}
			if tc.message != "" {
				want = webhooksdk.Condition{Type: "Ready", Status: "False", Reason: "ChildrenNotReady", Message: tc.message}
			}
			if !slices.Equal(out.Conditions, []webhooksdk.Condition{want}) {
				t.Errorf("conditions = %+v, want %+v", out.Conditions, want)
			}
			if len(out.Children) != 0 || len(out.Edges) != 0 {
				t.Error("rollup emitted children or edges")
			}
		})
	}
}

// TestRollupNotReadyBounded: the large BOM has thousands of children, so the
// not_ready list is capped at maxNotReady entries, sorted, each a real
// not-ready descendant.
func TestRollupNotReadyBounded(t *testing.T) {
	t.Parallel()
	phases := make([]string, 500)
	for i := range phases {
		phases[i] = []string{"Reconciling", "Ready", "Failed", "Degraded"}[i%4]
	}
	desc := descendants(map[string][]string{"vpc": phases, "account": phases})
	// Reverse, so an unsorted list cannot pass as sorted by input order.
	slices.Reverse(desc)
	notReady := map[string]bool{}
	for _, d := range desc {
		if d.Phase != "Ready" {
			notReady[d.Kind+"/"+d.Name+" is "+d.Phase] = true
		}
	}
	st, out := runRollup(t, `{"domains": []}`, desc)
	if len(st.NotReady) != maxNotReady || maxNotReady != 10 {
		t.Errorf("not_ready has %d entries, want 10", len(st.NotReady))
	}
	if !slices.IsSorted(st.NotReady) {
		t.Errorf("not_ready is not sorted: %q", st.NotReady)
	}
	for _, e := range st.NotReady {
		if !notReady[e] {
			t.Errorf("not_ready entry %q is not a not-ready descendant", e)
		}
	}
	if st.Ready != 250 || st.Total != 1000 {
		t.Errorf("ready %d of %d, want 250 of 1000", st.Ready, st.Total)
	}
	if c := out.Conditions; len(c) != 1 || c[0].Status != "False" || c[0].Message != "250 of 1000 children ready" {
		t.Errorf("conditions = %+v, want Ready False with 250 of 1000 children ready", c)
	}
}
