package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// kindVersionPath names a kind version in the path.
type kindVersionPath struct {
	Kind    string `path:"kind" doc:"The kind, e.g. vpc." example:"vpc"`
	Version int    `path:"version" minimum:"1" maximum:"32767" doc:"The kind version." example:"1"`
}

// manifestBody decodes a manifest. Its kind_version shadows the embedded
// one so that every out-of-range number is a 422, not a decoding error.
type manifestBody struct {
	model.KindManifest
	KindVersion versionField `json:"kind_version"`
}

type putManifestInput struct {
	Kind    string `path:"kind" doc:"The kind, e.g. vpc." example:"vpc"`
	RawBody []byte
}

type applyOutput[T any] struct {
	Status      int
	ApplyResult store.ApplyResult `header:"X-Apply-Result" enum:"created,configured,unchanged" doc:"What the apply did."`
	ETag        string            `header:"ETag" doc:"The object's resource_version as an entity tag, for If-Match; absent for an object without versions (a manifest)."`
	Body        T
}

type bodyOutput[T any] struct {
	Body T
}

// pageOutput is the answer of a list: one page, its cursor also in
// X-Next-Cursor.
type pageOutput[T any] struct {
	NextCursor string `header:"X-Next-Cursor" doc:"Same as body.next_cursor."`
	Body       T
}

// versionedOutput is the answer of a read or delete of one object that
// carries a resource_version.
type versionedOutput[T any] struct {
	ETag string `header:"ETag" doc:"The object's resource_version as an entity tag, for If-Match."`
	Body T
}

// ManifestList is the body of GET /manifests.
type ManifestList struct {
	Items []*model.KindManifest `json:"items"`
}

// KindList is the body of GET /kinds.
type KindList struct {
	Items []store.KindVersions `json:"items"`
}

// KindSchemas is the body of GET /kinds/{kind}/versions/{version}/schema.
type KindSchemas struct {
	Kind         string          `json:"kind"`
	KindVersion  int             `json:"kind_version"`
	SpecSchema   json.RawMessage `json:"spec_schema,omitempty" doc:"Validates resource specs; absent = untyped."`
	StatusSchema json.RawMessage `json:"status_schema,omitempty" doc:"Documents handler-written status (advisory)."`
	ConfigSchema json.RawMessage `json:"config_schema,omitempty" doc:"Validates provider config specs; absent = untyped."`
}

// KindConfigPut is the body of PUT .../config: the six policy fields. kind
// and kind_version may be sent, and must then match the path.
type KindConfigPut struct {
	Kind                 string       `json:"kind,omitempty" doc:"Optional; must match the path."`
	KindVersion          versionField `json:"kind_version,omitempty" doc:"Optional; must match the path."`
	MaxInflight          int          `json:"max_inflight" minimum:"0"`
	TaskDeadlineSecs     int          `json:"task_deadline_secs" minimum:"0"`
	ResyncIntervalSecs   int          `json:"resync_interval_secs" minimum:"0"`
	ResyncRecomposes     bool         `json:"resync_recomposes"`
	OrphanGraceSecs      int          `json:"orphan_grace_secs" minimum:"0"`
	MaxTransientAttempts int          `json:"max_transient_attempts" minimum:"0"`
	// ResourceVersion, when sent, makes the apply conditional on it.
	ResourceVersion int64 `json:"resource_version,omitempty" doc:"The resource_version the change was made from (a GET's): the apply is refused with 409, and changes nothing, when the object has been written since. Omitted = apply whatever the version."`
}

type kindConfigBody struct {
	KindConfigPut
	kindConfigReadOnly
}

type putKindConfigInput struct {
	Kind    string `path:"kind" doc:"The kind, e.g. vpc." example:"vpc"`
	Version int    `path:"version" minimum:"1" maximum:"32767" doc:"The kind version." example:"1"`
	Conditional
	RawBody []byte
}

