package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/webhooksdk"
)

// EndpointsConfig enables the /endpoints routes. The API does not deliver
// anything itself: the process that wires it injects the secret box, the
// egress policy check and, where a dispatcher runs, its live view.
type EndpointsConfig struct {
	// Box encrypts signing secrets at rest. Required.
	Box *store.SecretBox
	// ValidateURL refuses a target or health URL the dispatcher's egress
	// policy would refuse (http outside dev mode, a private address...).
	// Required.
	ValidateURL func(url string) error
	// Status returns the dispatcher's live view of an endpoint (health,
	// breaker, in-flight), or nil when no dispatcher runs in this process.
	Status func(name string) any
	// Test sends an endpoint a test delivery (a signed health request) and
	// returns its round trip, or nil when no dispatcher runs in this
	// process: POST /endpoints/{name}/test-delivery then answers 503.
	Test func(ctx context.Context, name string) (EndpointTest, error)
	// RotationGrace is how long the previous secret keeps signing after a
	// rotation. Defaults to 24h.
	RotationGrace time.Duration
}

// EndpointApply is the body of POST /endpoints.
type EndpointApply struct {
	Name               string               `json:"name" doc:"Unique across every namespace."`
	Namespace          string               `json:"namespace,omitempty" doc:"The namespace; when sent it must equal ?namespace= (omitted: default)." example:"default"`
	Kinds              []store.EndpointKind `json:"kinds"`
	Target             store.EndpointTarget `json:"target"`
	Health             store.EndpointHealth `json:"health,omitempty"`
	MaxConcurrency     int                  `json:"max_concurrency,omitempty" doc:"Defaults to 64."`
	MaxBatch           int                  `json:"max_batch,omitempty" doc:"Most tasks per request (1..256); defaults to 1, one task per request."`
	RequestTimeoutSecs int                  `json:"request_timeout_secs,omitempty" doc:"Defaults to 30."`
	Enabled            *bool                `json:"enabled,omitempty" doc:"Defaults to true."`
	// Secret lets the operator choose the signing secret, so the provider
	// can hold it before the endpoint exists and its first health probe
	// verifies.
	Secret string `json:"secret,omitempty" writeOnly:"true" doc:"Optional signing secret for a new endpoint: whsec_ followed by the standard base64 of 24 to 64 random bytes. Never echoed back. Used only when the apply creates the endpoint; rotate an existing one's with rotate-secret. Omitted = generated and returned once."`
	// ResourceVersion, when sent, makes the apply conditional on it.
	ResourceVersion int64 `json:"resource_version,omitempty" doc:"The resource_version the change was made from (a GET's): the apply is refused with 409, and changes nothing, when the object has been written since. Omitted = apply whatever the version."`
}

type endpointApplyBody struct {
	EndpointApply
	endpointReadOnly
}

// EndpointView is an endpoint as the API shows it. Secret is present only in
// the answer that created the endpoint or rotated its secret: it is never
// shown again.
type EndpointView struct {
	store.Endpoint
	Secret string `json:"secret,omitempty" doc:"The signing secret, shown only when it was just generated (never on a dry run). Store it now."`
	Live   any    `json:"live,omitempty" doc:"This dispatch pod's view: readiness per kind, circuit breaker, in-flight, back-off."`
}

type listEndpointsInput struct {
	NamespacesQuery
}

// EndpointList is the body of GET /endpoints.
type EndpointList struct {
	Items []EndpointView `json:"items"`
}

// RotatedSecret is the body of POST /endpoints/{name}/rotate-secret.
type RotatedSecret struct {
	Secret string `json:"secret" doc:"The new signing secret, shown once; empty on a dry run, whose secret is discarded."`
	// PreviousValidUntil is when the old secret stops signing.
	PreviousValidUntil time.Time `json:"previous_valid_until"`
}

func (s *Server) registerEndpoints() {
	if s.cfg.Endpoints == nil {
		return
	}
	register(s, huma.Operation{
		OperationID: "apply-endpoint", Method: http.MethodPost, Path: "/endpoints", Tags: []string{"Endpoints"},
		Summary: "Register or update a provider endpoint",
		Description: "Creates (201, with the signing secret shown once) or updates (200) the endpoint by name. " +
			"Targets are https URLs, Lambda functions (type lambda) or Function URLs (type lambda_url). " +
			"Target, custom AWS endpoint and health URLs must pass the dispatcher's egress policy (https; no private, loopback or metadata " +
			"addresses unless allowlisted or in dev mode).",
		Errors: []int{400, 409, 412, 422},
	}, EndpointApply{}, s.applyEndpoint)
	register(s, huma.Operation{
		OperationID: "list-endpoints", Method: http.MethodGet, Path: "/endpoints", Tags: []string{"Endpoints"},
		Summary: "List provider endpoints",
	}, nil, s.listEndpoints)
	register(s, huma.Operation{
		OperationID: "get-endpoint", Method: http.MethodGet, Path: "/endpoints/{name}", Tags: []string{"Endpoints"},
		Summary: "Get a provider endpoint and its live health", Errors: []int{404},
	}, nil, s.getEndpoint)
	register(s, huma.Operation{
		OperationID: "delete-endpoint", Method: http.MethodDelete, Path: "/endpoints/{name}", Tags: []string{"Endpoints"},
		Summary: "Delete a provider endpoint", DefaultStatus: http.StatusNoContent, Errors: []int{404, 412},
	}, nil, s.deleteEndpoint)
	register(s, huma.Operation{
		OperationID: "rotate-endpoint-secret", Method: http.MethodPost, Path: "/endpoints/{name}/rotate-secret", Tags: []string{"Endpoints"},
		Summary:     "Rotate an endpoint's signing secret",
		Description: "Returns the new secret once. Until previous_valid_until both secrets sign every delivery.",
		Errors:      []int{404},
	}, nil, s.rotateEndpointSecret)
	s.registerDeliveries()
}

