package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// Dependencies is the body of GET /resources/{kind}/{name}/dependencies.
type Dependencies struct {
	// Upstream are the edges this resource waits on (and takes values from).
	Upstream []store.DepEdge `json:"upstream"`
	// Downstream are the edges of resources that wait on this one.
	Downstream []store.DepEdge `json:"downstream"`
}

// EventList is the body of GET /resources/{kind}/{name}/events.
type EventList struct {
	Items []store.Event `json:"items"`
	// NextBefore continues the listing into older events; absent at the end.
	NextBefore int64 `json:"next_before,omitempty" doc:"Pass as ?before= for older events; absent when there are none."`
}

// ChildList is one page of GET /resources/{kind}/{name}/children.
type ChildList struct {
	Items []ListedResource `json:"items"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for the next page; absent on the last page. A page ends when the next child would take it past the server's byte budget (LIST_PAGE_BYTES)."`
}

type childrenInput struct {
	ResourcePath
	Fields string `query:"fields" doc:"Leave large fields out of the items, comma-separated: -spec, -status or both." example:"-spec,-status"`
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page."`
}

type eventsInput struct {
	ResourcePath
	Before int64 `query:"before" minimum:"0" doc:"Only events older than this id."`
	Limit  int   `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
}

// Accepted is the body of an accepted asynchronous request.
type Accepted struct {
	Message string `json:"message"`
}

func (s *Server) registerEngine() {
	register(s, huma.Operation{
		OperationID: "reconcile-resource", Method: http.MethodPost, Path: "/resources/{kind}/{name}/reconcile", Tags: []string{"Resources"},
		Summary: "Reconcile a resource now",
		Description: "Runs the resource's reaction again: a queued task runs at once with its attempts reset, a terminal failure is " +
			"lifted and retried, a settled resource re-runs without a generation bump. On a resource being deleted it retries its " +
			"teardown (a terminal teardown failure too). 202; 409 if the resource is orphaned or quarantined.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{404, 409},
	}, nil, s.reconcileResource)
	register(s, huma.Operation{
		OperationID: "quarantine-resource", Method: http.MethodPost, Path: "/resources/{kind}/{name}/quarantine", Tags: []string{"Resources"},
		Summary: "Set a resource aside",
		Description: "Phase Quarantined: frozen from every scheduler and value flow (a pending reconcile is dropped; a delete task is " +
			"not), no longer holding up its root's rollup, never reaped. Spec edits persist but do not release it; only unquarantine " +
			"does. Repeating it is a no-op. 409 while the resource is being deleted.",
		Errors: []int{404, 409},
	}, nil, s.quarantineResource)
	register(s, huma.Operation{
		OperationID: "unquarantine-resource", Method: http.MethodPost, Path: "/resources/{kind}/{name}/unquarantine", Tags: []string{"Resources"},
		Summary:     "Release a quarantined resource",
		Description: "Clears the quarantine and schedules the resource again (it reconciles to its latest spec). A no-op on a resource that is not quarantined. 409 while it is being deleted.",
		Errors:      []int{404, 409},
	}, nil, s.unquarantineResource)
	register(s, huma.Operation{
		OperationID: "list-resource-events", Method: http.MethodGet, Path: "/resources/{kind}/{name}/events", Tags: []string{"Resources"},
		Summary:     "List a resource's events",
		Description: "Newest first: applied, claimed work succeeded or failed (with the reason), values substituted, reclaimed, composed ... bounded per resource.",
		Errors:      []int{404},
	}, nil, s.listEvents)
	register(s, huma.Operation{
		OperationID: "list-resource-children", Method: http.MethodGet, Path: "/resources/{kind}/{name}/children", Tags: []string{"Resources"},
		Summary: "List the resources a composite owns",
		Description: "By kind and name, as many as fit the server's byte budget (LIST_PAGE_BYTES) a page; " +
			"next_cursor continues. fields=-spec,-status leaves their large fields out.",
		Errors: []int{404},
	}, nil, s.listChildren)
	register(s, huma.Operation{
		OperationID: "get-resource-dependencies", Method: http.MethodGet, Path: "/resources/{kind}/{name}/dependencies", Tags: []string{"Resources"},
		Summary: "List a resource's dependency edges, both ways, with their value flows", Errors: []int{404},
	}, nil, s.getDependencies)
	register(s, huma.Operation{
		OperationID: "get-resource-graph", Method: http.MethodGet, Path: "/resources/{kind}/{name}/graph", Tags: []string{"Resources"},
		Summary:     "Get a composite's graph",
		Description: "The resource and its whole owned subtree (at most 10,000 nodes), with every dependency edge inside it.",
		Errors:      []int{404},
	}, nil, s.getGraph)
}

// resolve finds the id of the resource a path names, in the namespace its
// query names.
func (s *Server) resolve(ctx context.Context, in *ResourcePath) (string, error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return "", p
	}
	id, err := s.store.ResourceID(ctx, ns, in.Kind, in.Name)
	if err != nil {
		return "", s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return id, nil
}

func (s *Server) reconcileResource(ctx context.Context, in *ResourcePath) (*bodyOutput[Accepted], error) {
	id, err := s.resolve(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := s.store.ReconcileNow(ctx, id); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[Accepted]{Body: Accepted{Message: "reconcile requested"}}, nil
}

func (s *Server) quarantineResource(ctx context.Context, in *ResourcePath) (*bodyOutput[model.Resource], error) {
	return s.setQuarantine(ctx, in, true)
}

func (s *Server) unquarantineResource(ctx context.Context, in *ResourcePath) (*bodyOutput[model.Resource], error) {
	return s.setQuarantine(ctx, in, false)
}

func (s *Server) setQuarantine(ctx context.Context, in *ResourcePath, on bool) (*bodyOutput[model.Resource], error) {
	id, err := s.resolve(ctx, in)
	if err != nil {
		return nil, err
	}
	r, err := s.store.SetQuarantine(ctx, id, on)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[model.Resource]{Body: r}, nil
}

func (s *Server) listEvents(ctx context.Context, in *eventsInput) (*bodyOutput[EventList], error) {
	id, err := s.resolve(ctx, &in.ResourcePath)
	if err != nil {
		return nil, err
	}
	evs, err := s.store.Events(ctx, store.EventsParams{ResourceID: id, Before: in.Before, Limit: in.Limit})
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	out := EventList{Items: evs}
	if out.Items == nil {
		out.Items = []store.Event{}
	}
	if len(evs) == in.Limit {
		out.NextBefore = evs[len(evs)-1].ID
	}
	return &bodyOutput[EventList]{Body: out}, nil
}

func (s *Server) listChildren(ctx context.Context, in *childrenInput) (*pageOutput[ChildList], error) {
	fields, p := parseFields(in.Fields)
	if p != nil {
		return nil, p
	}
	id, err := s.resolve(ctx, &in.ResourcePath)
	if err != nil {
		return nil, err
	}
	page, err := s.store.Children(ctx, store.ChildrenParams{OwnerID: id, Fields: fields, MaxBytes: s.cfg.ListPageBytes, Cursor: in.Cursor})
	if err != nil {
		return nil, s.problemFor(ctx, err, pageProblem(in.Cursor))
	}
	return &pageOutput[ChildList]{NextCursor: page.NextCursor, Body: ChildList{Items: listed(page.Items), NextCursor: page.NextCursor}}, nil
}

func (s *Server) getDependencies(ctx context.Context, in *ResourcePath) (*bodyOutput[Dependencies], error) {
	id, err := s.resolve(ctx, in)
	if err != nil {
		return nil, err
	}
	up, down, err := s.store.Dependencies(ctx, id)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	d := Dependencies{Upstream: up, Downstream: down}
	if d.Upstream == nil {
		d.Upstream = []store.DepEdge{}
	}
	if d.Downstream == nil {
		d.Downstream = []store.DepEdge{}
	}
	return &bodyOutput[Dependencies]{Body: d}, nil
}

func (s *Server) getGraph(ctx context.Context, in *ResourcePath) (*bodyOutput[store.Graph], error) {
	id, err := s.resolve(ctx, in)
	if err != nil {
		return nil, err
	}
	g, err := s.store.Graph(ctx, id)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	if g.Edges == nil {
		g.Edges = []store.DepEdge{}
	}
	return &bodyOutput[store.Graph]{Body: g}, nil
}