func (s *Server) registerManifests() {
	register(s, huma.Operation{
		OperationID: "put-manifest", Method: http.MethodPut, Path: "/kinds/{kind}/manifest", Tags: []string{"Kinds"},
		Summary: "Publish a kind manifest",
		Description: "Publishes the manifest of (kind, kind_version). Identical → 200 unchanged; an additive schema change → 200 configured; " +
			"a breaking change to spec_schema or config_schema → 409 (publish a new kind_version instead). " +
			"The manifest's policy seeds the kind version's config on first publish only.",
		Errors: []int{400, 409, 422},
	}, model.KindManifest{}, s.putManifest)
	register(s, huma.Operation{
		OperationID: "get-manifest", Method: http.MethodGet, Path: "/kinds/{kind}/versions/{version}/manifest", Tags: []string{"Kinds"},
		Summary: "Get a kind manifest", Errors: []int{404},
	}, nil, s.getManifest)
	register(s, huma.Operation{
		OperationID: "delete-manifest", Method: http.MethodDelete, Path: "/kinds/{kind}/versions/{version}/manifest", Tags: []string{"Kinds"},
		Summary: "Delete a kind manifest", DefaultStatus: http.StatusNoContent,
		Description: "Refused with 409 while resources, provider configs or reactor bindings use the version.",
		Errors:      []int{404, 409},
	}, nil, s.deleteManifest)
	register(s, huma.Operation{
		OperationID: "list-manifests", Method: http.MethodGet, Path: "/manifests", Tags: []string{"Kinds"},
		Summary: "List kind manifests",
	}, nil, s.listManifests)
	register(s, huma.Operation{
		OperationID: "list-kinds", Method: http.MethodGet, Path: "/kinds", Tags: []string{"Kinds"},
		Summary: "List kinds and their versions",
	}, nil, s.listKinds)
	register(s, huma.Operation{
		OperationID: "get-kind-schema", Method: http.MethodGet, Path: "/kinds/{kind}/versions/{version}/schema", Tags: []string{"Kinds"},
		Summary: "Get a kind version's schemas", Errors: []int{404},
	}, nil, s.getKindSchema)
	register(s, huma.Operation{
		OperationID: "get-kind-config", Method: http.MethodGet, Path: "/kinds/{kind}/versions/{version}/config", Tags: []string{"Kinds"},
		Summary: "Get a kind version's operational config", Errors: []int{404},
	}, nil, s.getKindConfig)
	register(s, huma.Operation{
		OperationID: "put-kind-config", Method: http.MethodPut, Path: "/kinds/{kind}/versions/{version}/config", Tags: []string{"Kinds"},
		Summary:     "Replace a kind version's operational config",
		Description: "Replaces all six fields (an omitted one becomes 0/false). Takes effect on the next claim; no restart.",
		Errors:      []int{400, 404, 409, 412, 422},
	}, KindConfigPut{}, s.putKindConfig)
}

func (s *Server) putManifest(ctx context.Context, in *putManifestInput) (*applyOutput[*model.KindManifest], error) {
	var b manifestBody
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	m := b.KindManifest
	switch {
	case m.Kind == "":
		if !model.ValidKind(in.Kind) {
			return nil, s.problemFor(ctx, &store.InvalidError{Location: "kind", Message: "must match ^[a-z][a-z0-9-]{0,62}$"},
				problemOpts{in: "path", value: func(string) any { return in.Kind }})
		}
		m.Kind = in.Kind
	case m.Kind != in.Kind:
		return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid,
			"body.kind must match the kind in the path (or be omitted)",
			ProblemError{Location: "body.kind", Message: "must equal the path's kind " + strconv.Quote(in.Kind), Value: m.Kind})
	}
	v, p := b.KindVersion.value("body.kind_version")
	if p != nil {
		return nil, p
	}
	m.KindVersion = v
	res, err := s.store.PutManifest(ctx, &m)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{value: manifestValue(&m)})
	}
	if res != store.ApplyUnchanged {
		// This pod accepts resources of the new manifest at once; others
		// converge on the NOTIFY within moments.
		if err := s.kinds.Refresh(ctx); err != nil {
			s.log.Warn("api: kind cache refresh after a manifest write failed; it catches up on the next notification",
				"kind", m.Kind, "kind_version", m.KindVersion, "err", err)
		}
	}
	stored, err := s.store.GetManifest(ctx, m.Kind, m.KindVersion)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	return &applyOutput[*model.KindManifest]{Status: applyStatus(res), ApplyResult: res, Body: stored}, nil
}

// manifestValue echoes a manifest's top-level fields in errors.
func manifestValue(m *model.KindManifest) func(string) any {
	return func(field string) any {
		switch field {
		case "kind":
			return m.Kind
		case "kind_version":
			return m.KindVersion
		case "finalizer_name":
			return m.FinalizerName
		}
		return nil
	}
}

func applyStatus(r store.ApplyResult) int {
	if r == store.ApplyCreated {
		return http.StatusCreated
	}
	return http.StatusOK
}

