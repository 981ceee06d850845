package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/webhooksdk"
)

// ProviderConfigApply is the body of POST /providerconfigs.
type ProviderConfigApply struct {
	Name        string          `json:"name" doc:"Unique across every namespace; one name is one (kind, kind_version)." example:"vpc-v1-default"`
	Namespace   string          `json:"namespace,omitempty" doc:"The namespace; when sent it must equal ?namespace= (omitted: default). A default (is_default) lives in default." example:"default"`
	Kind        string          `json:"kind" doc:"The consumer kind." example:"vpc"`
	KindVersion versionField    `json:"kind_version"`
	IsDefault   bool            `json:"is_default,omitempty" doc:"Make this the default of its (kind, kind_version); at most one."`
	Spec        json.RawMessage `json:"spec,omitempty" doc:"Validated against the kind version's config_schema; omitted = {}."`
	Data        []byte          `json:"data,omitempty" doc:"An opaque bundle, base64."`
	// ResourceVersion, when sent, makes the apply conditional on it.
	ResourceVersion int64 `json:"resource_version,omitempty" doc:"The resource_version the change was made from (a GET's): the apply is refused with 409, and changes nothing, when the object has been written since. Omitted = apply whatever the version."`
}

type providerConfigApplyBody struct {
	ProviderConfigApply
	providerConfigReadOnly
}

// applyInput is the input of an apply that takes its body raw and may be
// conditional (If-Match).
type applyInput struct {
	Conditional
	RawBody []byte
}

// nsApplyInput is applyInput of a namespaced object.
type nsApplyInput struct {
	NamespaceQuery
	Conditional
	RawBody []byte
}

type namePath struct {
	Name string `path:"name" doc:"The object's name."`
}

// NamespacedName addresses a namespaced object by name: its name in the
// path, its namespace in the query.
type NamespacedName struct {
	Name string `path:"name" doc:"The object's name."`
	NamespaceQuery
}

// deleteByNameInput is the input of a delete of a namespaced object by
// name that may be conditional (If-Match).
type deleteByNameInput struct {
	NamespacedName
	Conditional
}

// ProviderConfigList is one page of GET /providerconfigs.
type ProviderConfigList struct {
	Items      []store.ProviderConfig `json:"items"`
	NextCursor string                 `json:"next_cursor,omitempty" doc:"Pass as ?cursor= for the next page; absent on the last page."`
}

type listProviderConfigsInput struct {
	NamespacesQuery
	Kind        string `query:"kind" doc:"Only this kind."`
	KindVersion int    `query:"kind_version" minimum:"1" maximum:"32767" doc:"Only this kind version."`
	Default     string `query:"default" enum:"true,false" doc:"true: only defaults; false: only overrides."`
	Limit       int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
	Cursor      string `query:"cursor" doc:"The next_cursor of the previous page."`
}

func (s *Server) registerProviderConfigs() {
	register(s, huma.Operation{
		OperationID: "apply-providerconfig", Method: http.MethodPost, Path: "/providerconfigs", Tags: []string{"Provider configs"},
		Summary: "Apply a provider config",
		Description: "Creates (201) or updates (200) the config by name; X-Apply-Result says created, configured or unchanged. " +
			"A second default for one (kind, kind_version) is 409; moving a referenced config to another version is 409.",
		Errors: []int{400, 404, 409, 412, 422},
	}, ProviderConfigApply{}, s.applyProviderConfig)
	register(s, huma.Operation{
		OperationID: "list-providerconfigs", Method: http.MethodGet, Path: "/providerconfigs", Tags: []string{"Provider configs"},
		Summary: "List provider configs", Errors: []int{422},
	}, nil, s.listProviderConfigs)
	register(s, huma.Operation{
		OperationID: "get-providerconfig", Method: http.MethodGet, Path: "/providerconfigs/{name}", Tags: []string{"Provider configs"},
		Summary: "Get a provider config", Errors: []int{404},
	}, nil, s.getProviderConfig)
	register(s, huma.Operation{
		OperationID: "delete-providerconfig", Method: http.MethodDelete, Path: "/providerconfigs/{name}", Tags: []string{"Provider configs"},
		Summary: "Delete a provider config", DefaultStatus: http.StatusNoContent,
		Description: "Refused with 409 while a resource references it.",
		Errors:      []int{404, 409, 412},
	}, nil, s.deleteProviderConfig)
}

