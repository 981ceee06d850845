package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
)

// Namespaces (docs/api.md "Namespaces"). Resources, provider configs,
// reactor bindings and endpoints belong to one; every operation on them
// takes ?namespace= (omitted: default), and a list, the delivery log and
// the event stream also take ?namespace=* for every namespace.

// queryNamespace is the location of the namespace parameter in problems.
const queryNamespace = "query.namespace"

// NamespaceQuery is the namespace parameter of an operation on one
// namespaced object (or on the objects a body declares). Exported, as every
// struct an input embeds: huma reads the parameters of exported ones only.
type NamespaceQuery struct {
	Namespace string `query:"namespace" doc:"The namespace of the object; omitted = default. A body that names a namespace must name this one." example:"default"`
}

// NamespacesQuery is the namespace parameter of a list.
type NamespacesQuery struct {
	Namespace string `query:"namespace" doc:"Only this namespace's objects; * = every namespace's; omitted = default." example:"default"`
}

// namespace resolves the namespace parameter of an operation on one
// namespace: omitted is store.DefaultNamespace; a name that is not a
// namespace's is 422, an unknown namespace 404, both naming
// query.namespace. The default namespace always exists, so naming it (or
// nothing) costs no query.
func (s *Server) namespace(ctx context.Context, q string) (string, *Problem) {
	switch {
	case q == "" || q == store.DefaultNamespace:
		return store.DefaultNamespace, nil
	case q == store.AllNamespaces:
		return "", newProblem(http.StatusUnprocessableEntity, typeInvalid,
			queryNamespace+": * names every namespace, which only a list takes; name one namespace",
			ProblemError{Location: queryNamespace, Message: "* names every namespace, which only a list takes; name one namespace", Value: q})
	case !store.ValidNamespace(q):
		msg := "must be a namespace name: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
		return "", newProblem(http.StatusUnprocessableEntity, typeInvalid, queryNamespace+": "+msg,
			ProblemError{Location: queryNamespace, Message: msg, Value: q})
	}
	ok, err := s.store.NamespaceExists(ctx, q)
	if err != nil {
		return "", s.problemFor(ctx, err, problemOpts{})
	}
	if !ok {
		return "", namespaceNotFound(fmt.Sprintf("namespace %q does not exist", q), q)
	}
	return q, nil
}

// namespaces resolves the namespace parameter of a list: as namespace
// does, and * is store.AllNamespaces.
func (s *Server) namespaces(ctx context.Context, q string) (string, *Problem) {
	if q == store.AllNamespaces {
		return q, nil
	}
	return s.namespace(ctx, q)
}

// namespaceNotFound is the 404 of an unknown namespace, naming the query
// parameter that named it.
func namespaceNotFound(msg string, value any) *Problem {
	return newProblem(http.StatusNotFound, typeNotFound, msg, ProblemError{Location: queryNamespace, Message: msg, Value: value})
}

// bodyNamespace refuses a document whose namespace (at loc, e.g.
// body.namespace) is not the request's: 422. A document without one takes
// the request's.
func bodyNamespace(loc, body, ns string) *Problem {
	if body == "" || body == ns {
		return nil
	}
	msg := fmt.Sprintf("is %q, but the request addresses namespace %q (?namespace=, default when omitted)", body, ns)
	return newProblem(http.StatusUnprocessableEntity, typeInvalid, loc+": "+msg, ProblemError{Location: loc, Message: msg, Value: body})
}

// quotaProblem is the 403 of a write a namespace's quota refuses.
func quotaProblem(qe *store.QuotaError) *Problem {
	return newProblem(http.StatusForbidden, typeQuotaExceeded, qe.Error(),
		ProblemError{Location: queryNamespace, Message: fmt.Sprintf("%s is %d; %d used", qe.Quota, qe.Limit, qe.Used), Value: qe.Namespace})
}

// NamespaceApply is the body of PUT /namespaces/{name}.
type NamespaceApply struct {
	Name        string      `json:"name,omitempty" doc:"The namespace's name; when sent it must equal the path's."`
	Labels      labelsField `json:"labels,omitempty"`
	MaxObjects  *int        `json:"max_objects,omitempty" minimum:"0" doc:"At most this many resources in the namespace: creating one more is refused with 403 (quota-exceeded). Omitted: no quota. Lowering it below what the namespace holds deletes nothing."`
	MaxInFlight *int        `json:"max_in_flight,omitempty" minimum:"0" doc:"At most this many of the namespace's tasks in flight (claimed) at once. Omitted: no quota."`
}

