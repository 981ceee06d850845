package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
)

// batchPath is the bulk apply route: a custom method in the AIP-136 style
// (a literal colon, which the router is told is not a parameter; see
// literalColons).
const batchPath = "/resources:batch"

// ndjsonType is the media type of a batch sent one apply document per line.
const ndjsonType = "application/x-ndjson"

// ResourceBatch is the JSON body of POST /resources:batch.
type ResourceBatch struct {
	Items []ResourceApply `json:"items" doc:"Apply documents, each exactly as POST /resources takes it." minItems:"1"`
}

// ResourceBatchItem is one item's outcome.
type ResourceBatchItem struct {
	Index      int    `json:"index" doc:"The item's position in the request, from 0 (for NDJSON, its line among the non-blank lines)."`
	Namespace  string `json:"namespace" doc:"The namespace the batch applies to (?namespace=)."`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name,omitempty"`
	Result     string `json:"result" enum:"created,updated,unchanged,invalid" doc:"invalid: refused and nothing of it written; errors say why."`
	ID         string `json:"id,omitempty" doc:"The resource id; absent for an invalid item."`
	Generation int64  `json:"generation,omitempty" doc:"The resource's generation after the apply; absent for an invalid item."`
	// ResourceVersion is the resource's version after the apply.
	ResourceVersion int64          `json:"resource_version,omitempty" doc:"The resource's resource_version after the apply; absent for an invalid item."`
	Errors          []ProblemError `json:"errors,omitempty" doc:"For an invalid item: each offending field, located as items[i].field."`
}

// ResourceBatchResult is the answer of POST /resources:batch.
type ResourceBatchResult struct {
	Results   []ResourceBatchItem `json:"results" doc:"One per item, in request order."`
	Created   int                 `json:"created"`
	Updated   int                 `json:"updated"`
	Unchanged int                 `json:"unchanged"`
	Invalid   int                 `json:"invalid"`
}

type applyBatchInput struct {
	NamespaceQuery
	ContentType string `header:"Content-Type" hidden:"true"`
	RawBody     []byte
}

// batchResults maps the store's results to the batch's words.
var batchResults = map[store.ApplyResult]string{
	store.ApplyCreated: "created", store.ApplyConfigured: "updated",
	store.ApplyUnchanged: "unchanged", store.ApplyInvalid: "invalid",
}

func (s *Server) registerResourceBatch() {
	register(s, huma.Operation{
		OperationID: "apply-resources-batch", Method: http.MethodPost, Path: batchPath, Tags: []string{"Resources"},
		Summary: "Apply many resources",
		Description: "Applies each item exactly as POST /resources would, and answers 200 with one result per item in order " +
			"(created, updated, unchanged or invalid) and the counts. Every item is validated first; an invalid item writes " +
			"nothing and its errors are located as items[i].field; the valid items are then written " + fmt.Sprint(store.BatchChunk) +
			" per statement, each chunk its own transaction. The body is {\"items\": [...]} (application/json) or one apply " +
			"document per line (" + ndjsonType + "). At most Config.BatchMaxItems items (413 beyond). A body that cannot be " +
			"parsed is 400 and writes nothing.",
		Errors: []int{400, 413, 422},
	}, ResourceBatch{}, s.applyResourceBatch)
	body := s.api.OpenAPI().Paths[Prefix+batchPath].Post.RequestBody
	body.Content[ndjsonType] = &huma.MediaType{Schema: &huma.Schema{Type: huma.TypeString,
		Description: "One resource apply document (as POST /resources takes it) per line; blank lines are skipped."}}
}

func (s *Server) applyResourceBatch(ctx context.Context, in *applyBatchInput) (*bodyOutput[ResourceBatchResult], error) {
	raws, p := s.batchItems(in.ContentType, in.RawBody)
	if p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	out := ResourceBatchResult{Results: make([]ResourceBatchItem, len(raws))}
	params := make([]store.ApplyResourceParams, 0, len(raws))
	at := make([]int, 0, len(raws)) // the item index of each params entry
	for i, raw := range raws {
		r := &out.Results[i]
		r.Index, r.Namespace = i, ns
		pr, p := parseResourceApply(raw)
		if p == nil {
			p = bodyNamespace("body.namespace", pr.Namespace, ns)
		}
		if p != nil {
			var named struct{ Kind, Name any }
			_ = json.Unmarshal(raw, &named) // best effort, to name the item
			r.Kind, _ = named.Kind.(string)
			r.Name, _ = named.Name.(string)
			r.Result, r.Errors = "invalid", itemErrors(p, i)
			continue
		}
		r.Kind, r.Name, pr.Namespace = pr.Kind, pr.Name, ns
		params, at = append(params, pr), append(at, i)
	}
	res, err := s.store.ApplyResources(ctx, ns, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	for j, rr := range res {
		r := &out.Results[at[j]]
		r.Result, r.ID, r.Generation, r.ResourceVersion = batchResults[rr.Result], rr.ID, rr.Generation, rr.ResourceVersion
		if rr.Err != nil {
			r.Errors = itemErrors(s.resourceProblem(ctx, rr.Err, params[j], "body"), at[j])
		}
	}
	for _, r := range out.Results {
		switch r.Result {
		case "created":
			out.Created++
		case "updated":
			out.Updated++
		case "unchanged":
			out.Unchanged++
		case "invalid":
			out.Invalid++
		}
	}
	return &bodyOutput[ResourceBatchResult]{Body: out}, nil
}

// batchItems splits a batch body into its items' raw documents: the items
// array of a JSON body, or the non-blank lines of an NDJSON one. A body
// that cannot be split is a 400, a batch of no items a 422, one of more than
// BatchMaxItems a 413; each names the field.
func (s *Server) batchItems(contentType string, raw []byte) ([]json.RawMessage, *Problem) {
	var items []json.RawMessage
	if mt, _, _ := mime.ParseMediaType(contentType); mt == ndjsonType {
		for line := range bytes.SplitSeq(raw, []byte("\n")) {
			if len(bytes.TrimSpace(line)) > 0 {
				items = append(items, line)
			}
		}
	} else {
		var env struct {
			Items *[]json.RawMessage `json:"items"`
		}
		if p := decodeJSON(raw, &env); p != nil {
			return nil, p
		}
		if env.Items == nil {
			return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.items is required",
				ProblemError{Location: "body.items", Message: "is required: an array of resource apply documents"})
		}
		items = *env.Items
	}
	switch {
	case len(items) == 0:
		return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.items holds no item",
			ProblemError{Location: "body.items", Message: "must hold at least one resource apply document"})
	case len(items) > s.cfg.BatchMaxItems:
		msg := fmt.Sprintf("must hold at most %d items (got %d); split the batch", s.cfg.BatchMaxItems, len(items))
		return nil, newProblem(http.StatusRequestEntityTooLarge, typeTooLarge, "body.items "+msg,
			ProblemError{Location: "body.items", Message: msg, Value: len(items)})
	}
	return items, nil
}

// itemErrors relocates a single apply's problem to item i: body.spec.x
// becomes items[i].spec.x. A problem naming no field is reported at the item.
func itemErrors(p *Problem, i int) []ProblemError {
	at := fmt.Sprintf("items[%d]", i)
	if len(p.Errors) == 0 {
		return []ProblemError{{Location: at, Message: p.Detail}}
	}
	out := make([]ProblemError, len(p.Errors))
	for k, e := range p.Errors {
		e.Location = at + strings.TrimPrefix(e.Location, "body")
		out[k] = e
	}
	return out
}
