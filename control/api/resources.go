package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// ResourceApply is the body of POST /resources: a resource as its owner
// declares it, keyed by (kind, name).
type ResourceApply struct {
	Namespace   string          `json:"namespace,omitempty" doc:"The namespace; when sent it must equal ?namespace= (omitted: default)." example:"default"`
	Kind        string          `json:"kind" doc:"The kind." example:"vpc"`
	KindVersion versionField    `json:"kind_version"`
	Name        string          `json:"name" doc:"Unique within the kind: 1-253 of [A-Za-z0-9._-], starting and ending alphanumeric." example:"sample-vpc"`
	Labels      labelsField     `json:"labels,omitempty"`
	Spec        json.RawMessage `json:"spec,omitempty" doc:"The desired state, a JSON object validated against the kind version's spec_schema. Omitted = {}."`
	// ProviderConfigRef attaches a provider config of the same kind version.
	ProviderConfigRef string `json:"provider_config_ref,omitempty" doc:"A provider config of the same (kind, kind_version), in the resource's namespace or in default, overriding the default."`
	// ResourceVersion, when sent, makes the apply conditional on it.
	ResourceVersion int64 `json:"resource_version,omitempty" doc:"The resource_version the change was made from (a GET's): the apply is refused with 409, and changes nothing, when the resource has been written since. Omitted = apply whatever the version."`
}

type resourceApplyBody struct {
	ResourceApply
	resourceReadOnly
}

type applyResourceInput struct {
	NamespaceQuery
	Conditional
	RawBody []byte
}

type deleteResourceInput struct {
	ResourcePath
	Conditional
}

// ResourcePath addresses a resource: its kind and name in the path, its
// namespace in the query.
type ResourcePath struct {
	Kind string `path:"kind" doc:"The kind." example:"vpc"`
	Name string `path:"name" doc:"The resource name." example:"sample-vpc"`
	NamespaceQuery
}

// ResourceList is one page of GET /resources.
type ResourceList struct {
	Items []ListedResource `json:"items"`
	// NextCursor continues the listing; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for the next page; absent on the last page. A page ends before limit when the next item would take it past the server's byte budget (LIST_PAGE_BYTES)."`
}

// ListedResource is a resource as a list shows it: without its spec or
// status when the request left them out (fields=-spec,-status).
type ListedResource struct {
	model.Resource
	Spec   json.RawMessage `json:"spec,omitempty" doc:"The desired state; absent with fields=-spec."`
	Status json.RawMessage `json:"status,omitempty" doc:"The last applied status; absent with fields=-status, and before the first."`
}

// listed shows a page of resources as a list does.
func listed(rs []model.Resource) []ListedResource {
	out := make([]ListedResource, len(rs))
	for i, r := range rs {
		out[i] = ListedResource{Resource: r, Spec: r.Spec, Status: r.Status}
	}
	return out
}

// parseFields reads a fields parameter: which of spec and status the
// items leave out. Anything but -spec and -status is a 400.
func parseFields(s string) (store.ResourceFields, *Problem) {
	var f store.ResourceFields
	if s == "" {
		return f, nil
	}
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(part) {
		case "-spec":
			f.OmitSpec = true
		case "-status":
			f.OmitStatus = true
		default:
			return f, malformed("query.fields", fmt.Sprintf("%q is not a field a list can leave out: use -spec, -status or -spec,-status", part), s)
		}
	}
	return f, nil
}

type listResourcesInput struct {
	NamespacesQuery
	Kind          string   `query:"kind" doc:"Only this kind."`
	KindVersion   int      `query:"kind_version" minimum:"1" maximum:"32767" doc:"Only this kind version."`
	Phase         []string `query:"phase,explode" doc:"Only these phases; repeat to union: ?phase=Failed&phase=Degraded. One of Deleting, Quarantined, Failed, Orphaned, Degraded, Ready, Reconciling."`
	LabelSelector string   `query:"label_selector" doc:"Comma-separated requirements the labels must all meet: key=value (or ==), key!=value, key in (v1,v2), key notin (v1,v2), key (set), !key (not set). A != or notin also matches a resource without the label." example:"team=payments,env!=dev"`
	Owner         string   `query:"owner" doc:"Only the children of this resource id."`
	NamePrefix    string   `query:"name_prefix" doc:"Only resources whose name starts with this text." example:"shop-"`
	Failure       string   `query:"failure" enum:"retrying,terminal" doc:"Only resources whose reconcile failed: retrying (transiently, still retried) or terminal (not retried). Both are phase Failed."`
	Fields        string   `query:"fields" doc:"Leave large fields out of the items, comma-separated: -spec, -status or both." example:"-spec,-status"`
	Limit         int      `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size: the most items a page holds. A page may end earlier, at the server's byte budget."`
	Cursor        string   `query:"cursor" doc:"The next_cursor of the previous page."`
}

