package api_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

func TestTopology(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("noop", noopKind).wantApply(t, "created")
	var root resource
	b.apply(`{"kind":"noop","kind_version":1,"name":"root"}`).wantApply(t, "created").decode(t, &root)
	for _, name := range []string{"a", "b", "c"} {
		b.apply(`{"kind":"noop","kind_version":1,"name":"`+name+`"}`).wantApply(t, "created")
	}
	var a resource
	b.do(http.MethodGet, "/api/v1/resources/noop/a", nil).want(t, http.StatusOK).decode(t, &a)
	// a and b are the root's children, c is a's; b depends on a, c on b.
	b.exec(`UPDATE resources SET owner_id = $1 WHERE name IN ('a', 'b')`, root.ID)
	b.exec(`UPDATE resources SET owner_id = $1 WHERE name = 'c'`, a.ID)
	b.exec(`INSERT INTO resource_deps (dependent_id, dependency_id)
		SELECT x.id, y.id FROM resources x, resources y WHERE (x.name, y.name) IN (('b', 'a'), ('c', 'b'))`)

	var topo api.Topology
	b.do(http.MethodGet, "/api/v1/resources/noop/root/topology", nil).want(t, http.StatusOK).decode(t, &topo)
	index := map[string]int{}
	for i, n := range topo.Nodes {
		index[n.Name] = i
		if n.Kind != "noop" || n.Phase == "" {
			t.Errorf("node %d: %+v", i, n)
		}
	}
	if len(topo.Nodes) != 4 || topo.Nodes[0].Name != "root" || topo.Nodes[0].Owner != -1 {
		t.Fatalf("nodes %+v, want the root first and its three descendants", topo.Nodes)
	}
	for child, owner := range map[string]string{"a": "root", "b": "root", "c": "a"} {
		if got := topo.Nodes[index[child]].Owner; got != index[owner] {
			t.Errorf("%s's owner is node %d, want %d (%s)", child, got, index[owner], owner)
		}
	}
	want := [][2]int{{index["b"], index["a"]}, {index["c"], index["b"]}}
	slices.SortFunc(topo.Edges, func(x, y [2]int) int { return x[0] - y[0] })
	slices.SortFunc(want, func(x, y [2]int) int { return x[0] - y[0] })
	if !slices.Equal(topo.Edges, want) {
		t.Errorf("edges %v, want %v", topo.Edges, want)
	}

	// A leaf's topology is itself; an unknown resource is a 404 problem.
	b.do(http.MethodGet, "/api/v1/resources/noop/c/topology", nil).want(t, http.StatusOK).decode(t, &topo)
	if len(topo.Nodes) != 1 || topo.Nodes[0].Owner != -1 || len(topo.Edges) != 0 || topo.Edges == nil {
		t.Errorf("a leaf's topology: %+v", topo)
	}
	b.do(http.MethodGet, "/api/v1/resources/noop/nope/topology", nil).wantProblem(t, http.StatusNotFound, "")
}
