package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// OperationRequest is the body of POST /resources/{kind}/{name}/ops.
type OperationRequest struct {
	Verb  string          `json:"verb" doc:"A verb the resource's kind version declares (an operation reaction)." example:"snapshot"`
	Input json.RawMessage `json:"input,omitempty" doc:"A JSON object validated against the verb's input_schema. Omitted = {}."`
}

// OperationList is one page of GET /resources/{kind}/{name}/ops.
type OperationList struct {
	Items []store.Operation `json:"items"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for older operations; absent on the last page. A page ends before limit when the next operation would take it past the server's byte budget (LIST_PAGE_BYTES)."`
}

// SpecHistory is one page of GET /resources/{kind}/{name}/spec-history.
type SpecHistory struct {
	Items []store.SpecRevision `json:"items"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for older revisions; absent on the last page. A page ends when the next revision would take it past the server's byte budget (LIST_PAGE_BYTES)."`
}

// RollbackRequest is the body of POST /resources/{kind}/{name}/rollback.
type RollbackRequest struct {
	Revision json.RawMessage `json:"revision" doc:"The spec revision to re-apply (see spec-history)." example:"3"`
}

type resourceBodyInput struct {
	ResourcePath
	RawBody []byte
}

type listOperationsInput struct {
	ResourcePath
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"At most this many, newest first. A page may end earlier, at the server's byte budget."`
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page."`
}

type specHistoryInput struct {
	ResourcePath
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page."`
}

type operationPath struct {
	ResourcePath
	ID string `path:"id" doc:"The operation id."`
}

func (s *Server) registerOperations() {
	register(s, huma.Operation{
		OperationID: "invoke-operation", Method: http.MethodPost, Path: "/resources/{kind}/{name}/ops", Tags: []string{"Operations"},
		Summary: "Invoke a verb on a resource",
		Description: "Queues the verb as an operation (202): an operate task runs it at the kind's operation reaction for that verb. " +
			"A resource's operations run one at a time, oldest first. 404 for a verb the kind version does not declare, " +
			"422 for a missing verb or an input its input_schema refuses, 409 while the resource is being deleted.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{400, 404, 409, 422},
	}, OperationRequest{}, s.invokeOperation)
	register(s, huma.Operation{
		OperationID: "list-operations", Method: http.MethodGet, Path: "/resources/{kind}/{name}/ops", Tags: []string{"Operations"},
		Summary: "List a resource's operations, newest first", Errors: []int{404},
	}, nil, s.listOperations)
	register(s, huma.Operation{
		OperationID: "get-operation", Method: http.MethodGet, Path: "/resources/{kind}/{name}/ops/{id}", Tags: []string{"Operations"},
		Summary: "Get an operation", Errors: []int{404},
	}, nil, s.getOperation)
	register(s, huma.Operation{
		OperationID: "cancel-operation", Method: http.MethodDelete, Path: "/resources/{kind}/{name}/ops/{id}", Tags: []string{"Operations"},
		Summary:     "Cancel a pending operation",
		Description: "Cancels an operation no provider has taken yet (200, state cancelled); 409 once it runs or has finished.",
		Errors:      []int{404, 409},
	}, nil, s.cancelOperation)
	register(s, huma.Operation{
		OperationID: "get-spec-history", Method: http.MethodGet, Path: "/resources/{kind}/{name}/spec-history", Tags: []string{"Resources"},
		Summary: "List a resource's spec revisions, newest first",
		Description: "A root resource records a revision on every apply that changes its generation; the newest are kept (20 by default). " +
			"Composed children record none. A page holds as many as fit the server's byte budget (LIST_PAGE_BYTES); next_cursor continues.",
		Errors: []int{404},
	}, nil, s.specHistory)
	register(s, huma.Operation{
		OperationID: "rollback-resource", Method: http.MethodPost, Path: "/resources/{kind}/{name}/rollback", Tags: []string{"Resources"},
		Summary: "Re-apply an earlier spec revision",
		Description: "Applies the revision's spec as an apply would (validated against the current schema, a new generation, " +
			"recorded as a new revision), keeping the current kind_version, labels and provider config. " +
			"404 naming body.revision for an unknown revision; 409 while the resource is being deleted.",
		Errors: []int{400, 404, 409, 422},
	}, RollbackRequest{}, s.rollback)
}

