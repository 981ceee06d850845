package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/webhooksdk"
)

// ChildrenParams selects and pages Children.
type ChildrenParams struct {
	// OwnerID is the composite's id.
	OwnerID string
	// Fields says whether the items have their spec and status.
	Fields ResourceFields
	// MaxBytes ends a page early, as ListResourcesParams.MaxBytes does; a
	// page has no other limit.
	MaxBytes int
	// Cursor continues after the page that returned it.
	Cursor string
}

// Children pages through the resources a composite owns directly, by kind
// and name: as many as MaxBytes holds (see collectPage). An invalid cursor
// is an *InvalidError.
func (s *Store) Children(ctx context.Context, p ChildrenParams) (Page[model.Resource], error) {
	budget := pageBudget(p.MaxBytes)
	var (
		qa  queryArgs
		arg = qa.add
	)
	q := `SELECT ` + p.Fields.listCols() + ` FROM resources r WHERE r.owner_id = ` + arg(p.OwnerID)
	if p.Cursor != "" {
		after, err := base64.RawURLEncoding.DecodeString(p.Cursor)
		kind, name, ok := strings.Cut(string(after), "/")
		if err != nil || !ok {
			return Page[model.Resource]{}, &InvalidError{Location: "cursor", Message: "is not a cursor this server issued"}
		}
		q += ` AND (r.kind, r.name) > (` + arg(kind) + `, ` + arg(name) + `)`
	}
	rows, err := s.reader(ctx).Query(ctx, pageSQL(q, "kind, name", "ALL", arg(budget)), qa...)
	if err != nil {
		return Page[model.Resource]{}, fmt.Errorf("children: %w", err)
	}
	items, more, err := collectPage(rows, budget, scanListed)
	if err != nil {
		return Page[model.Resource]{}, fmt.Errorf("children: %w", err)
	}
	page := Page[model.Resource]{Items: items}
	if more {
		last := items[len(items)-1]
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(last.Kind + "/" + last.Name))
	}
	if page.Items == nil {
		page.Items = []model.Resource{}
	}
	return page, nil
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
	nodes, err := pgrun.Collect(ctx, s.reader(ctx), scanResourceView, tree+` SELECT `+resourceViewCols+` FROM resources r
		JOIN t ON t.id = r.id ORDER BY t.depth, r.kind, r.name LIMIT $2`, id, GraphLimit)
	if err != nil {
		return Graph{}, fmt.Errorf("graph: %w", err)
	}
	g := Graph{Nodes: nodes}
	rows, err := s.reader(ctx).Query(ctx, tree+` `+edgeSelect+`
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