func (s *Server) getManifest(ctx context.Context, in *kindVersionPath) (*bodyOutput[*model.KindManifest], error) {
	m, err := s.store.GetManifest(ctx, in.Kind, in.Version)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[*model.KindManifest]{Body: m}, nil
}

func (s *Server) deleteManifest(ctx context.Context, in *kindVersionPath) (*struct{}, error) {
	if err := s.store.DeleteManifest(ctx, in.Kind, in.Version); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	if err := s.kinds.Refresh(ctx); err != nil {
		s.log.Warn("api: kind cache refresh after a manifest delete failed", "kind", in.Kind, "kind_version", in.Version, "err", err)
	}
	return &struct{}{}, nil
}

type listManifestsInput struct {
	Kind string `query:"kind" doc:"Only this kind's versions."`
}

func (s *Server) listManifests(ctx context.Context, in *listManifestsInput) (*bodyOutput[ManifestList], error) {
	ms, err := s.store.ListManifests(ctx, store.ListManifestsParams{Kind: in.Kind})
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query"})
	}
	if ms == nil {
		ms = []*model.KindManifest{}
	}
	return &bodyOutput[ManifestList]{Body: ManifestList{Items: ms}}, nil
}

func (s *Server) listKinds(ctx context.Context, _ *struct{}) (*bodyOutput[KindList], error) {
	ks, err := s.store.ListKinds(ctx)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	if ks == nil {
		ks = []store.KindVersions{}
	}
	return &bodyOutput[KindList]{Body: KindList{Items: ks}}, nil
}

func (s *Server) getKindSchema(ctx context.Context, in *kindVersionPath) (*bodyOutput[KindSchemas], error) {
	m, err := s.store.GetManifest(ctx, in.Kind, in.Version)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[KindSchemas]{Body: KindSchemas{Kind: m.Kind, KindVersion: m.KindVersion,
		SpecSchema: m.SpecSchema, StatusSchema: m.StatusSchema, ConfigSchema: m.ConfigSchema}}, nil
}

func (s *Server) getKindConfig(ctx context.Context, in *kindVersionPath) (*versionedOutput[store.KindConfig], error) {
	c, err := s.store.GetKindConfig(ctx, in.Kind, in.Version)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &versionedOutput[store.KindConfig]{ETag: etag(c.ResourceVersion), Body: c}, nil
}

func (s *Server) putKindConfig(ctx context.Context, in *putKindConfigInput) (*applyOutput[store.KindConfig], error) {
	var b kindConfigBody
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	if b.Kind != "" && b.Kind != in.Kind {
		return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.kind must match the path's kind (or be omitted)",
			ProblemError{Location: "body.kind", Message: "must equal " + strconv.Quote(in.Kind), Value: b.Kind})
	}
	if len(b.KindVersion.raw) > 0 {
		v, p := b.KindVersion.value("body.kind_version")
		if p != nil {
			return nil, p
		}
		if v != in.Version {
			return nil, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.kind_version must match the path's version (or be omitted)",
				ProblemError{Location: "body.kind_version", Message: "must equal the path's version", Value: v})
		}
	}
	pre, p := applyCondition(in.IfMatch, b.ResourceVersion)
	if p != nil {
		return nil, p
	}
	c := store.KindConfig{Kind: in.Kind, KindVersion: in.Version, MaxInflight: b.MaxInflight, TaskDeadlineSecs: b.TaskDeadlineSecs,
		ResyncIntervalSecs: b.ResyncIntervalSecs, ResyncRecomposes: b.ResyncRecomposes, OrphanGraceSecs: b.OrphanGraceSecs,
		MaxTransientAttempts: b.MaxTransientAttempts}
	out, res, err := s.store.PutKindConfig(ctx, c, pre.Precondition)
	if err != nil {
		var nf *store.NotFoundError
		o := problemOpts{version: pre.in, value: func(f string) any { return kindConfigValue(c, f) }}
		if errors.As(err, &nf) {
			o.in = "path"
		}
		return nil, s.problemFor(ctx, err, o)
	}
	return &applyOutput[store.KindConfig]{Status: http.StatusOK, ApplyResult: res, ETag: etag(out.ResourceVersion), Body: out}, nil
}

func kindConfigValue(c store.KindConfig, field string) any {
	switch field {
	case "max_inflight":
		return c.MaxInflight
	case "task_deadline_secs":
		return c.TaskDeadlineSecs
	case "resync_interval_secs":
		return c.ResyncIntervalSecs
	case "orphan_grace_secs":
		return c.OrphanGraceSecs
	case "max_transient_attempts":
		return c.MaxTransientAttempts
	}
	return nil
}
