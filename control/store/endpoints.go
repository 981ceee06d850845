package store

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/webhooksdk"
)

// Endpoint is a provider endpoint the dispatcher pushes tasks to: where
// (Target), for which (kind, kind_version) pairs (Kinds), how readiness is
// probed (Health), and how hard it may be driven. Its signing secret is never
// part of it: the secret is shown once, by CreateEndpoint, PutEndpoint (when
// it creates) and RotateEndpointSecret.
type Endpoint struct {
	Name               string         `json:"name" db:"name" doc:"Unique name (across every namespace): letters, digits, '.', '_' or '-', at most 63."`
	Namespace          string         `json:"namespace" db:"namespace" doc:"The namespace the endpoint belongs to. An endpoint of default also serves the namespaces that have no endpoint of their own for a kind."`
	Kinds              []EndpointKind `json:"kinds" db:"kinds" doc:"The (kind, kind_version) pairs this endpoint serves."`
	Target             EndpointTarget `json:"target" db:"target" doc:"Where tasks are delivered."`
	Health             EndpointHealth `json:"health" db:"health" doc:"Readiness probing; without a URL the endpoint is ready for all its kinds while its circuit breaker is closed."`
	MaxConcurrency     int            `json:"max_concurrency" db:"max_concurrency" doc:"Most deliveries in flight at once (HTTP requests awaiting an answer)."`
	MaxBatch           int            `json:"max_batch" db:"max_batch" doc:"Most tasks sent in one signed request (a {\"type\":\"batch\"} body, docs/protocol.md §16); 1 = one task per request. One batch takes one max_concurrency slot."`
	RequestTimeoutSecs int            `json:"request_timeout_secs" db:"request_timeout_secs" doc:"Timeout of one HTTP request; separate from the kind's task deadline."`
	Enabled            bool           `json:"enabled" db:"enabled" doc:"A disabled endpoint gets no deliveries."`
	DisabledReason     string         `json:"disabled_reason,omitempty" db:"disabled_reason" readOnly:"true" doc:"Why the endpoint was disabled, e.g. it answered 410 Gone."`
	// SecretRotationEndsAt is when the previous signing secret stops signing
	// after a rotation; nil when no rotation is in progress.
	SecretRotationEndsAt *time.Time `json:"secret_rotation_ends_at,omitempty" db:"secret_rotation_ends_at" readOnly:"true" doc:"Until this instant both the previous and the current secret sign each delivery."`
	CreatedAt            time.Time  `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt            time.Time  `json:"updated_at" db:"updated_at" readOnly:"true"`
	// ResourceVersion changes on every write of the endpoint: an apply, a
	// secret rotation, or the dispatcher disabling it (410 Gone).
	ResourceVersion int64 `json:"resource_version" db:"resource_version" doc:"Changes on every write of the endpoint (an apply, a secret rotation, a 410 disabling it); send it back (or If-Match) to make a write conditional on it."`
}

// EndpointKind is one (kind, kind_version) pair an endpoint serves.
type EndpointKind struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
}

// Pair returns the "kind/version" form the claim path uses.
func (k EndpointKind) Pair() string { return fmt.Sprintf("%s/%d", k.Kind, k.KindVersion) }

// Target types.
const (
	// TargetHTTPS delivers over HTTPS (any HTTPS server, including a Lambda
	// Function URL with auth NONE).
	TargetHTTPS = "https"
	// TargetLambda invokes an AWS Lambda function through the Invoke API.
	TargetLambda = "lambda"
	// TargetLambdaURL POSTs to a Lambda Function URL, SigV4-signed when its
	// auth is AWS_IAM.
	TargetLambdaURL = "lambda_url"
)

// Lambda invocation types and Function URL auth modes.
const (
	InvocationSync  = "sync"  // RequestResponse: the outcome is the function's answer
	InvocationAsync = "async" // Event: accepted, the outcome comes by callback
	AuthAWSIAM      = "aws_iam"
	AuthNone        = "none"
)

// EndpointTarget says where deliveries go: an https URL, a Lambda function
// (type lambda), or a Lambda Function URL (type lambda_url).
type EndpointTarget struct {
	Type string `json:"type" enum:"https,lambda,lambda_url" doc:"The transport."`
	URL  string `json:"url,omitempty" doc:"https and lambda_url: the URL every task is POSTed to."`
	// Function is a function name or ARN (lambda); with an ARN, region may
	// be omitted.
	Function   string `json:"function,omitempty" doc:"lambda: the function name or ARN (a qualified ARN names the version or alias)."`
	Region     string `json:"region,omitempty" doc:"lambda: the function's region (taken from an ARN when omitted). lambda_url: the signing region (taken from the Function URL when omitted)."`
	Invocation string `json:"invocation,omitempty" enum:"sync,async" doc:"lambda: sync (RequestResponse, the default) or async (Event: the outcome comes by callback)."`
	Qualifier  string `json:"qualifier,omitempty" doc:"lambda: a version or alias to invoke."`
	// RoleARN is assumed through STS for this endpoint's calls; without it
	// the dispatcher's own credentials (the default chain) sign them.
	RoleARN string `json:"role_arn,omitempty" doc:"lambda, lambda_url: an IAM role assumed (STS AssumeRole) to invoke; omitted = the dispatcher's own credentials."`
	// EndpointURL replaces the AWS regional endpoint (a VPC endpoint, a
	// test server); it must pass the egress policy like any target URL.
	EndpointURL string `json:"endpoint_url,omitempty" doc:"lambda: a custom Lambda API endpoint; it must pass the egress policy (allowlist it)."`
	Auth        string `json:"auth,omitempty" enum:"aws_iam,none" doc:"lambda_url: aws_iam (SigV4-signed, the default) or none (the webhook signature only)."`
	// CABundle replaces the system roots for verifying the target's
	// certificate (a private CA).
	CABundle string `json:"ca_bundle,omitempty" doc:"PEM CA certificates that verify the target's certificate instead of the system roots."`
	// ClientCertFile and ClientKeyFile are paths on each dispatch pod (a
	// mounted secret) to a PEM keypair presented for mutual TLS; they are
	// references, so key material never enters the database.
	ClientCertFile string `json:"client_cert_file,omitempty" doc:"Path on each dispatch pod of the PEM client certificate for mutual TLS."`
	ClientKeyFile  string `json:"client_key_file,omitempty" doc:"Path on each dispatch pod of the PEM client key for mutual TLS."`
	// MaxRequestBytes is the largest envelope the target accepts; a larger
	// one is sent thin, with a payload_url the provider fetches the rest
	// from (docs/protocol.md §5.1).
	MaxRequestBytes int `json:"max_request_bytes,omitempty" minimum:"0" doc:"Largest envelope POSTed whole; a larger one is sent thin with payload_url. 0 = no limit."`
}

// Health probe types (EndpointHealth.Type).
const (
	// HealthInvoke probes a Lambda target by invoking it synchronously with
	// the health request.
	HealthInvoke = "invoke"
	// HealthNone probes nothing: the endpoint is ready while its circuit
	// breaker is closed (the same as no health URL).
	HealthNone = "none"
)

// EndpointHealth configures readiness probing. Zero thresholds and interval
// take the dispatcher's defaults.
type EndpointHealth struct {
	Type               string `json:"type,omitempty" enum:"invoke,none" doc:"Lambda targets: invoke (a sync invoke of the health request, default interval 60) or none. Omitted: probe url if set."`
	URL                string `json:"url,omitempty" doc:"URL probed with a signed POST {\"type\":\"health\"}; empty disables probing."`
	IntervalSecs       int    `json:"interval_secs,omitempty" doc:"Probe interval (jittered); 0 = the dispatcher default (10)."`
	HealthyThreshold   int    `json:"healthy_threshold,omitempty" doc:"Consecutive ready answers that make a kind ready; 0 = default (2)."`
	UnhealthyThreshold int    `json:"unhealthy_threshold,omitempty" doc:"Consecutive failed or unready answers that make a kind unready; 0 = default (3)."`
}

// PutEndpointParams is an endpoint as an operator declares it.
type PutEndpointParams struct {
	// Namespace is the endpoint's namespace; "" is DefaultNamespace.
	Namespace string
	Name      string
	Kinds     []EndpointKind
	Target    EndpointTarget
	Health    EndpointHealth
	// MaxConcurrency defaults to EndpointMaxConcurrencyDefault when 0.
	MaxConcurrency int
	// MaxBatch defaults to 1 (no batching) when 0.
	MaxBatch int
	// RequestTimeoutSecs defaults to EndpointRequestTimeoutDefault when 0.
	RequestTimeoutSecs int
	// Enabled defaults to true when nil. Enabling clears DisabledReason.
	Enabled *bool
	// Secret, when set, is the signing secret a created endpoint gets
	// instead of a generated one ("whsec_<base64>", see
	// webhooksdk.ParseSecret). It is used only when the call creates the
	// endpoint; an existing endpoint's secret changes only by rotation.
	Secret EndpointSecret
	// Precondition makes PutEndpoint conditional on the endpoint's version.
	Precondition Precondition
}

// Endpoint defaults and limits.
const (
	EndpointMaxConcurrencyDefault = 64
	EndpointRequestTimeoutDefault = 30
	EndpointMaxConcurrencyMax     = 100000
	EndpointRequestTimeoutMax     = 3600
	// EndpointMaxBatchMax bounds max_batch (the migration's CHECK agrees).
	EndpointMaxBatchMax = 256
	// SecretRotationGraceDefault is how long the previous secret keeps
	// signing after a rotation.
	SecretRotationGraceDefault = 24 * time.Hour
)

var endpointNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// endpointCols are the columns of an Endpoint, named for its db tags; the
// jsonb columns (kinds, target, health) decode straight into their structs.
const endpointCols = `name, namespace, kinds, target, health, max_concurrency, max_batch, request_timeout_secs, enabled, disabled_reason,
       CASE WHEN prev_secret_expires > now() THEN prev_secret_expires END AS secret_rotation_ends_at, created_at, updated_at,
       resource_version`

// rowToEndpoint scans endpointCols.
func rowToEndpoint(row pgx.CollectableRow) (Endpoint, error) {
	e, err := pgx.RowToStructByName[Endpoint](row)
	e.normalizeKinds()
	return e, err
}

// normalizeKinds lists no kinds as [], never null.
func (e *Endpoint) normalizeKinds() {
	if e.Kinds == nil {
		e.Kinds = []EndpointKind{}
	}
}

// endpointApplied is a row of endpointUpsertSQL: the endpoint and what the
// write did.
type endpointApplied struct {
	Endpoint
	Result ApplyResult `db:"result"`
}

// normalize fills defaults and checks every field, returning an
// *InvalidError naming the first bad one. It checks shape only: whether a
// target URL is allowed (https-only, no private addresses) is egress policy,
// which the API applies with egress.ValidateTargetURL before calling the
// store, and the dispatcher enforces again at dial time.
func (p *PutEndpointParams) normalize() error {
	if p.MaxConcurrency == 0 {
		p.MaxConcurrency = EndpointMaxConcurrencyDefault
	}
	if p.MaxBatch == 0 {
		p.MaxBatch = 1
	}
	if p.RequestTimeoutSecs == 0 {
		p.RequestTimeoutSecs = EndpointRequestTimeoutDefault
	}
	switch {
	case !endpointNameRE.MatchString(p.Name):
		return &InvalidError{Location: "name", Message: "must be 1-63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit"}
	case len(p.Kinds) == 0:
		return &InvalidError{Location: "kinds", Message: "must list at least one {kind, kind_version}"}
	case p.MaxConcurrency < 1 || p.MaxConcurrency > EndpointMaxConcurrencyMax:
		return &InvalidError{Location: "max_concurrency", Message: fmt.Sprintf("must be in 1..%d", EndpointMaxConcurrencyMax)}
	case p.MaxBatch < 1 || p.MaxBatch > EndpointMaxBatchMax:
		return &InvalidError{Location: "max_batch", Message: fmt.Sprintf("must be in 1..%d", EndpointMaxBatchMax)}
	case p.RequestTimeoutSecs < 1 || p.RequestTimeoutSecs > EndpointRequestTimeoutMax:
		return &InvalidError{Location: "request_timeout_secs", Message: fmt.Sprintf("must be in 1..%d", EndpointRequestTimeoutMax)}
	}
	seen := make(map[EndpointKind]bool, len(p.Kinds))
	for i, k := range p.Kinds {
		loc := fmt.Sprintf("kinds[%d]", i)
		switch {
		case !model.ValidKind(k.Kind):
			return &InvalidError{Location: loc + ".kind", Message: "must be a kind name matching ^[a-z][a-z0-9-]{0,62}$"}
		case !model.ValidKindVersion(k.KindVersion):
			return &InvalidError{Location: loc + ".kind_version", Message: fmt.Sprintf("must be in 1..%d", model.MaxKindVersion)}
		case seen[k]:
			return &InvalidError{Location: loc, Message: fmt.Sprintf("%s is listed twice", k.Pair())}
		}
		seen[k] = true
	}
	if err := p.Target.validate(); err != nil {
		return err
	}
	return p.Health.validate(p.Target)
}

func (t *EndpointTarget) validate() error {
	switch t.Type {
	case TargetHTTPS:
		if f := t.lambdaField(); f != "" {
			return &InvalidError{Location: "target." + f, Message: "applies to lambda and lambda_url targets only"}
		}
	case TargetLambda:
		return t.validateLambda()
	case TargetLambdaURL:
		return t.validateLambdaURL()
	default:
		return &InvalidError{Location: "target.type", Message: fmt.Sprintf("%q is not a supported target type (supported: %s, %s, %s)",
			t.Type, TargetHTTPS, TargetLambda, TargetLambdaURL)}
	}
	if err := checkURL(t.URL); err != nil {
		return &InvalidError{Location: "target.url", Message: err.Error()}
	}
	if t.CABundle != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(t.CABundle)) {
		return &InvalidError{Location: "target.ca_bundle", Message: "holds no PEM certificate"}
	}
	if t.MaxRequestBytes < 0 {
		return &InvalidError{Location: "target.max_request_bytes", Message: "must not be negative (0 = no limit)"}
	}
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		return &InvalidError{Location: "target.client_key_file", Message: "client_cert_file and client_key_file go together"}
	}
	return nil
}

// lambdaField names the first Lambda-only field set, or "".
func (t *EndpointTarget) lambdaField() string {
	for _, f := range []struct{ name, v string }{{"function", t.Function}, {"region", t.Region}, {"invocation", t.Invocation},
		{"qualifier", t.Qualifier}, {"role_arn", t.RoleARN}, {"endpoint_url", t.EndpointURL}, {"auth", t.Auth}} {
		if f.v != "" {
			return f.name
		}
	}
	return ""
}

// httpsField names the first https-only field set, or "".
func (t *EndpointTarget) httpsField() string {
	switch {
	case t.CABundle != "":
		return "ca_bundle"
	case t.ClientCertFile != "":
		return "client_cert_file"
	case t.ClientKeyFile != "":
		return "client_key_file"
	}
	return ""
}

var (
	// A function name, or a full ARN: arn:partition:lambda:region:account:function:name[:qualifier].
	lambdaNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	lambdaARNRE  = regexp.MustCompile(`^arn:aws[a-z-]*:lambda:([a-z0-9-]+):\d{12}:function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]{1,128})?$`)
	regionRE     = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d{1,2}$`)
	qualifierRE  = regexp.MustCompile(`^[A-Za-z0-9$_-]{1,128}$`)
	roleARNRE    = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$`)
	// A Function URL: https://<url-id>.lambda-url.<region>.on.aws/
	functionURLRE = regexp.MustCompile(`^[a-z0-9]{1,63}\.lambda-url\.([a-z]{2}(-[a-z]+)+-\d{1,2})\.on\.aws$`)
)

// FunctionURLRegion returns the region of a Function URL's host, or "" if
// the host is not a Function URL's.
func FunctionURLRegion(host string) string {
	if m := functionURLRE.FindStringSubmatch(host); m != nil {
		return m[1]
	}
	return ""
}

func (t *EndpointTarget) validateLambda() error {
	switch {
	case t.URL != "":
		return &InvalidError{Location: "target.url", Message: "does not apply to lambda targets: name the function in target.function"}
	case t.Auth != "":
		return &InvalidError{Location: "target.auth", Message: "applies to lambda_url targets only: the Invoke API is always SigV4-signed"}
	case t.httpsField() != "":
		return &InvalidError{Location: "target." + t.httpsField(), Message: "applies to https targets only"}
	case t.Function == "":
		return &InvalidError{Location: "target.function", Message: "is required: a function name or ARN"}
	}
	arnRegion := ""
	if m := lambdaARNRE.FindStringSubmatch(t.Function); m != nil {
		arnRegion = m[1]
	} else if !lambdaNameRE.MatchString(t.Function) {
		return &InvalidError{Location: "target.function", Message: "must be a function name (1-64 letters, digits, '-' or '_') or a function ARN (arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>])"}
	}
	if err := t.resolveRegion(arnRegion, "function ARN", "is required with a function name (or give the function's ARN)"); err != nil {
		return err
	}
	switch t.Invocation {
	case "":
		t.Invocation = InvocationSync
	case InvocationSync, InvocationAsync:
	default:
		return &InvalidError{Location: "target.invocation", Message: "must be sync or async"}
	}
	if t.Qualifier != "" && !qualifierRE.MatchString(t.Qualifier) {
		return &InvalidError{Location: "target.qualifier", Message: "must be a version or alias: 1-128 letters, digits, '$', '-' or '_'"}
	}
	if err := t.validateRole(); err != nil {
		return err
	}
	if t.EndpointURL != "" {
		if err := checkURL(t.EndpointURL); err != nil {
			return &InvalidError{Location: "target.endpoint_url", Message: err.Error()}
		}
	}
	return nil
}

func (t *EndpointTarget) validateRole() error {
	if t.RoleARN != "" && !roleARNRE.MatchString(t.RoleARN) {
		return &InvalidError{Location: "target.role_arn", Message: "must be an IAM role ARN: arn:aws:iam::<account>:role/<name>"}
	}
	return nil
}

// validateLambdaURL accepts a Function URL
// (https://<id>.lambda-url.<region>.on.aws/), or a URL whose host is a
// literal address or localhost: an operator-allowlisted stand-in (a test
// server), which the egress policy refuses unless allowlisted or in dev
// mode, and which needs an explicit region to sign for.
func (t *EndpointTarget) validateLambdaURL() error {
	for _, f := range []struct{ name, v string }{{"function", t.Function}, {"invocation", t.Invocation},
		{"qualifier", t.Qualifier}, {"endpoint_url", t.EndpointURL}} {
		if f.v != "" {
			return &InvalidError{Location: "target." + f.name, Message: "applies to lambda targets only"}
		}
	}
	if f := t.httpsField(); f != "" {
		return &InvalidError{Location: "target." + f, Message: "applies to https targets only"}
	}
	if err := checkURL(t.URL); err != nil {
		return &InvalidError{Location: "target.url", Message: err.Error()}
	}
	u, _ := url.Parse(t.URL) // checkURL parsed it
	host := u.Hostname()
	urlRegion := FunctionURLRegion(host)
	switch {
	case urlRegion != "" && u.Scheme != "https":
		return &InvalidError{Location: "target.url", Message: "a Function URL is https"}
	case urlRegion == "" && !literalHost(host):
		return &InvalidError{Location: "target.url", Message: "must be a Function URL: https://<url-id>.lambda-url.<region>.on.aws/"}
	}
	if err := t.resolveRegion(urlRegion, "Function URL", "is required when the URL is not a Function URL"); err != nil {
		return err
	}
	switch t.Auth {
	case "":
		t.Auth = AuthAWSIAM
	case AuthAWSIAM, AuthNone:
	default:
		return &InvalidError{Location: "target.auth", Message: "must be aws_iam or none"}
	}
	if t.Auth == AuthNone && t.RoleARN != "" {
		return &InvalidError{Location: "target.role_arn", Message: "signs requests, so it needs auth aws_iam"}
	}
	return t.validateRole()
}

// resolveRegion takes the target's region from derived (the region its
// function ARN or Function URL names, what) when none is given, and checks
// a given one against it; need is the message when neither says.
func (t *EndpointTarget) resolveRegion(derived, what, need string) error {
	switch {
	case t.Region == "" && derived == "":
		return &InvalidError{Location: "target.region", Message: need}
	case t.Region == "":
		t.Region = derived
	case !regionRE.MatchString(t.Region):
		return &InvalidError{Location: "target.region", Message: "must be an AWS region, like us-east-1"}
	case derived != "" && t.Region != derived:
		return &InvalidError{Location: "target.region", Message: fmt.Sprintf("is %s but the %s is in %s", t.Region, what, derived)}
	}
	return nil
}

// literalHost holds for an IP address or localhost.
func literalHost(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil || host == "localhost"
}

// IsLambda holds for the targets invoked through AWS (lambda, lambda_url).
func (t EndpointTarget) IsLambda() bool { return t.Type == TargetLambda || t.Type == TargetLambdaURL }

func (h *EndpointHealth) validate(t EndpointTarget) error {
	switch h.Type {
	case "", HealthNone:
	case HealthInvoke:
		if !t.IsLambda() {
			return &InvalidError{Location: "health.type", Message: "invoke applies to lambda and lambda_url targets only"}
		}
	default:
		return &InvalidError{Location: "health.type", Message: "must be invoke or none (or omitted: probe health.url)"}
	}
	switch {
	case h.URL != "" && t.IsLambda():
		return &InvalidError{Location: "health.url", Message: "does not apply to Lambda targets: use health.type invoke"}
	case h.URL != "" && h.Type != "":
		return &InvalidError{Location: "health.type", Message: "goes without health.url"}
	}
	if h.URL != "" {
		if err := checkURL(h.URL); err != nil {
			return &InvalidError{Location: "health.url", Message: err.Error()}
		}
	}
	switch {
	case h.IntervalSecs < 0 || h.IntervalSecs > 3600:
		return &InvalidError{Location: "health.interval_secs", Message: "must be in 1..3600, or 0 for the default"}
	case h.HealthyThreshold < 0 || h.HealthyThreshold > 100:
		return &InvalidError{Location: "health.healthy_threshold", Message: "must be in 1..100, or 0 for the default"}
	case h.UnhealthyThreshold < 0 || h.UnhealthyThreshold > 100:
		return &InvalidError{Location: "health.unhealthy_threshold", Message: "must be in 1..100, or 0 for the default"}
	}
	return nil
}

// checkURL accepts an absolute http(s) URL with a host, no credentials and
// no fragment. http is accepted here because dev mode and allowlists may
// permit it; the egress policy decides.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("is required")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("is not a valid URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("must be an https URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("must name a host")
	case u.User != nil:
		return errors.New("must not carry credentials")
	case u.Fragment != "":
		return errors.New("must not have a fragment")
	}
	return nil
}

func endpointNotFound(name string) error {
	return &NotFoundError{Message: fmt.Sprintf("endpoint %q does not exist", name)}
}

// newSealedSecret seals given, or a generated signing secret when given is
// empty, for endpoint name. Under a dry run it returns the sealed secret but
// not the secret itself: one that is rolled back must never be shown, lest
// someone configure a provider with it.
func newSealedSecret(ctx context.Context, box *SecretBox, name string, given EndpointSecret) (EndpointSecret, []byte, error) {
	if box == nil {
		return "", nil, errors.New("no secret box configured (CONVERGE_SECRET_KEY)")
	}
	s := string(given)
	if s != "" {
		if _, err := webhooksdk.ParseSecret(s); err != nil {
			return "", nil, &InvalidError{Location: "secret", Message: "must be whsec_ followed by the base64 of 24 to 64 bytes"}
		}
	} else {
		var err error
		if s, err = webhooksdk.GenerateSecret(); err != nil {
			return "", nil, err
		}
	}
	enc, err := box.Seal([]byte(s), []byte(name))
	if err != nil {
		return "", nil, err
	}
	if IsDryRun(ctx) {
		return "", enc, nil
	}
	return EndpointSecret(s), enc, nil
}

const endpointInsertSQL = `INSERT INTO endpoints (name, kinds, target, health, max_concurrency, request_timeout_secs, enabled, disabled_reason, secret_enc, max_batch, namespace)
VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $7 THEN '' ELSE 'disabled by the operator' END, $8, $9, $10)
RETURNING ` + endpointCols

// CreateEndpoint registers a new endpoint in namespace p.Namespace and
// returns it with its freshly generated signing secret, the only time the
// secret is returned. An existing name (in any namespace) is a
// *ConflictError; a bad field an *InvalidError.
func (s *Store) CreateEndpoint(ctx context.Context, box *SecretBox, p PutEndpointParams) (Endpoint, EndpointSecret, error) {
	if err := p.normalize(); err != nil {
		return Endpoint{}, "", err
	}
	p.Namespace = orDefault(p.Namespace)
	secret, enc, err := newSealedSecret(ctx, box, p.Name, p.Secret)
	if err != nil {
		return Endpoint{}, "", wrapUnlessTyped(err, "create endpoint %s", p.Name)
	}
	kinds, target, health := mustJSON(p.Kinds), mustJSON(p.Target), mustJSON(p.Health)
	e, err := pgrun.CollectOne(ctx, s.pool, rowToEndpoint, endpointInsertSQL, p.Name, kinds, target, health,
		p.MaxConcurrency, p.RequestTimeoutSecs, enabledOrDefault(p.Enabled), enc, p.MaxBatch, p.Namespace)
	if err != nil {
		code, pe := pgCode(err)
		if code == codeUniqueViolation {
			if e, gerr := s.GetEndpoint(ctx, p.Name); gerr == nil && e.Namespace != p.Namespace {
				return Endpoint{}, "", nameTaken("endpoint", p.Name, e.Namespace)
			}
			return Endpoint{}, "", &ConflictError{Message: fmt.Sprintf("endpoint %q already exists", p.Name)}
		}
		if code == codeForeignKeyViolation && pe.ConstraintName == "endpoints_namespace_fkey" {
			return Endpoint{}, "", namespaceNotFound(p.Namespace)
		}
		return Endpoint{}, "", fmt.Errorf("create endpoint %s: %w", p.Name, err)
	}
	return e, secret, nil
}

const endpointUpsertSQL = `WITH up AS (
    INSERT INTO endpoints AS e (name, kinds, target, health, max_concurrency, request_timeout_secs, enabled, disabled_reason, secret_enc, max_batch, namespace)
    VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $7 THEN '' ELSE 'disabled by the operator' END, $8, $9, $10)
    ON CONFLICT (name) DO UPDATE SET kinds = EXCLUDED.kinds, target = EXCLUDED.target, health = EXCLUDED.health,
        max_concurrency = EXCLUDED.max_concurrency, max_batch = EXCLUDED.max_batch, request_timeout_secs = EXCLUDED.request_timeout_secs,
        enabled = EXCLUDED.enabled,
        disabled_reason = CASE WHEN EXCLUDED.enabled THEN '' WHEN e.enabled THEN EXCLUDED.disabled_reason ELSE e.disabled_reason END,
        updated_at = clock_timestamp()
    WHERE (e.kinds, e.target, e.health, e.max_concurrency, e.max_batch, e.request_timeout_secs, e.enabled)
          IS DISTINCT FROM (EXCLUDED.kinds, EXCLUDED.target, EXCLUDED.health, EXCLUDED.max_concurrency,
                            EXCLUDED.max_batch, EXCLUDED.request_timeout_secs, EXCLUDED.enabled)
    RETURNING e.*, e.xmax = 0 AS inserted
)
SELECT ` + endpointCols + `, CASE WHEN inserted THEN 'created' ELSE 'configured' END AS result FROM up
UNION ALL
SELECT ` + endpointCols + `, 'unchanged' FROM endpoints WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM up)`

// PutEndpoint creates or updates the endpoint p.Name of namespace
// p.Namespace (the apply verb); a name another namespace holds is a
// *ConflictError naming that namespace. When
// it creates, the returned secret is the new endpoint's signing secret (shown
// this once); otherwise it is empty and the stored secret is untouched.
// Re-applying an endpoint that the dispatcher disabled (410 Gone) with
// Enabled unset or true enables it again.
func (s *Store) PutEndpoint(ctx context.Context, box *SecretBox, p PutEndpointParams) (Endpoint, ApplyResult, EndpointSecret, error) {
	if err := p.normalize(); err != nil {
		return Endpoint{}, "", "", err
	}
	secret, enc, err := newSealedSecret(ctx, box, p.Name, p.Secret)
	if err != nil {
		return Endpoint{}, "", "", wrapUnlessTyped(err, "put endpoint %s", p.Name)
	}
	p.Namespace = orDefault(p.Namespace)
	var a endpointApplied
	err = s.inTx(ctx, func(tx pgx.Tx) (err error) {
		if err := checkVersion(ctx, tx, p.Precondition, endpointWhat(p.Name), endpointVersionLock, p.Name); err != nil {
			return err
		}
		if err := checkNameHolder(ctx, tx, endpointHolderSQL, "endpoint", p.Name, p.Namespace); err != nil {
			return err
		}
		a, err = pgrun.CollectOne(ctx, tx, pgx.RowToStructByName[endpointApplied], endpointUpsertSQL, p.Name, mustJSON(p.Kinds),
			mustJSON(p.Target), mustJSON(p.Health), p.MaxConcurrency, p.RequestTimeoutSecs, enabledOrDefault(p.Enabled), enc, p.MaxBatch,
			p.Namespace)
		if code, pe := pgCode(err); code == codeForeignKeyViolation && pe.ConstraintName == "endpoints_namespace_fkey" {
			return namespaceNotFound(p.Namespace)
		}
		return err
	})
	if err != nil {
		return Endpoint{}, "", "", wrapUnlessTyped(err, "put endpoint %s", p.Name)
	}
	a.normalizeKinds()
	if a.Result != ApplyCreated {
		secret = ""
	}
	return a.Endpoint, a.Result, secret, nil
}

func enabledOrDefault(b *bool) bool { return b == nil || *b }

// mustJSON encodes plain structs of strings and ints, which cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("store: encode %T: %v", v, err))
	}
	return b
}

// endpointHolderSQL locks an endpoint by name and reads its namespace.
const endpointHolderSQL = `SELECT namespace FROM endpoints WHERE name = $1 FOR UPDATE`

// GetEndpoint returns the endpoint name, whichever its namespace (names are
// unique across the plane; Endpoint.Namespace says which), or a
// *NotFoundError.
func (s *Store) GetEndpoint(ctx context.Context, name string) (Endpoint, error) {
	e, err := pgrun.CollectOne(ctx, s.reader(ctx), rowToEndpoint, `SELECT `+endpointCols+` FROM endpoints WHERE name = $1`, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, endpointNotFound(name)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("get endpoint %s: %w", name, err)
	}
	return e, nil
}

// ListEndpoints returns the endpoints of namespace ns ("" is
// DefaultNamespace; AllNamespaces is every namespace's) by name. Endpoints
// are operator wiring, few by nature, so the list is not paginated.
func (s *Store) ListEndpoints(ctx context.Context, ns string) ([]Endpoint, error) {
	out, err := pgrun.Collect(ctx, s.reader(ctx), rowToEndpoint,
		`SELECT `+endpointCols+` FROM endpoints WHERE $1 = '*' OR namespace = $1 ORDER BY name`, orDefault(ns))
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	if out == nil {
		out = []Endpoint{}
	}
	return out, nil
}

// DeleteEndpoint deletes the endpoint name of namespace ns ("" is
// DefaultNamespace) and its delivery log, or returns a *NotFoundError. Deliveries in flight finish; no new ones start once the
// dispatchers see the change. pre makes the delete conditional on the
// endpoint's version (else *PreconditionError).
func (s *Store) DeleteEndpoint(ctx context.Context, ns, name string, pre Precondition) error {
	var deleted bool
	err := s.writeIf(ctx, pre, endpointWhat(name), endpointVersionLock, []any{name}, func(q writer) error {
		tag, err := q.Exec(ctx, `DELETE FROM endpoints WHERE name = $1 AND namespace = $2`, name, orDefault(ns))
		deleted = tag.RowsAffected() > 0
		return err
	})
	if err != nil {
		return wrapUnlessTyped(err, "delete endpoint %s", name)
	}
	if !deleted {
		return endpointNotFound(name)
	}
	return nil
}

// endpointWhat names an endpoint in a *PreconditionError.
func endpointWhat(name string) string { return fmt.Sprintf("endpoint %q", name) }

const endpointRotateSQL = `UPDATE endpoints SET prev_secret_enc = secret_enc, prev_secret_expires = now() + make_interval(secs => $3),
       secret_enc = $2, updated_at = clock_timestamp()
 WHERE name = $1
