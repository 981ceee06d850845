package store

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// Endpoint is a provider endpoint the dispatcher pushes tasks to: where
// (Target), for which (kind, kind_version) pairs (Kinds), how readiness is
// probed (Health), and how hard it may be driven. Its signing secret is never
// part of it: the secret is shown once, by CreateEndpoint, PutEndpoint (when
// it creates) and RotateEndpointSecret.
type Endpoint struct {
	Name               string         `json:"name" db:"name" doc:"Unique name: letters, digits, '.', '_' or '-', at most 63."`
	Kinds              []EndpointKind `json:"kinds" db:"kinds" doc:"The (kind, kind_version) pairs this endpoint serves."`
	Target             EndpointTarget `json:"target" db:"target" doc:"Where tasks are delivered."`
	Health             EndpointHealth `json:"health" db:"health" doc:"Readiness probing; without a URL the endpoint is ready for all its kinds while its circuit breaker is closed."`
	MaxConcurrency     int            `json:"max_concurrency" db:"max_concurrency" doc:"Most deliveries in flight at once (HTTP requests awaiting an answer)."`
	RequestTimeoutSecs int            `json:"request_timeout_secs" db:"request_timeout_secs" doc:"Timeout of one HTTP request; separate from the kind's task deadline."`
	Enabled            bool           `json:"enabled" db:"enabled" doc:"A disabled endpoint gets no deliveries."`
	DisabledReason     string         `json:"disabled_reason,omitempty" db:"disabled_reason" readOnly:"true" doc:"Why the endpoint was disabled, e.g. it answered 410 Gone."`
	// SecretRotationEndsAt is when the previous signing secret stops signing
	// after a rotation; nil when no rotation is in progress.
	SecretRotationEndsAt *time.Time `json:"secret_rotation_ends_at,omitempty" db:"secret_rotation_ends_at" readOnly:"true" doc:"Until this instant both the previous and the current secret sign each delivery."`
	CreatedAt            time.Time  `json:"created_at" db:"created_at" readOnly:"true"`
	UpdatedAt            time.Time  `json:"updated_at" db:"updated_at" readOnly:"true"`
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
)

// EndpointTarget says where deliveries go. Only Type "https" exists today;
// the Lambda types add their own fields.
type EndpointTarget struct {
	Type string `json:"type" enum:"https" doc:"The transport."`
	URL  string `json:"url,omitempty" doc:"The https URL every task is POSTed to."`
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

// EndpointHealth configures readiness probing. Zero thresholds and interval
// take the dispatcher's defaults.
type EndpointHealth struct {
	URL                string `json:"url,omitempty" doc:"URL probed with a signed POST {\"type\":\"health\"}; empty disables probing."`
	IntervalSecs       int    `json:"interval_secs,omitempty" doc:"Probe interval (jittered); 0 = the dispatcher default (10)."`
	HealthyThreshold   int    `json:"healthy_threshold,omitempty" doc:"Consecutive ready answers that make a kind ready; 0 = default (2)."`
	UnhealthyThreshold int    `json:"unhealthy_threshold,omitempty" doc:"Consecutive failed or unready answers that make a kind unready; 0 = default (3)."`
}

// PutEndpointParams is an endpoint as an operator declares it.
type PutEndpointParams struct {
	Name   string
	Kinds  []EndpointKind
	Target EndpointTarget
	Health EndpointHealth
	// MaxConcurrency defaults to EndpointMaxConcurrencyDefault when 0.
	MaxConcurrency int
	// RequestTimeoutSecs defaults to EndpointRequestTimeoutDefault when 0.
	RequestTimeoutSecs int
	// Enabled defaults to true when nil. Enabling clears DisabledReason.
	Enabled *bool
	// Secret, when set, is the signing secret a created endpoint gets
	// instead of a generated one ("whsec_<base64>", see
	// webhooksdk.ParseSecret). It is used only when the call creates the
	// endpoint; an existing endpoint's secret changes only by rotation.
	Secret EndpointSecret
}

// Endpoint defaults and limits.
const (
	EndpointMaxConcurrencyDefault = 64
	EndpointRequestTimeoutDefault = 30
	EndpointMaxConcurrencyMax     = 100000
	EndpointRequestTimeoutMax     = 3600
	// SecretRotationGraceDefault is how long the previous secret keeps
	// signing after a rotation.
	SecretRotationGraceDefault = 24 * time.Hour
)

var endpointNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// endpointCols are the columns of an Endpoint, named for its db tags; the
// jsonb columns (kinds, target, health) decode straight into their structs.
const endpointCols = `name, kinds, target, health, max_concurrency, request_timeout_secs, enabled, disabled_reason,
       CASE WHEN prev_secret_expires > now() THEN prev_secret_expires END AS secret_rotation_ends_at, created_at, updated_at`

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
	return p.Health.validate()
}