func (s *Server) invokeOperation(ctx context.Context, in *resourceBodyInput) (*bodyOutput[store.Operation], error) {
	var b OperationRequest
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	op, err := s.store.CreateOperation(ctx, ns, in.Kind, in.Name, b.Verb, b.Input)
	if err != nil {
		p := s.problemFor(ctx, err, problemOpts{doc: b.Input, value: func(f string) any {
			if f == "verb" {
				return b.Verb
			}
			return nil
		}})
		// An input is the request's own document: a schema violation is an
		// invalid request (422), as a missing verb is.
		if de := (*store.DocumentError)(nil); errors.As(err, &de) {
			p.Status, p.Title = http.StatusUnprocessableEntity, http.StatusText(http.StatusUnprocessableEntity)
		}
		return nil, p
	}
	return &bodyOutput[store.Operation]{Body: op}, nil
}

func (s *Server) listOperations(ctx context.Context, in *listOperationsInput) (*pageOutput[OperationList], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	page, err := s.store.ListOperations(ctx, store.ListOperationsParams{Namespace: ns, Kind: in.Kind, Name: in.Name, Limit: in.Limit,
		MaxBytes: s.cfg.ListPageBytes, Cursor: in.Cursor})
	if err != nil {
		return nil, s.problemFor(ctx, err, pageProblem(in.Cursor))
	}
	return &pageOutput[OperationList]{NextCursor: page.NextCursor, Body: OperationList{Items: page.Items, NextCursor: page.NextCursor}}, nil
}

// pageProblem locates the store's refusal of a list's parameters in the
// query, echoing the cursor.
func pageProblem(cursor string) problemOpts {
	return problemOpts{in: "query", value: func(f string) any {
		if f == "cursor" {
			return cursor
		}
		return nil
	}}
}

func (s *Server) getOperation(ctx context.Context, in *operationPath) (*bodyOutput[store.Operation], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	op, err := s.store.GetOperation(ctx, ns, in.Kind, in.Name, in.ID)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[store.Operation]{Body: op}, nil
}

func (s *Server) cancelOperation(ctx context.Context, in *operationPath) (*bodyOutput[store.Operation], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	op, err := s.store.CancelOperation(ctx, ns, in.Kind, in.Name, in.ID)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[store.Operation]{Body: op}, nil
}

func (s *Server) specHistory(ctx context.Context, in *specHistoryInput) (*pageOutput[SpecHistory], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	page, err := s.store.SpecHistory(ctx, store.SpecHistoryParams{Namespace: ns, Kind: in.Kind, Name: in.Name, MaxBytes: s.cfg.ListPageBytes, Cursor: in.Cursor})
	if err != nil {
		return nil, s.problemFor(ctx, err, pageProblem(in.Cursor))
	}
	return &pageOutput[SpecHistory]{NextCursor: page.NextCursor, Body: SpecHistory{Items: page.Items, NextCursor: page.NextCursor}}, nil
}

func (s *Server) rollback(ctx context.Context, in *resourceBodyInput) (*applyOutput[model.Resource], error) {
	var b RollbackRequest
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	raw := bytes.TrimSpace(b.Revision)
	rev, err := strconv.ParseInt(string(raw), 10, 64)
	if len(raw) == 0 || string(raw) == "null" || err != nil || rev < 1 {
		msg := "must be a spec revision: an integer >= 1"
		if len(raw) == 0 || string(raw) == "null" {
			msg = "is required: " + msg
		}
		var val any
		if len(raw) > 0 {
			val = json.RawMessage(raw)
		}
		return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.revision "+msg,
			ProblemError{Location: "body.revision", Message: msg, Value: val})
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	r, res, err := s.store.Rollback(ctx, ns, in.Kind, in.Name, rev)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{value: func(f string) any {
			if f == "revision" {
				return rev
			}
			return nil
		}})
	}
	return &applyOutput[model.Resource]{Status: http.StatusOK, ApplyResult: res, Body: r}, nil
}