// NamespaceList is the body of GET /namespaces.
type NamespaceList struct {
	Items []store.Namespace `json:"items"`
}

type namespacePath struct {
	Name string `path:"name" doc:"The namespace's name." example:"team-a"`
}

type putNamespaceInput struct {
	Name    string `path:"name" doc:"The namespace's name." example:"team-a"`
	RawBody []byte
}

func (s *Server) registerNamespaces() {
	register(s, huma.Operation{
		OperationID: "list-namespaces", Method: http.MethodGet, Path: "/namespaces", Tags: []string{"Namespaces"},
		Summary: "List namespaces", Description: "Every namespace by name, with its quotas and how many resources it holds.",
	}, nil, s.listNamespaces)
	register(s, huma.Operation{
		OperationID: "get-namespace", Method: http.MethodGet, Path: "/namespaces/{name}", Tags: []string{"Namespaces"},
		Summary: "Get a namespace", Errors: []int{404},
	}, nil, s.getNamespace)
	register(s, huma.Operation{
		OperationID: "put-namespace", Method: http.MethodPut, Path: "/namespaces/{name}", Tags: []string{"Namespaces"},
		Summary: "Create or update a namespace",
		Description: "Creates (201) or updates (200) the namespace's labels and quotas; X-Apply-Result says created, configured " +
			"or unchanged. Omitting a quota removes it.",
		Errors: []int{400, 422},
	}, NamespaceApply{}, s.putNamespace)
	register(s, huma.Operation{
		OperationID: "delete-namespace", Method: http.MethodDelete, Path: "/namespaces/{name}", Tags: []string{"Namespaces"},
		Summary: "Delete a namespace", DefaultStatus: http.StatusNoContent,
		Description: "Refused with 409 for default, and for a namespace that still holds resources, provider configs, " +
			"reactor bindings or endpoints (each counted in errors).",
		Errors: []int{404, 409},
	}, nil, s.deleteNamespace)
}

func (s *Server) listNamespaces(ctx context.Context, _ *struct{}) (*bodyOutput[NamespaceList], error) {
	ns, err := s.store.ListNamespaces(ctx)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	return &bodyOutput[NamespaceList]{Body: NamespaceList{Items: ns}}, nil
}

func (s *Server) getNamespace(ctx context.Context, in *namespacePath) (*bodyOutput[store.Namespace], error) {
	n, err := s.store.GetNamespace(ctx, in.Name)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[store.Namespace]{Body: n}, nil
}

func (s *Server) putNamespace(ctx context.Context, in *putNamespaceInput) (*applyOutput[store.Namespace], error) {
	if !store.ValidNamespace(in.Name) {
		msg := "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
		return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "path.name: "+msg,
			ProblemError{Location: "path.name", Message: msg, Value: in.Name})
	}
	var b NamespaceApply
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	if b.Name != "" && b.Name != in.Name {
		msg := fmt.Sprintf("is %q, but the path names namespace %q", b.Name, in.Name)
		return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.name: "+msg,
			ProblemError{Location: "body.name", Message: msg, Value: b.Name})
	}
	labels, p := b.Labels.strings("body.labels")
	if p != nil {
		return nil, p
	}
	params := store.PutNamespaceParams{Name: in.Name, Labels: labels, MaxObjects: b.MaxObjects, MaxInFlight: b.MaxInFlight}
	n, res, err := s.store.PutNamespace(ctx, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{value: func(f string) any {
			switch f {
			case store.QuotaMaxObjects:
				return b.MaxObjects
			case store.QuotaMaxInFlight:
				return b.MaxInFlight
			}
			return nil
		}})
	}
	return &applyOutput[store.Namespace]{Status: applyStatus(res), ApplyResult: res, Body: n}, nil
}

func (s *Server) deleteNamespace(ctx context.Context, in *namespacePath) (*struct{}, error) {
	if err := s.store.DeleteNamespace(ctx, in.Name); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &struct{}{}, nil
}