func (s *Server) registerResources() {
	register(s, huma.Operation{
		OperationID: "apply-resource", Method: http.MethodPost, Path: "/resources", Tags: []string{"Resources"},
		Summary: "Apply a resource",
		Description: "Creates (201) or updates (200) the resource (kind, name); X-Apply-Result says created, configured or unchanged. " +
			"A JSON-equal re-apply writes nothing. Re-applying at another kind_version flips the resource in place (same id) " +
			"when the spec validates against the new version's schema.",
		Errors: []int{400, 404, 409, 412, 422},
	}, ResourceApply{}, s.applyResource)
	register(s, huma.Operation{
		OperationID: "get-resource", Method: http.MethodGet, Path: "/resources/{kind}/{name}", Tags: []string{"Resources"},
		Summary: "Get a resource",
		Description: "The resource with its conditions, its reconcile task, why it waits (parked), its recent failed " +
			"deliveries, and pending_reactions: the reactor deliveries its lifecycle transitions fired that are not acknowledged yet.",
		Errors: []int{404},
	}, nil, s.getResource)
	register(s, huma.Operation{
		OperationID: "list-resources", Method: http.MethodGet, Path: "/resources", Tags: []string{"Resources"},
		Summary:     "List resources",
		Description: "Pages in creation order with a keyset cursor; no total is counted.",
		Errors:      []int{422},
	}, nil, s.listResources)
	register(s, huma.Operation{
		OperationID: "delete-resource", Method: http.MethodDelete, Path: "/resources/{kind}/{name}", Tags: []string{"Resources"},
		Summary: "Request a resource's deletion",
		Description: "Marks the resource's teardown tree for deletion (phase Deleting): the resource, everything it owns, and every " +
			"resource that depends on any of it. Each is removed once nothing beneath it remains, after its kind's deleteRequested " +
			"reaction succeeds if the kind has a finalizer (a delete task); dependents go before their dependencies, the resource " +
			"last. Answers 202 with the resource as marked; GET shows the teardown's progress and what blocks it. Repeating it is a no-op.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{404, 412},
	}, nil, s.deleteResource)
}

func (s *Server) applyResource(ctx context.Context, in *applyResourceInput) (*applyOutput[model.Resource], error) {
	params, p := parseResourceApply(in.RawBody)
	if p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	if p := bodyNamespace("body.namespace", params.Namespace, ns); p != nil {
		return nil, p
	}
	params.Namespace = ns
	pre, p := conditionOf(in.IfMatch, params.Precondition)
	if p != nil {
		return nil, p
	}
	params.Precondition = pre.Precondition
	noteObject(ctx, params.Kind, params.Name)
	r, res, err := s.store.ApplyResource(ctx, params)
	if err != nil {
		return nil, s.resourceProblem(ctx, err, params, pre.in)
	}
	noteVersions(ctx, r.PriorVersion, r.ResourceVersion)
	return &applyOutput[model.Resource]{Status: applyStatus(res), ApplyResult: res, ETag: etag(r.ResourceVersion), Body: r}, nil
}

// parseResourceApply decodes one apply document (the body of POST
// /resources, an item of POST /resources:batch) into the store's params.
// Its problems locate fields under "body".
func parseResourceApply(raw []byte) (store.ApplyResourceParams, *Problem) {
	var b resourceApplyBody
	if p := decodeBody(raw, &b); p != nil {
		return store.ApplyResourceParams{}, p
	}
	version, p := b.KindVersion.value("body.kind_version")
	if p != nil {
		return store.ApplyResourceParams{}, p
	}
	labels, p := b.Labels.strings("body.labels")
	if p != nil {
		return store.ApplyResourceParams{}, p
	}
	pre, p := bodyVersion(b.ResourceVersion)
	if p != nil {
		return store.ApplyResourceParams{}, p
	}
	return store.ApplyResourceParams{Namespace: b.Namespace, Kind: b.Kind, KindVersion: version, Name: b.Name, Labels: labels,
		Spec: b.Spec, ProviderConfigRef: b.ProviderConfigRef, Precondition: pre}, nil
}

// resourceProblem renders the store's refusal of an apply of params, its
// fields located under "body" with the values sent echoed; version is where
// its condition was sent.
func (s *Server) resourceProblem(ctx context.Context, err error, params store.ApplyResourceParams, version in) *Problem {
	return s.problemFor(ctx, err, problemOpts{doc: params.Spec, version: version, value: func(f string) any {
		switch {
		case f == "kind":
			return params.Kind
		case f == "kind_version":
			return params.KindVersion
		case f == "name":
			return params.Name
		case f == "provider_config_ref":
			return params.ProviderConfigRef
		case strings.HasPrefix(f, "labels."):
			return params.Labels[strings.TrimPrefix(f, "labels.")]
		}
		return nil
	}})
}