RETURNING prev_secret_expires`

// RotateEndpointSecret gives the endpoint a new signing secret and returns it
// (shown this once) with the instant the old one stops signing: until then
// every delivery carries both signatures, so the provider can switch secrets
// at its own pace. grace <= 0 takes SecretRotationGraceDefault. Rotating
// again during a grace window retires the older secret at once: only the
// current and the new one sign.
func (s *Store) RotateEndpointSecret(ctx context.Context, box *SecretBox, name string, grace time.Duration) (EndpointSecret, time.Time, error) {
	if grace <= 0 {
		grace = SecretRotationGraceDefault
	}
	secret, enc, err := newSealedSecret(ctx, box, name, "")
	if err != nil {
		return "", time.Time{}, fmt.Errorf("rotate secret of endpoint %s: %w", name, err)
	}
	var ends time.Time
	err = s.pool.QueryRow(ctx, endpointRotateSQL, name, enc, grace.Seconds()).Scan(&ends)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, endpointNotFound(name)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("rotate secret of endpoint %s: %w", name, err)
	}
	return secret, ends, nil
}

// DisableEndpoint stops deliveries to the endpoint and records why (the
// dispatcher calls it when a target answers 410 Gone). Re-applying the
// endpoint enabled, or PutEndpoint with Enabled true, turns it back on. The
// statement that turns an enabled endpoint off logs the endpoint.disabled
// alert too, so the alert commits exactly when the change does.
func (s *Store) DisableEndpoint(ctx context.Context, name, reason string) error {
	var n int
	err := s.pool.QueryRow(ctx, `WITH old AS (
    SELECT name, enabled FROM endpoints WHERE name = $1 FOR UPDATE
), up AS (
    UPDATE endpoints e SET enabled = false, disabled_reason = $2, updated_at = clock_timestamp()
      FROM old WHERE e.name = old.name AND (old.enabled OR e.disabled_reason <> $2)
    RETURNING old.enabled AS was_enabled
), alert AS (
    SELECT emit_alert('endpoint.disabled', $1, '', 0, NULL, '', '', $2) FROM up WHERE was_enabled
)
SELECT (SELECT count(*) FROM up)::int + 0 * (SELECT count(*) FROM alert)::int`, name, reason).Scan(&n)
	if err != nil {
		return fmt.Errorf("disable endpoint %s: %w", name, err)
	}
	if n == 0 {
		if _, err := s.GetEndpoint(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// SigningSecret is one secret an endpoint's deliveries are signed with.
type SigningSecret struct {
	Secret EndpointSecret
	// Until is when the secret stops signing; zero for the current secret.
	Until time.Time
}

// DispatchEndpoint is an endpoint as the dispatcher needs it: with its
// signing secrets opened. SecretErr is set (and Secrets empty) when a secret
// cannot be opened, so one bad row disables one endpoint, not the registry.
type DispatchEndpoint struct {
	Endpoint
	Secrets   []SigningSecret
	SecretErr error
}

// dispatchEndpointRow is an endpoint with its sealed signing secrets.
type dispatchEndpointRow struct {
	Endpoint
	SecretEnc         []byte     `db:"secret_enc"`
	PrevSecretEnc     []byte     `db:"prev_secret_enc"`
	PrevSecretExpires *time.Time `db:"prev_secret_expires"`
}

// DispatchEndpoints returns every endpoint (disabled ones too, so the
// dispatcher can say why a kind parks) with its signing secrets opened: the
// current one and, during a rotation's grace window, the previous one.
func (s *Store) DispatchEndpoints(ctx context.Context, box *SecretBox) ([]DispatchEndpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointCols+`, secret_enc, prev_secret_enc, prev_secret_expires FROM endpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("load dispatch endpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DispatchEndpoint, error) {
		var d DispatchEndpoint
		row, err := pgx.RowToStructByName[dispatchEndpointRow](r)
		if err != nil {
			return d, err
		}
		row.normalizeKinds()
		d.Endpoint = row.Endpoint
		if box == nil {
			d.SecretErr = errors.New("no secret box configured (CONVERGE_SECRET_KEY)")
			return d, nil
		}
		pt, err := box.Open(row.SecretEnc, []byte(row.Name))
		if err != nil {
			d.SecretErr = err
			return d, nil
		}
		d.Secrets = append(d.Secrets, SigningSecret{Secret: EndpointSecret(pt)})
		if prev, until := row.PrevSecretEnc, row.PrevSecretExpires; prev != nil && until != nil && until.After(time.Now()) {
			if pt, err := box.Open(prev, []byte(row.Name)); err == nil {
				d.Secrets = append(d.Secrets, SigningSecret{Secret: EndpointSecret(pt), Until: *until})
			}
		}
		return d, nil
	})
	if err != nil {
		return nil, fmt.Errorf("load dispatch endpoints: %w", err)
	}
	return out, nil
}
