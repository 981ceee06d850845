package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
)

// DeliveryList is one page of the delivery log: GET /deliveries and GET
// /endpoints/{name}/deliveries.
type DeliveryList struct {
	Items []store.Delivery `json:"items"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for the next (older) page; absent on the last page."`
}

// DeliveryQuery are the filters both delivery lists take (exported: huma
// reads the parameters of an embedded struct only when its type is).
type DeliveryQuery struct {
	Kind           string    `query:"kind" doc:"Only attempts for resources of this kind; with name, only this resource's (by the name it had then)."`
	Name           string    `query:"name" doc:"Needs kind: only this resource's attempts."`
	Classification string    `query:"classification" doc:"Only attempts so classified: ok, task_error, accepted, callback_ok, callback_error, or a failure class."`
	Failed         bool      `query:"failed" doc:"Only failures: every classification but ok, accepted and callback_ok."`
	Since          time.Time `query:"since" doc:"Only attempts at or after this RFC 3339 time."`
	Until          time.Time `query:"until" doc:"Only attempts before this RFC 3339 time; after since when both are given."`
	Limit          int       `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
	Cursor         string    `query:"cursor" doc:"The next_cursor of the previous page."`
}

func (q DeliveryQuery) filter(endpoint string) store.DeliveryFilter {
	return store.DeliveryFilter{Endpoint: endpoint, Kind: q.Kind, Name: q.Name, Classification: q.Classification,
		Failed: q.Failed, Since: q.Since, Until: q.Until, Limit: q.Limit, Cursor: q.Cursor}
}

// value echoes a filter's value in a problem.
func (q DeliveryQuery) value(f string) any {
	switch f {
	case "kind":
		return q.Kind
	case "name":
		return q.Name
	case "classification":
		return q.Classification
	case "cursor":
		return q.Cursor
	case "until":
		return q.Until
	}
	return nil
}

type listDeliveriesInput struct {
	NamespacesQuery
	Endpoint string `query:"endpoint" doc:"Only this endpoint's attempts."`
	DeliveryQuery
}

type endpointDeliveriesInput struct {
	Endpoint string `path:"name" doc:"The endpoint's name."`
	NamespaceQuery
	DeliveryQuery
}

type deliveryPath struct {
	ID int64 `path:"id" minimum:"1" doc:"The attempt's id."`
	NamespaceQuery
}

// ReplayAccepted is the body of POST /deliveries/{id}/replay.
type ReplayAccepted struct {
	Message string `json:"message"`
	store.Replay
}

// ClassificationNotSent is a dry-run test delivery's classification.
const ClassificationNotSent = "not_sent"

// EndpointTest is the round trip of a test delivery: POST
// /endpoints/{name}/test-delivery.
type EndpointTest struct {
	Endpoint   string    `json:"endpoint"`
	At         time.Time `json:"at" doc:"When the request was sent."`
	HTTPStatus int       `json:"http_status" doc:"The answer's status; 0 when none came (network error, timeout)."`
	LatencyMS  int       `json:"latency_ms" doc:"From sending to the answer, or to the failure."`
	// Classification names the outcome as the delivery log names an
	// attempt's.
	Classification string          `json:"classification" doc:"ok for a healthy answer (200 with a readable body), else rate_limited, redirect, client_error, server_error, too_large, malformed, timeout, blocked, gone or network; not_sent for a dry run (?dry_run=true), which sends nothing."`
	Ready          map[string]bool `json:"ready,omitempty" doc:"The readiness the endpoint reported, per kind/kind_version (classification ok)."`
	Excerpt        string          `json:"excerpt,omitempty" doc:"The answer body's first bytes (at most 200), or why no answer came."`
	Error          string          `json:"error,omitempty" doc:"Why the answer is not a healthy one; absent when classification is ok."`
}

func (s *Server) registerDeliveries() {
	register(s, huma.Operation{
		OperationID: "list-deliveries", Method: http.MethodGet, Path: "/deliveries", Tags: []string{"Deliveries"},
		Summary: "List delivery attempts",
		Description: "The delivery log, newest first with a keyset cursor: every attempt to deliver a task (success or failure, " +
			"one per task of a batch), every 202 and the callback that followed it. Filters: namespace (of the task's resource; * = every " +
			"namespace), endpoint, kind (with name: one resource), " +
			"classification, failed, and the window since..until.",
		Errors: []int{422},
	}, nil, s.listDeliveries)
	register(s, huma.Operation{
		OperationID: "get-delivery", Method: http.MethodGet, Path: "/deliveries/{id}", Tags: []string{"Deliveries"},
		Summary: "Get one delivery attempt", Errors: []int{404, 422},
	}, nil, s.getDelivery)
	register(s, huma.Operation{
		OperationID: "replay-delivery", Method: http.MethodPost, Path: "/deliveries/{id}/replay", Tags: []string{"Deliveries"},
		Summary: "Run a delivery's task again",
		Description: "Schedules the attempt's task anew through the engine (202): a reconcile or delete task as POST …/reconcile does, " +
			"an operation as a new operation of the same verb and input. The provider is asked again under a new claim epoch; " +
			"the stored outcome is never re-applied. Logs \"replayed delivery N\" in the resource's events. 404 unknown id; " +
			"409 when the resource is gone, quarantined or orphaned, being deleted (for a reconcile), or the attempt was a reactor delivery.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{404, 409, 422},
	}, nil, s.replayDelivery)
	register(s, huma.Operation{
		OperationID: "list-endpoint-deliveries", Method: http.MethodGet, Path: "/endpoints/{name}/deliveries", Tags: []string{"Endpoints"},
		Summary:     "List an endpoint's delivery attempts",
		Description: "Every attempt delivered to the endpoint (of the namespace ?namespace= names), for the resources of every namespace it serves; 404 for an unknown endpoint.",
		Errors:      []int{404, 422},
	}, nil, s.listEndpointDeliveries)
	register(s, huma.Operation{
		OperationID: "test-endpoint-delivery", Method: http.MethodPost, Path: "/endpoints/{name}/test-delivery", Tags: []string{"Endpoints"},
		Summary: "Send an endpoint a test delivery",
		Description: "Sends the endpoint, now, the signed health request of docs/protocol.md §10 ({\"type\":\"health\"} to its health " +
			"target), which every SDK answers without doing any work, and returns the round trip: status, latency, classification, " +
			"the readiness reported, an excerpt of the answer. It proves the URL, the network path and the signing secret. It is a look: " +
			"it moves neither the endpoint's readiness nor its circuit breaker, works on a disabled endpoint, and is not recorded in " +
			"the delivery log. A failed round trip is still 200, its classification saying why. 404 unknown endpoint; 409 when the " +
			"endpoint has no health target (health type none); 503 when this server runs no dispatcher (role control).",
		Errors: []int{404, 409, 503},
	}, nil, s.testEndpointDelivery)
}

func (s *Server) testEndpointDelivery(ctx context.Context, in *NamespacedName) (*bodyOutput[EndpointTest], error) {
	if _, p := s.endpointIn(ctx, in); p != nil {
		return nil, p
	}
	test := s.cfg.Endpoints.Test
	if test == nil {
		return nil, newProblem(http.StatusServiceUnavailable, typeUnavailable,
			"this server runs no dispatcher (role control): send the test delivery through a server of role all")
	}
	if store.IsDryRun(ctx) {
		// The route's one effect is the request it sends, which no
		// rollback could take back: a dry run checks and sends nothing.
		return &bodyOutput[EndpointTest]{Body: EndpointTest{Endpoint: in.Name, At: time.Now(),
			Classification: ClassificationNotSent, Error: "dry run: nothing was sent"}}, nil
	}
	res, err := test(ctx, in.Name)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[EndpointTest]{Body: res}, nil
}

func (s *Server) listDeliveries(ctx context.Context, in *listDeliveriesInput) (*pageOutput[DeliveryList], error) {
	ns, p := s.namespaces(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	f := in.filter(in.Endpoint)
	f.Namespace = ns
	return s.deliveries(ctx, f, in.DeliveryQuery)
}

func (s *Server) listEndpointDeliveries(ctx context.Context, in *endpointDeliveriesInput) (*pageOutput[DeliveryList], error) {
	if _, p := s.endpointIn(ctx, &NamespacedName{Name: in.Endpoint, NamespaceQuery: in.NamespaceQuery}); p != nil {
		return nil, p
	}
	f := in.filter(in.Endpoint)
	f.Namespace = store.AllNamespaces // the endpoint's whole log
	return s.deliveries(ctx, f, in.DeliveryQuery)
}

func (s *Server) deliveries(ctx context.Context, f store.DeliveryFilter, q DeliveryQuery) (*pageOutput[DeliveryList], error) {
	page, err := s.store.ListDeliveries(ctx, f)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query", value: q.value})
	}
	return &pageOutput[DeliveryList]{NextCursor: page.NextCursor, Body: DeliveryList{Items: page.Items, NextCursor: page.NextCursor}}, nil
}

// deliveryIn reads the attempt in.ID of the namespace the query names; one
// for a resource of another namespace is not found.
func (s *Server) deliveryIn(ctx context.Context, in *deliveryPath) (store.Delivery, *Problem) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return store.Delivery{}, p
	}
	d, err := s.store.GetDelivery(ctx, in.ID)
	if err == nil && d.Resource.Namespace != ns {
		err = &store.NotFoundError{Message: fmt.Sprintf("delivery %d does not exist in namespace %q", in.ID, ns)}
	}
	if err != nil {
		return store.Delivery{}, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return d, nil
}

func (s *Server) getDelivery(ctx context.Context, in *deliveryPath) (*bodyOutput[store.Delivery], error) {
	d, p := s.deliveryIn(ctx, in)
	if p != nil {
		return nil, p
	}
	return &bodyOutput[store.Delivery]{Body: d}, nil
}

func (s *Server) replayDelivery(ctx context.Context, in *deliveryPath) (*bodyOutput[ReplayAccepted], error) {
	if _, p := s.deliveryIn(ctx, in); p != nil {
		return nil, p
	}
	rep, err := s.store.ReplayDelivery(ctx, in.ID)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	msg := "replay requested: the task runs again under a new claim"
	if rep.Operation != nil {
		msg = "replay requested: operation " + rep.Operation.ID + " runs the verb again"
	}
	return &bodyOutput[ReplayAccepted]{Body: ReplayAccepted{Message: msg, Replay: rep}}, nil
}