// ResourceView is GET /resources/{kind}/{name}: the resource, its
// conditions, and why it is where it is — its current task (claim,
// attempts, last error), why it waits if no endpoint can take it, its
// most recent failed deliveries, and the reactor deliveries its lifecycle
// transitions owe.
type ResourceView struct {
	store.ResourceDetail
	Task *store.TaskInfo `json:"task,omitempty" doc:"The resource's current task (its delete task while it is torn down, else its reconcile task): state, claim epoch, attempts, lease, last error."`
	// Teardown says where its deletion stands, while it is Deleting.
	Teardown *store.Teardown `json:"teardown,omitempty" doc:"While Deleting: its finalizers, how many resources beneath it remain, and which one's failing teardown blocks it."`
	// Parked says why a queued task is not being claimed.
	Parked string `json:"parked,omitempty" doc:"Why a queued task waits: no ready endpoint serves its (kind, kind_version)."`
	// Deliveries are the newest failed delivery attempts for this resource.
	Deliveries []store.Delivery `json:"recent_failed_deliveries,omitempty" doc:"The newest failed delivery attempts for it (GET /deliveries?kind=&name=&failed=true has them all)."`
	// PendingReactions are the reactor deliveries not acked yet.
	PendingReactions []store.PendingReaction `json:"pending_reactions,omitempty" doc:"Reactor deliveries this resource's lifecycle transitions fired (one per matching reactor binding) that no reactor has acknowledged yet: binding, transition, generation, failed attempts, last error, and whether one is being delivered now. A delivery leaves the list once its reactor succeeds."`
}

// recentDeliveries bounds the deliveries a resource detail shows.
const recentDeliveries = 10

func (s *Server) getResource(ctx context.Context, in *ResourcePath) (*versionedOutput[ResourceView], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	r, err := s.store.GetResource(ctx, ns, in.Kind, in.Name)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	v := ResourceView{ResourceDetail: r}
	if v.Task, err = s.store.ResourceTask(ctx, r.ID); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	if r.PhaseOf() == model.PhaseDeleting {
		if v.Teardown, err = s.store.ResourceTeardown(ctx, r.ID); err != nil {
			return nil, s.problemFor(ctx, err, problemOpts{})
		}
	}
	if t := v.Task; t != nil && t.State == "pending" && s.cfg.PairStatus != nil {
		if ok, why := s.cfg.PairStatus(r.Namespace, t.Kind, t.KindVersion); !ok {
			v.Parked = why
		}
	}
	if s.cfg.Endpoints != nil {
		page, err := s.store.ListDeliveries(ctx, store.DeliveryFilter{Namespace: ns, Kind: r.Kind, Name: r.Name, ResourceID: r.ID, Failed: true, Limit: recentDeliveries})
		if err != nil {
			return nil, s.problemFor(ctx, err, problemOpts{})
		}
		v.Deliveries = page.Items
	}
	if v.PendingReactions, err = s.store.PendingReactions(ctx, r.ID); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	return &versionedOutput[ResourceView]{ETag: etag(r.ResourceVersion), Body: v}, nil
}

func (s *Server) listResources(ctx context.Context, in *listResourcesInput) (*pageOutput[ResourceList], error) {
	selector, p := parseSelector(in.LabelSelector)
	if p != nil {
		return nil, p
	}
	fields, p := parseFields(in.Fields)
	if p != nil {
		return nil, p
	}
	ns, p := s.namespaces(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	params := store.ListResourcesParams{Namespace: ns, Kind: in.Kind, KindVersion: in.KindVersion, Selector: selector,
		OwnerID: in.Owner, NamePrefix: in.NamePrefix, Failure: in.Failure, Fields: fields, Limit: in.Limit,
		MaxBytes: s.cfg.ListPageBytes, Cursor: in.Cursor}
	for _, ph := range in.Phase {
		// ?phase=Failed,Degraded is accepted as well as repeated params.
		for _, one := range strings.Split(ph, ",") {
			if one = strings.TrimSpace(one); one != "" {
				params.Phases = append(params.Phases, model.Phase(one))
			}
		}
	}
	page, err := s.store.ListResources(ctx, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query", value: func(f string) any {
			switch f {
			case "cursor":
				return in.Cursor
			case "owner":
				return in.Owner
			case "phase":
				return in.Phase
			case "label_selector":
				return in.LabelSelector
			}
			return nil
		}})
	}
	return &pageOutput[ResourceList]{NextCursor: page.NextCursor, Body: ResourceList{Items: listed(page.Items), NextCursor: page.NextCursor}}, nil
}

func (s *Server) deleteResource(ctx context.Context, in *deleteResourceInput) (*versionedOutput[model.Resource], error) {
	pre, p := conditionOf(in.IfMatch, store.Precondition{})
	if p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	r, err := s.store.DeleteResource(ctx, ns, in.Kind, in.Name, pre.Precondition)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path", version: pre.in})
	}
	noteVersions(ctx, r.PriorVersion, r.ResourceVersion)
	return &versionedOutput[model.Resource]{ETag: etag(r.ResourceVersion), Body: r}, nil
}
