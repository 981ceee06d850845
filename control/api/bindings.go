package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/webhooksdk"
)

// ReactorBindingApply is the body of POST /reactor-bindings.
type ReactorBindingApply struct {
	Name             string       `json:"name" doc:"Unique (across every namespace), operator-chosen handle." example:"classicbom-synced-to-statussink"`
	Namespace        string       `json:"namespace,omitempty" doc:"The namespace; when sent it must equal ?namespace= (omitted: default). The binding watches this namespace's resources only." example:"default"`
	WatchKind        string       `json:"watch_kind" doc:"The kind whose transitions fire the binding; must be published." example:"classicbom"`
	WatchKindVersion versionField `json:"watch_kind_version,omitempty" doc:"Only this version of watch_kind; omitted = every version."`
	Transition       string       `json:"transition" enum:"created,synced,degraded,failed,deleted" doc:"The lifecycle edge." example:"synced"`
	Reactor          string       `json:"reactor" doc:"The reactor kind to run; must be a published reactor kind." example:"statussink"`
	ReactorVersion   versionField `json:"reactor_version,omitempty" doc:"Pin this reactor version; omitted = unpinned."`
	LabelMatch       labelsField  `json:"label_match,omitempty" doc:"The watched resource's labels must contain these; omitted = all."`
	Enabled          *bool        `json:"enabled,omitempty" doc:"A disabled binding never fires. Default true."`
	// ResourceVersion, when sent, makes the apply conditional on it.
	ResourceVersion int64 `json:"resource_version,omitempty" doc:"The resource_version the change was made from (a GET's): the apply is refused with 409, and changes nothing, when the object has been written since. Omitted = apply whatever the version."`
}

type bindingApplyBody struct {
	ReactorBindingApply
	bindingReadOnly
}

// ReactorBindingList is the body of GET /reactor-bindings.
type ReactorBindingList struct {
	Items []store.ReactorBinding `json:"items"`
}

type listBindingsInput struct {
	NamespacesQuery
	WatchKind string `query:"watch_kind" doc:"Only bindings watching this kind."`
	Reactor   string `query:"reactor" doc:"Only bindings running this reactor."`
}

func (s *Server) registerBindings() {
	register(s, huma.Operation{
		OperationID: "apply-reactor-binding", Method: http.MethodPost, Path: "/reactor-bindings", Tags: []string{"Reactor bindings"},
		Summary:     "Apply a reactor binding",
		Description: "Creates (201) or updates (200) the binding by name; X-Apply-Result says created, configured or unchanged. Live: no restart.",
		Errors:      []int{400, 409, 412, 422},
	}, ReactorBindingApply{}, s.applyBinding)
	register(s, huma.Operation{
		OperationID: "list-reactor-bindings", Method: http.MethodGet, Path: "/reactor-bindings", Tags: []string{"Reactor bindings"},
		Summary: "List reactor bindings",
	}, nil, s.listBindings)
	register(s, huma.Operation{
		OperationID: "get-reactor-binding", Method: http.MethodGet, Path: "/reactor-bindings/{name}", Tags: []string{"Reactor bindings"},
		Summary: "Get a reactor binding", Errors: []int{404},
	}, nil, s.getBinding)
	register(s, huma.Operation{
		OperationID: "delete-reactor-binding", Method: http.MethodDelete, Path: "/reactor-bindings/{name}", Tags: []string{"Reactor bindings"},
		Summary: "Delete a reactor binding", DefaultStatus: http.StatusNoContent, Errors: []int{404, 412},
	}, nil, s.deleteBinding)
}

// optionalVersion reads a version field that may be omitted (0).
func optionalVersion(v versionField, loc string) (int, *Problem) {
	if len(v.raw) == 0 || string(v.raw) == "null" {
		return 0, nil
	}
	return v.value(loc)
}

func (s *Server) applyBinding(ctx context.Context, in *nsApplyInput) (*applyOutput[store.ReactorBinding], error) {
	var b bindingApplyBody
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	if p := bodyNamespace("body.namespace", b.Namespace, ns); p != nil {
		return nil, p
	}
	watchVersion, p := optionalVersion(b.WatchKindVersion, "body.watch_kind_version")
	if p != nil {
		return nil, p
	}
	reactorVersion, p := optionalVersion(b.ReactorVersion, "body.reactor_version")
	if p != nil {
		return nil, p
	}
	labels, p := b.LabelMatch.strings("body.label_match")
	if p != nil {
		return nil, p
	}
	pre, p := applyCondition(in.IfMatch, b.ResourceVersion)
	if p != nil {
		return nil, p
	}
	params := store.PutReactorBindingParams{Namespace: ns, Name: b.Name, WatchKind: b.WatchKind, WatchKindVersion: watchVersion,
		Transition: webhooksdk.Transition(b.Transition), Reactor: b.Reactor, ReactorVersion: reactorVersion,
		LabelMatch: labels, Enabled: b.Enabled == nil || *b.Enabled, Precondition: pre.Precondition}
	out, res, err := s.store.PutReactorBinding(ctx, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{version: pre.in, value: func(f string) any {
			switch {
			case f == "name":
				return params.Name
			case f == "watch_kind":
				return params.WatchKind
			case f == "reactor":
				return params.Reactor
			case f == "transition":
				return b.Transition
			case strings.HasPrefix(f, "label_match."):
				return labels[strings.TrimPrefix(f, "label_match.")]
			}
			return nil
		}})
	}
	return &applyOutput[store.ReactorBinding]{Status: applyStatus(res), ApplyResult: res, ETag: etag(out.ResourceVersion), Body: out}, nil
}

func (s *Server) listBindings(ctx context.Context, in *listBindingsInput) (*bodyOutput[ReactorBindingList], error) {
	ns, p := s.namespaces(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	bs, err := s.store.ListReactorBindings(ctx, store.ListReactorBindingsParams{Namespace: ns, WatchKind: in.WatchKind, Reactor: in.Reactor})
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query"})
	}
	return &bodyOutput[ReactorBindingList]{Body: ReactorBindingList{Items: bs}}, nil
}

func (s *Server) getBinding(ctx context.Context, in *NamespacedName) (*versionedOutput[store.ReactorBinding], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	b, err := s.store.GetReactorBinding(ctx, ns, in.Name)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &versionedOutput[store.ReactorBinding]{ETag: etag(b.ResourceVersion), Body: b}, nil
}

func (s *Server) deleteBinding(ctx context.Context, in *deleteByNameInput) (*struct{}, error) {
	return s.deleteNamed(ctx, in, s.store.DeleteReactorBinding)
}
