package stdcel

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// graph4 is four resources: app reads vpc's and db's status (edges with value flows),
// monitor reads app's spec (inlined, no edge) and exists only when monitoring is on,
// db is ready only once it reports an endpoint.
const graph4 = `{"resources": [
  {"id": "monitor", "includeWhen": ["${schema.spec.monitoring}"],
   "template": {"kind": "mon", "kind_version": 1, "name": "${app.metadata.name}-mon",
     "spec": {"target": "${app.spec.label}", "port": 9090}}},
  {"id": "app", "template": {"kind": "app", "kind_version": 2, "name": "${schema.metadata.name}-app",
     "labels": {"team": "${schema.spec.team}"},
     "spec": {"vpc": "${vpc.status.vpc_id}", "db": {"host": "${db.status.endpoint}"},
       "cidr": "${vpc.spec.cidr}", "replicas": "${schema.spec.replicas}", "label": "app-${schema.spec.replicas}"}}},
  {"id": "vpc", "template": {"kind": "vpc", "kind_version": 1, "name": "${schema.metadata.name}-vpc",
     "spec": {"cidr": "${schema.spec.cidr}"}}},
  {"id": "db", "readyWhen": ["${db.status.endpoint != ''}"],
   "template": {"kind": "db", "kind_version": 1, "name": "${schema.metadata.name}-db",
     "spec": {"vpc_id": "${vpc.status.vpc_id}", "size_gb": "${schema.spec.replicas * 10}"}}}
]}`

func request(reaction, config, spec string) webhooksdk.Request {
	env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "stdcel", Version: 1})
	req := webhooksdk.NewRequest(&env)
	req.Reaction = reaction
	req.Resource.Name = "shop"
	req.Resource.Spec = json.RawMessage(spec)
	req.Config = json.RawMessage(config)
	return req
}

const spec4 = `{"cidr": "10.0.0.0/16", "replicas": 3, "team": "blue", "monitoring": true}`

func TestComposeInfersEdgesAndValueFlows(t *testing.T) {
	out, err := sdktest.Run(t, New("stdcel"), request("compose", graph4, spec4))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, c := range out.Children {
		got[fmt.Sprintf("%s/v%d %s", c.Kind, c.KindVersion, c.Name)] = string(c.Spec)
		order = append(order, c.Kind)
		if c.Kind == "app" && c.Labels["team"] != "blue" {
			t.Errorf("app labels = %v, want team=blue", c.Labels)
		}
	}
	want := map[string]string{
		"vpc/v1 shop-vpc":     `{"cidr":"10.0.0.0/16"}`,
		"db/v1 shop-db":       `{"size_gb":30}`,
		"app/v2 shop-app":     `{"cidr":"10.0.0.0/16","db":{},"label":"app-3","replicas":3}`,
		"mon/v1 shop-app-mon": `{"port":9090,"target":"app-3"}`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("children (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"vpc", "db", "app", "mon"}, order); d != "" {
		t.Errorf("children not in dependency order (-want +got):\n%s", d)
	}
	wantEdges := []webhooksdk.Edge{
		{Dependent: webhooksdk.Ref{Kind: "db", Name: "shop-db"}, Dependency: webhooksdk.Ref{Kind: "vpc", Name: "shop-vpc"},
			Values: []webhooksdk.ValueFlow{{DependentField: "/vpc_id", SourceField: "/vpc_id"}}},
		{Dependent: webhooksdk.Ref{Kind: "app", Name: "shop-app"}, Dependency: webhooksdk.Ref{Kind: "db", Name: "shop-db"},
			Values: []webhooksdk.ValueFlow{{DependentField: "/db/host", SourceField: "/endpoint"}}},
		{Dependent: webhooksdk.Ref{Kind: "app", Name: "shop-app"}, Dependency: webhooksdk.Ref{Kind: "vpc", Name: "shop-vpc"},
			Values: []webhooksdk.ValueFlow{{DependentField: "/vpc", SourceField: "/vpc_id"}}},
	}
	if d := cmp.Diff(wantEdges, out.Edges); d != "" {
		t.Errorf("edges (-want +got):\n%s", d)
	}
}

func TestIncludeWhen(t *testing.T) {
	for _, tc := range []struct {
		name, graph, spec string
		want              []string
	}{
		{"off", graph4, `{"cidr": "c", "replicas": 1, "team": "t", "monitoring": false}`, []string{"vpc", "db", "app"}},
		// Leaving app out leaves out monitor, which reads it.
		{"dependents follow", strings.Replace(graph4, `{"id": "app",`, `{"id": "app", "includeWhen": ["${schema.spec.replicas > 1}"],`, 1),
			`{"cidr": "c", "replicas": 1, "team": "t", "monitoring": true}`, []string{"vpc", "db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sdktest.Run(t, New("stdcel"), request("compose", tc.graph, tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, c := range out.Children {
				kinds = append(kinds, c.Kind)
			}
			if d := cmp.Diff(tc.want, kinds); d != "" {
				t.Errorf("children (-want +got):\n%s", d)
			}
		})
	}
}