func (s *Server) applyProviderConfig(ctx context.Context, in *nsApplyInput) (*applyOutput[store.ProviderConfig], error) {
	var b providerConfigApplyBody
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
	version, p := b.KindVersion.value("body.kind_version")
	if p != nil {
		return nil, p
	}
	if p := configSpecProblem(b.Spec); p != nil {
		return nil, p
	}
	pre, p := applyCondition(in.IfMatch, b.ResourceVersion)
	if p != nil {
		return nil, p
	}
	params := store.PutProviderConfigParams{Namespace: ns, Name: b.Name, Kind: b.Kind, KindVersion: version, IsDefault: b.IsDefault,
		Spec: b.Spec, Data: b.Data, Precondition: pre.Precondition}
	c, res, err := s.store.PutProviderConfig(ctx, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{doc: b.Spec, version: pre.in, value: func(f string) any {
			switch f {
			case "name":
				return params.Name
			case "kind":
				return params.Kind
			case "kind_version":
				return params.KindVersion
			case "is_default":
				return params.IsDefault
			}
			return nil
		}})
	}
	return &applyOutput[store.ProviderConfig]{Status: applyStatus(res), ApplyResult: res, ETag: etag(c.ResourceVersion), Body: c}, nil
}

// configSpecProblem refuses a spec that webhooksdk.MergeConfig would refuse.
// Before every delivery the dispatcher merges a resource's override onto its
// kind's default with it, so a stored config it cannot merge would stall
// every task that uses the config; the API refuses such a spec at the door,
// by the SDK's own rule.
func configSpecProblem(spec json.RawMessage) *Problem {
	err := webhooksdk.CheckConfigSpec(spec)
	if err == nil {
		return nil
	}
	const loc = "body.spec"
	msg := err.Error() + "; a provider config spec must be an object (it is merged key by key)"
	var value any
	if len(spec) <= 256 {
		value = spec
	}
	return newProblem(http.StatusBadRequest, typeInvalidDocument, loc+" "+msg,
		ProblemError{Location: loc, Message: msg, Value: value, Pointer: "/spec", Keyword: "type"})
}

func (s *Server) listProviderConfigs(ctx context.Context, in *listProviderConfigsInput) (*pageOutput[ProviderConfigList], error) {
	ns, p := s.namespaces(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	params := store.ListProviderConfigsParams{Namespace: ns, Kind: in.Kind, KindVersion: in.KindVersion, Limit: in.Limit,
		MaxBytes: s.cfg.ListPageBytes, Cursor: in.Cursor}
	if in.Default != "" {
		d := in.Default == "true"
		params.Default = &d
	}
	page, err := s.store.ListProviderConfigs(ctx, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, pageProblem(in.Cursor))
	}
	return &pageOutput[ProviderConfigList]{NextCursor: page.NextCursor,
		Body: ProviderConfigList{Items: page.Items, NextCursor: page.NextCursor}}, nil
}

func (s *Server) getProviderConfig(ctx context.Context, in *NamespacedName) (*versionedOutput[store.ProviderConfig], error) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	c, err := s.store.GetProviderConfig(ctx, ns, in.Name)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &versionedOutput[store.ProviderConfig]{ETag: etag(c.ResourceVersion), Body: c}, nil
}

func (s *Server) deleteProviderConfig(ctx context.Context, in *deleteByNameInput) (*struct{}, error) {
	return s.deleteNamed(ctx, in, s.store.DeleteProviderConfig)
}
