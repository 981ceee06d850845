package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// Children returns the resources a composite owns directly.
func (s *Store) Children(ctx context.Context, ownerID string) ([]model.Resource, error) {
	rows, err := s.reader(ctx).Query(ctx, `SELECT `+resourceCols+` FROM resources r WHERE r.owner_id = $1 ORDER BY r.kind, r.name`, ownerID)
	if err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) })
	if err != nil {
		return nil, fmt.Errorf("children: %w", err)
	}
	return out, nil
}

// DepEdge is one dependency edge with both ends named and their phases.
type DepEdge struct {
	Dependent       webhooksdk.Ref         `json:"dependent"`
	DependentPhase  string                 `json:"dependent_phase"`
	Dependency      webhooksdk.Ref         `json:"dependency"`
	DependencyPhase string                 `json:"dependency_phase"`
	Values          []webhooksdk.ValueFlow `json:"values,omitempty"`
}

const edgeSelect = `SELECT a.kind, a.name, a.phase, b.kind, b.name, b.phase, d.value_flows
	  FROM resource_deps d
	  JOIN resources a ON a.id = d.dependent_id
	  JOIN resources b ON b.id = d.dependency_id `

// collectEdges reads edgeSelect rows. A DepEdge nests two model.Refs, which
// RowToStructByName cannot fill, so its rows are scanned by position.
func collectEdges(rows pgx.Rows) ([]DepEdge, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (DepEdge, error) {
		var (
			e  DepEdge
			vf []byte
		)
		err := r.Scan(&e.Dependent.Kind, &e.Dependent.Name, &e.DependentPhase,
			&e.Dependency.Kind, &e.Dependency.Name, &e.DependencyPhase, &vf)
		if err == nil {
			err = json.Unmarshal(vf, &e.Values)
		}
		return e, err
	})
}

// Dependencies returns the edges on which the resource depends (upstream)
// and those that depend on it (downstream).
func (s *Store) Dependencies(ctx context.Context, id string) (upstream, downstream []DepEdge, err error) {
	rows, err := s.reader(ctx).Query(ctx, edgeSelect+`WHERE d.dependent_id = $1 ORDER BY b.kind, b.name`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("dependencies: %w", err)
	}
	if upstream, err = collectEdges(rows); err != nil {
		return nil, nil, fmt.Errorf("dependencies: %w", err)
	}
	rows, err = s.reader(ctx).Query(ctx, edgeSelect+`WHERE d.dependency_id = $1 ORDER BY a.kind, a.name`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("dependents: %w", err)
	}
	if downstream, err = collectEdges(rows); err != nil {
		return nil, nil, fmt.Errorf("dependents: %w", err)
	}
	return upstream, downstream, nil
}

// Graph is a composite's whole owned subtree and the edges among it.
type Graph struct {
	Nodes []model.Resource `json:"nodes"`
	Edges []DepEdge        `json:"edges"`
}

// GraphLimit bounds a graph read.
const GraphLimit = 10000

// Graph returns the subtree rooted at id (the root included) and every edge
// whose ends both lie in it; at most GraphLimit nodes.
func (s *Store) Graph(ctx context.Context, id string) (Graph, error) {
	const tree = `WITH RECURSIVE t(id, depth) AS (
			SELECT id, 0 FROM resources WHERE id = $1
			UNION ALL
			SELECT r.id, t.depth + 1 FROM resources r JOIN t ON r.owner_id = t.id WHERE t.depth < 64)`
	rows, err := s.reader(ctx).Query(ctx, tree+` SELECT `+resourceCols+` FROM resources r JOIN t ON t.id = r.id
		ORDER BY t.depth, r.kind, r.name LIMIT $2`, id, GraphLimit)
	if err != nil {
		return Graph{}, fmt.Errorf("graph: %w", err)
	}
	var g Graph
	if g.Nodes, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Resource, error) { return scanResource(r) }); err != nil {
		return Graph{}, fmt.Errorf("graph: %w", err)
	}
	rows, err = s.reader(ctx).Query(ctx, tree+` `+edgeSelect+`
		WHERE d.dependent_id IN (SELECT id FROM t) AND d.dependency_id IN (SELECT id FROM t)
		ORDER BY a.kind, a.name, b.kind, b.name`, id)
	if err != nil {
		return Graph{}, fmt.Errorf("graph edges: %w", err)
	}
	if g.Edges, err = collectEdges(rows); err != nil {
		return Graph{}, fmt.Errorf("graph edges: %w", err)
	}
	return g, nil
}