func TestReadinessRollsUp(t *testing.T) {
	p := New("stdcel")
	settled := func(dbStatus string) []webhooksdk.Resource {
		return []webhooksdk.Resource{
			{Kind: "vpc", Name: "shop-vpc", Phase: "Ready", Spec: json.RawMessage(`{}`), Status: json.RawMessage(`{"vpc_id":"v-1"}`)},
			{Kind: "db", Name: "shop-db", Phase: "Ready", Spec: json.RawMessage(`{}`), Status: json.RawMessage(dbStatus)},
			{Kind: "app", Name: "shop-app", Phase: "Ready", Spec: json.RawMessage(`{}`)},
			{Kind: "mon", Name: "shop-app-mon", Phase: "Reconciling", Spec: json.RawMessage(`{}`)},
		}
	}
	for _, tc := range []struct {
		name, db, cond, msg string
		ready               int
	}{
		{"db without endpoint", `{"endpoint":""}`, "False", "db (${db.status.endpoint != ''} is false), monitor (phase Reconciling)", 2},
		{"db status not reported", `{}`, "False", "db (config.resources[3].readyWhen[0]", 2},
		{"db ready", `{"endpoint":"db:5432"}`, "False", "3 of 4 resources ready; not ready: monitor (phase Reconciling)", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := request("rollup", graph4, spec4)
			req.Descendants = settled(tc.db)
			out, err := sdktest.Run(t, p, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Conditions) != 1 || out.Conditions[0].Status != tc.cond || !strings.Contains(out.Conditions[0].Message, tc.msg) {
				t.Errorf("conditions = %+v, want Ready %s mentioning %q", out.Conditions, tc.cond, tc.msg)
			}
			var st rootStatus
			if err := json.Unmarshal(out.Status, &st); err != nil || st.Ready == nil || *st.Ready != tc.ready || st.Children != 4 {
				t.Errorf("status = %s, want %d of 4 ready", out.Status, tc.ready)
			}
		})
	}
	req := request("rollup", graph4, `{"cidr": "c", "replicas": 1, "team": "t", "monitoring": false}`)
	req.Descendants = settled(`{"endpoint":"db:5432"}`)[:3]
	out, err := sdktest.Run(t, p, req)
	if err != nil || len(out.Conditions) != 1 || out.Conditions[0].Status != "True" {
		t.Errorf("all ready: conditions = %+v, err %v; want Ready True", out.Conditions, err)
	}
}

// terminal runs config and spec through compose and returns the terminal error's text.
func terminal(t *testing.T, config, spec string) string {
	t.Helper()
	_, err := sdktest.Run(t, New("stdcel"), request("compose", config, spec))
	if err == nil || !webhooksdk.IsTerminal(err) {
		t.Fatalf("err = %v, want a terminal error", err)
	}
	return err.Error()
}

func res(id, spec string) string {
	return fmt.Sprintf(`{"id": %q, "template": {"kind": "k", "kind_version": 1, "name": "%s", "spec": %s}}`, id, id, spec)
}