func (t *EndpointTarget) validate() error {
	if t.Type != TargetHTTPS {
		return &InvalidError{Location: "target.type", Message: fmt.Sprintf("%q is not a supported target type (supported: %s)", t.Type, TargetHTTPS)}
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

func (h *EndpointHealth) validate() error {
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
// empty, for endpoint name.
func newSealedSecret(box *SecretBox, name string, given EndpointSecret) (EndpointSecret, []byte, error) {
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
	return EndpointSecret(s), enc, nil
}

const endpointInsertSQL = `INSERT INTO endpoints (name, kinds, target, health, max_concurrency, request_timeout_secs, enabled, disabled_reason, secret_enc)
VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $7 THEN '' ELSE 'disabled by the operator' END, $8)
RETURNING ` + endpointCols

// CreateEndpoint registers a new endpoint and returns it with its freshly
// generated signing secret, the only time the secret is returned. An existing
// name is a *ConflictError; a bad field an *InvalidError.
func (s *Store) CreateEndpoint(ctx context.Context, box *SecretBox, p PutEndpointParams) (Endpoint, EndpointSecret, error) {
	if err := p.normalize(); err != nil {
		return Endpoint{}, "", err
	}
	secret, enc, err := newSealedSecret(box, p.Name, p.Secret)
	if err != nil {
		return Endpoint{}, "", wrapUnlessTyped(err, "create endpoint %s", p.Name)
	}
	kinds, target, health := mustJSON(p.Kinds), mustJSON(p.Target), mustJSON(p.Health)
	e, err := collectOne(ctx, s.pool, rowToEndpoint, endpointInsertSQL, p.Name, kinds, target, health,
		p.MaxConcurrency, p.RequestTimeoutSecs, enabledOrDefault(p.Enabled), enc)
	if err != nil {
		if code, _ := pgCode(err); code == codeUniqueViolation {
			return Endpoint{}, "", &ConflictError{Message: fmt.Sprintf("endpoint %q already exists", p.Name)}
		}
		return Endpoint{}, "", fmt.Errorf("create endpoint %s: %w", p.Name, err)
	}
	return e, secret, nil
}

const endpointUpsertSQL = `WITH up AS (
    INSERT INTO endpoints AS e (name, kinds, target, health, max_concurrency, request_timeout_secs, enabled, disabled_reason, secret_enc)
    VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $7 THEN '' ELSE 'disabled by the operator' END, $8)
    ON CONFLICT (name) DO UPDATE SET kinds = EXCLUDED.kinds, target = EXCLUDED.target, health = EXCLUDED.health,
        max_concurrency = EXCLUDED.max_concurrency, request_timeout_secs = EXCLUDED.request_timeout_secs,
        enabled = EXCLUDED.enabled,
        disabled_reason = CASE WHEN EXCLUDED.enabled THEN '' WHEN e.enabled THEN EXCLUDED.disabled_reason ELSE e.disabled_reason END,
        updated_at = clock_timestamp()
    WHERE (e.kinds, e.target, e.health, e.max_concurrency, e.request_timeout_secs, e.enabled)
          IS DISTINCT FROM (EXCLUDED.kinds, EXCLUDED.target, EXCLUDED.health, EXCLUDED.max_concurrency,
                            EXCLUDED.request_timeout_secs, EXCLUDED.enabled)
    RETURNING e.*, e.xmax = 0 AS inserted
)
SELECT ` + endpointCols + `, CASE WHEN inserted THEN 'created' ELSE 'configured' END AS result FROM up
UNION ALL
SELECT ` + endpointCols + `, 'unchanged' FROM endpoints WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM up)`

// PutEndpoint creates or updates the endpoint p.Name (the apply verb). When
// it creates, the returned secret is the new endpoint's signing secret (shown
// this once); otherwise it is empty and the stored secret is untouched.
// Re-applying an endpoint that the dispatcher disabled (410 Gone) with
// Enabled unset or true enables it again.
func (s *Store) PutEndpoint(ctx context.Context, box *SecretBox, p PutEndpointParams) (Endpoint, ApplyResult, EndpointSecret, error) {
	if err := p.normalize(); err != nil {
		return Endpoint{}, "", "", err
	}
	secret, enc, err := newSealedSecret(box, p.Name, p.Secret)
	if err != nil {
		return Endpoint{}, "", "", wrapUnlessTyped(err, "put endpoint %s", p.Name)
	}
	a, err := collectOne(ctx, s.pool, pgx.RowToStructByName[endpointApplied], endpointUpsertSQL, p.Name, mustJSON(p.Kinds),
		mustJSON(p.Target), mustJSON(p.Health), p.MaxConcurrency, p.RequestTimeoutSecs, enabledOrDefault(p.Enabled), enc)
	if err != nil {
		return Endpoint{}, "", "", fmt.Errorf("put endpoint %s: %w", p.Name, err)
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

// GetEndpoint returns the endpoint name, or a *NotFoundError.
func (s *Store) GetEndpoint(ctx context.Context, name string) (Endpoint, error) {
	e, err := collectOne(ctx, s.pool, rowToEndpoint, `SELECT `+endpointCols+` FROM endpoints WHERE name = $1`, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, endpointNotFound(name)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("get endpoint %s: %w", name, err)
	}
	return e, nil
}

// ListEndpoints returns every endpoint by name. Endpoints are operator
// wiring, few by nature, so the list is not paginated.
func (s *Store) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointCols+` FROM endpoints ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowToEndpoint)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	if out == nil {
		out = []Endpoint{}
	}
	return out, nil
}

// DeleteEndpoint deletes the endpoint name and its delivery log, or returns
// a *NotFoundError. Deliveries in flight finish; no new ones start once the
// dispatchers see the change.
func (s *Store) DeleteEndpoint(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM endpoints WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("delete endpoint %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return endpointNotFound(name)
	}
	return nil
}

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
	secret, enc, err := newSealedSecret(box, name, "")
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
// endpoint enabled, or PutEndpoint with Enabled true, turns it back on.
func (s *Store) DisableEndpoint(ctx context.Context, name, reason string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE endpoints SET enabled = false, disabled_reason = $2, updated_at = clock_timestamp()
		WHERE name = $1 AND (enabled OR disabled_reason <> $2)`, name, reason)
	if err != nil {
		return fmt.Errorf("disable endpoint %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
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