// checkSecret refuses a signing secret given in a body (body.secret) that
// is not whsec_ and base64 of 24 to 64 bytes; none given is fine.
func checkSecret(secret string) *Problem {
	if secret == "" {
		return nil
	}
	if _, err := webhooksdk.ParseSecret(secret); err != nil {
		// The value is a secret: never echoed, not even when invalid.
		const msg = "must be whsec_ followed by the standard base64 of 24 to 64 bytes"
		return newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.secret "+msg,
			ProblemError{Location: "body.secret", Message: msg})
	}
	return nil
}

func (s *Server) applyEndpoint(ctx context.Context, in *nsApplyInput) (*applyOutput[EndpointView], error) {
	var b endpointApplyBody
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
	if p := checkSecret(b.Secret); p != nil {
		return nil, p
	}
	ec := s.cfg.Endpoints
	for loc, u := range map[string]string{"target.url": b.Target.URL, "target.endpoint_url": b.Target.EndpointURL, "health.url": b.Health.URL} {
		if u == "" {
			continue
		}
		if err := ec.ValidateURL(u); err != nil {
			return nil, s.problemFor(ctx, &store.InvalidError{Location: loc, Message: err.Error()}, problemOpts{})
		}
	}
	pre, p := applyCondition(in.IfMatch, b.ResourceVersion)
	if p != nil {
		return nil, p
	}
	ep, res, secret, err := s.store.PutEndpoint(ctx, ec.Box, store.PutEndpointParams{
		Namespace: ns, Name: b.Name, Kinds: b.Kinds, Target: b.Target, Health: b.Health,
		MaxConcurrency: b.MaxConcurrency, MaxBatch: b.MaxBatch, RequestTimeoutSecs: b.RequestTimeoutSecs, Enabled: b.Enabled,
		Secret: store.EndpointSecret(b.Secret), Precondition: pre.Precondition,
	})
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{version: pre.in})
	}
	v := EndpointView{Endpoint: ep}
	if b.Secret == "" {
		v.Secret = secret.Reveal() // generated: shown this once
	}
	return &applyOutput[EndpointView]{Status: applyStatus(res), ApplyResult: res, ETag: etag(ep.ResourceVersion), Body: v}, nil
}

func (s *Server) view(ep store.Endpoint) EndpointView {
	v := EndpointView{Endpoint: ep}
	if st := s.cfg.Endpoints.Status; st != nil {
		v.Live = st(ep.Name)
	}
	return v
}

func (s *Server) listEndpoints(ctx context.Context, in *listEndpointsInput) (*bodyOutput[EndpointList], error) {
	ns, p := s.namespaces(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	eps, err := s.store.ListEndpoints(ctx, ns)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{})
	}
	out := EndpointList{Items: make([]EndpointView, 0, len(eps))}
	for _, ep := range eps {
		out.Items = append(out.Items, s.view(ep))
	}
	return &bodyOutput[EndpointList]{Body: out}, nil
}

// endpointIn reads the endpoint name of the namespace the query names; one
// of another namespace is not found.
func (s *Server) endpointIn(ctx context.Context, in *NamespacedName) (store.Endpoint, *Problem) {
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return store.Endpoint{}, p
	}
	ep, err := s.store.GetEndpoint(ctx, in.Name)
	if err == nil && ep.Namespace != ns {
		err = &store.NotFoundError{Message: fmt.Sprintf("endpoint %q does not exist in namespace %q", in.Name, ns)}
	}
	if err != nil {
		return store.Endpoint{}, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return ep, nil
}

func (s *Server) getEndpoint(ctx context.Context, in *NamespacedName) (*versionedOutput[EndpointView], error) {
	ep, p := s.endpointIn(ctx, in)
	if p != nil {
		return nil, p
	}
	return &versionedOutput[EndpointView]{ETag: etag(ep.ResourceVersion), Body: s.view(ep)}, nil
}

func (s *Server) deleteEndpoint(ctx context.Context, in *deleteByNameInput) (*struct{}, error) {
	return s.deleteNamed(ctx, in, s.store.DeleteEndpoint)
}

func (s *Server) rotateEndpointSecret(ctx context.Context, in *NamespacedName) (*bodyOutput[RotatedSecret], error) {
	if _, p := s.endpointIn(ctx, in); p != nil {
		return nil, p
	}
	grace := s.cfg.Endpoints.RotationGrace
	if grace <= 0 {
		grace = store.SecretRotationGraceDefault
	}
	sec, until, err := s.store.RotateEndpointSecret(ctx, s.cfg.Endpoints.Box, in.Name, grace)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[RotatedSecret]{Body: RotatedSecret{Secret: sec.Reveal(), PreviousValidUntil: until}}, nil
}

// errNoEndpoints guards a misconfigured wiring.
var errNoEndpoints = errors.New("api: Endpoints needs Box and ValidateURL")