func TestCycleRefused(t *testing.T) {
	for _, tc := range []struct{ name, config, want string }{
		{"three", `{"resources": [` + res("a", `{"x": "${b.status.x}"}`) + `,` + res("b", `{"x": "${c.spec.x}"}`) + `,` +
			res("c", `{"x": "${a.status.x}"}`) + `,` + res("d", `{}`) + `]}`, "cycle: a -> b -> c -> a"},
		{"self", `{"resources": [` + res("d", `{}`) + `,` + res("a", `{"x": "${a.status.x}"}`) + `]}`, "cycle: a -> a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := terminal(t, tc.config, `{}`); !strings.Contains(got, tc.want) {
				t.Errorf("error = %q, want %q", got, tc.want)
			}
			if err := Validate([]byte(tc.config)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	if err := Validate([]byte(graph4)); err != nil {
		t.Errorf("Validate(graph4) = %v", err)
	}
}

func TestCostBudget(t *testing.T) {
	xs := make([]int, 400)
	for i := range xs {
		xs[i] = i
	}
	spec, _ := json.Marshal(map[string]any{"xs": xs})
	pairs := `{"resources": [` + res("a", `{"sums": "${schema.spec.xs.map(x, schema.spec.xs.map(y, x + y))}"}`) + `]}`
	if got := terminal(t, pairs, string(spec)); !strings.Contains(got,
		"config.resources[0].template.spec.sums: ${schema.spec.xs.map(x, schema.spec.xs.map(y, x + y))}: over its cost budget of 100000") {
		t.Errorf("runtime: error = %q, want the expression named over its budget", got)
	}
	// Under a raised budget the same expression evaluates.
	raised := strings.Replace(pairs, `{"resources"`, `{"cost_limit": 10000000, "resources"`, 1)
	if _, err := sdktest.Run(t, New("stdcel"), request("compose", raised, string(spec))); err != nil {
		t.Errorf("raised budget: %v", err)
	}
	// A literal comprehension is refused at compile time, before any input.
	lit := `{"cost_limit": 100, "resources": [` + res("a", `{"n": "${[1,2,3,4,5,6,7,8,9].map(x, [1,2,3,4,5,6,7,8,9].map(y, x * y))}"}`) + `]}`
	if err := Validate([]byte(lit)); err == nil || !strings.Contains(err.Error(), "config.resources[0].template.spec.n") ||
		!strings.Contains(err.Error(), "over the budget of 100") {
		t.Errorf("compile time: Validate = %v, want the expression named over its budget", err)
	}
}

func TestBadConfigNamesTheField(t *testing.T) {
	ok := res("a", `{}`)
	for _, tc := range []struct{ config, want string }{
		{`{"resources": [` + ok + `, {"id": "b", "template": {"kind": "k", "name": "b"}}]}`, "config.resources[1].template.kind_version"},
		{`{"resources": [` + ok + `, {"id": "b", "template": {"kind_version": 1, "name": "b"}}]}`, "config.resources[1].template.kind: required"},
		{`{"resources": [` + ok + `,` + res("a", `{}`) + `]}`, `config.resources[1].id: "a" is already config.resources[0]'s`},
		{`{"resources": [` + ok + `,` + res("b", `{"x": {"y": ["${nope.spec.x}"]}}`) + `]}`, "config.resources[1].template.spec.x.y[0]: ${nope.spec.x}: ERROR"},
		{`{"resources": [` + ok + `,` + res("b", `{"x": "id-${a.status.id}"}`) + `]}`, "config.resources[1].template.spec.x: ${a.status.id}: reads a.status"},
		{`{"resources": [` + ok + `,` + res("b", `{"x": "${a.status.id + 'x'}"}`) + `]}`, "config.resources[1].template.spec.x: ${a.status.id + 'x'}: reads a.status in a computation"},
		{`{"resources": [` + ok + `, {"id": "b", "template": {"kind": "k", "kind_version": 1, "name": "${a.status.id}"}}]}`, "config.resources[1].template.name: ${a.status.id}: reads a.status outside"},
		{`{"resources": [` + ok + `,` + res("b", `{"x": "${schema.spec.x"}`) + `]}`, `config.resources[1].template.spec.x: unterminated "${"`},
		{`{"resources": [` + ok + `, {"id": "b", "includeWhen": ["${a.spec.on}"], "template": {"kind": "k", "kind_version": 1, "name": "b"}}]}`,
			"config.resources[1].includeWhen[0]: ${a.spec.on}: reads a; includeWhen may read only schema"},
		{`{"resources": [` + ok + `, {"id": "b", "readyWhen": ["${'x'}"], "template": {"kind": "k", "kind_version": 1, "name": "b"}}]}`,
			"config.resources[1].readyWhen[0]: ${'x'} is string, not a bool"},
		{`{"resources": [` + ok + `], "extra": 1}`, `config: json: unknown field "extra"`},
		{`{"cost_limit": 99999999999, "resources": [` + ok + `]}`, "config.cost_limit"},
	} {
		if got := terminal(t, tc.config, `{}`); !strings.Contains(got, tc.want) {
			t.Errorf("error = %q\nwant it to contain %q", got, tc.want)
		}
	}
	// Inputs that do not fit the expressions fail terminally, naming the expression.
	if got := terminal(t, graph4, `{"cidr": "c", "replicas": 1, "team": "t", "monitoring": "yes"}`); !strings.Contains(got,
		"config.resources[0].includeWhen[0]: ${schema.spec.monitoring} is yes, not a bool") {
		t.Errorf("non-bool includeWhen: error = %q", got)
	}
	if got := terminal(t, graph4, `{"cidr": "c"}`); !strings.Contains(got, "config.resources[") || !strings.Contains(got, "no such key") {
		t.Errorf("missing input: error = %q, want the expression and the missing key", got)
	}
}

func TestNoGraphIsTransient(t *testing.T) {
	_, err := sdktest.Run(t, New("stdcel"), request("compose", `{}`, `{}`))
	if err == nil || webhooksdk.IsTerminal(err) {
		t.Errorf("err = %v, want a transient error: the config may still be on its way", err)
	}
}

func TestManifest(t *testing.T) {
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
	p := New("stdcel")
	if m.Kind != p.Kind().Kind || m.KindVersion != p.Kind().Version || len(m.Reactions) != 2 ||
		m.Reactions[0].Name != "compose" || m.Reactions[1].Name != "rollup" {
		t.Errorf("manifest = %+v, want stdcel/1 with compose and rollup", m)
	}
}
