package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
)

// Topology is GET /resources/{kind}/{name}/topology: the shape of a root's
// graph and each node's phase, what a picture of it needs and no more. The
// console's graph page reads it on every change of a converging tree, so
// each node is its kind, name, phase and owner's index, not the resource
// the graph carries.
type Topology struct {
	Nodes []TopologyNode `json:"nodes" doc:"The root first, then its owned subtree by depth (as in the graph)."`
	Edges [][2]int       `json:"edges" doc:"The dependency edges inside the subtree as [dependent, dependency] indexes into nodes."`
}

// TopologyNode is one node of a Topology.
type TopologyNode struct {
	Kind  string      `json:"kind"`
	Name  string      `json:"name"`
	Phase model.Phase `json:"phase"`
	Owner int         `json:"owner" doc:"The index of its owner in nodes; -1 for the root."`
}

func (s *Server) registerTopology() {
	register(s, huma.Operation{
		OperationID: "get-resource-topology", Method: http.MethodGet, Path: "/resources/{kind}/{name}/topology", Tags: []string{"Resources"},
		Summary: "Get the shape of a composite's graph",
		Description: "The resource and its owned subtree (at most 10,000 nodes) as in GET …/graph, each node reduced to its kind, name, " +
			"phase and owner (an index), and the dependency edges inside it as pairs of indexes.",
		Errors: []int{404},
	}, nil, s.getTopology)
}

func (s *Server) getTopology(ctx context.Context, in *ResourcePath) (*bodyOutput[Topology], error) {
	id, err := s.resolve(ctx, in)
	if err != nil {
		return nil, err
	}
	g, err := s.store.Graph(ctx, id)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	t := Topology{Nodes: make([]TopologyNode, len(g.Nodes)), Edges: make([][2]int, 0, len(g.Edges))}
	byID := make(map[string]int, len(g.Nodes))
	byRef := make(map[[2]string]int, len(g.Nodes))
	for i, n := range g.Nodes {
		byID[n.ID] = i
		byRef[[2]string{n.Kind, n.Name}] = i
	}
	for i, n := range g.Nodes {
		owner, ok := byID[n.OwnerID]
		if !ok {
			owner = -1
		}
		t.Nodes[i] = TopologyNode{Kind: n.Kind, Name: n.Name, Phase: n.PhaseOf(), Owner: owner}
	}
	for _, e := range g.Edges {
		a, okA := byRef[[2]string{e.Dependent.Kind, e.Dependent.Name}]
		b, okB := byRef[[2]string{e.Dependency.Kind, e.Dependency.Name}]
		if okA && okB { // a subtree past the node limit has edges to nodes left out
			t.Edges = append(t.Edges, [2]int{a, b})
		}
	}
	return &bodyOutput[Topology]{Body: t}, nil
}
