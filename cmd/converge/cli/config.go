package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/api"
)

// Role selects the duties a process runs.
type Role string

// The roles.
const (
	RoleAll      Role = "all"      // control + dispatch + API
	RoleControl  Role = "control"  // API, drainer, reaper
	RoleDispatch Role = "dispatch" // dispatcher and its callback receiver
)

// Config is the server's configuration, read once from the environment
// (12-factor) by LoadConfig. Every field below names its variable; the
// variables' defaults, rules and meaning are in settings (and so in
// docs/operations.md's configuration table, written from it).
type Config struct {
	// DatabaseURL is the Postgres DSN (DATABASE_URL). Required except in
	// dev mode, which starts an embedded Postgres when it is empty.
	DatabaseURL string
	// DatabaseReadURL, when set, is a second DSN (a read replica) the API's
	// read routes query (DATABASE_READ_URL).
	DatabaseReadURL string
	// Role is ROLE: all, control or dispatch.
	Role Role
	// ListenAddr is the API's host:port (LISTEN_ADDR, its scheme removed);
	// TLS is set when LISTEN_ADDR is https://, served from TLSCertFile and
	// TLSKeyFile (TLS_CERT_FILE, TLS_KEY_FILE).
	ListenAddr  string
	TLS         bool
	TLSCertFile string
	TLSKeyFile  string
	// TLSReloadInterval is how often the TLS files are re-read
	// (TLS_RELOAD_INTERVAL; 0 never re-reads them).
	TLSReloadInterval time.Duration
	// TLSClientCAFile, when set, requires every client of LISTEN_ADDR to
	// present a certificate this PEM bundle verifies (TLS_CLIENT_CA_FILE).
	TLSClientCAFile string
	// HealthAddr serves /livez and /readyz on its own listener, for every
	// role (HEALTH_ADDR), so probes reach a pod whose LISTEN_ADDR is
	// flooded.
	HealthAddr string
	// HTTPHeaderTimeout, HTTPReadTimeout, HTTPWriteTimeout and
	// HTTPIdleTimeout bound the connections of every listener
	// (HTTP_HEADER_TIMEOUT, HTTP_READ_TIMEOUT, HTTP_WRITE_TIMEOUT,
	// HTTP_IDLE_TIMEOUT; see api.Config). Zero takes the default.
	HTTPHeaderTimeout, HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	// MaxConns caps the connections open at once on LISTEN_ADDR
	// (LISTEN_MAX_CONNS). Zero takes the default: MaxConnsDefault, or half
	// the process's open-file limit if that is lower.
	MaxConns int
	// MaxConnsPerAddr caps the connections open at once on LISTEN_ADDR from
	// one client IP address (LISTEN_MAX_CONNS_PER_ADDR). Zero takes the
	// default: a tenth of MaxConns.
	MaxConnsPerAddr int
	// APIPoolMaxConns is the size of the API's own database pool, apart
	// from the engine's (API_POOL_MAX_CONNS). Zero takes the default, the
	// larger of 4 and the CPU count.
	APIPoolMaxConns int
	// APIStatementTimeout and APILockTimeout are the statement_timeout and
	// lock_timeout of the API's database connections, its read pool's
	// included (API_STATEMENT_TIMEOUT, API_LOCK_TIMEOUT): a statement the
	// API runs gives up within the request timeout, and its connection
	// returns to the pool. Zero takes the default.
	APIStatementTimeout, APILockTimeout time.Duration
	// LogLevel and LogFormat (text|json) come from LOG_LEVEL, LOG_FORMAT.
	LogLevel  slog.Level
	LogFormat string
	// DataDir is where dev mode keeps its embedded Postgres, dev keys and
	// a demo's logs (CONVERGE_DATA_DIR).
	DataDir string
	// ReadTokens and AdminTokens enable bearer-token auth on the API
	// (CONVERGE_READ_TOKENS, CONVERGE_ADMIN_TOKENS). Empty means the API is
	// open, which is only sensible in dev.
	ReadTokens, AdminTokens []string
	// OIDC makes the API accept OIDC tokens too (OIDC_ISSUER_URL and the
	// other OIDC_ variables); an empty IssuerURL leaves it off.
	OIDC api.OIDCConfig
	// CallbackBaseURL is the externally reachable base URL of the dispatch
	// API, used to build each task's callback URL (CALLBACK_BASE_URL;
	// defaults to the listen address in dev mode).
	CallbackBaseURL string
	// SecretKey encrypts endpoint signing secrets at rest
	// (CONVERGE_SECRET_KEY). Required for dispatch.
	SecretKey []byte
	// CallbackKey signs callback tokens, shared by all dispatch pods
	// (CONVERGE_CALLBACK_KEY). Required for dispatch.
	CallbackKey []byte
	// PreviousSecretKeys and PreviousCallbackKeys still open what earlier
	// keys sealed and verify what they signed: a key rotation's previous
	// and pending keys, read from Secrets Manager with the keys.
	PreviousSecretKeys, PreviousCallbackKeys [][]byte
	// SecretKeyARN and CallbackKeyARN name Secrets Manager secrets holding
	// SecretKey and CallbackKey instead (CONVERGE_SECRET_KEY_SECRET_ARN,
	// CONVERGE_CALLBACK_KEY_SECRET_ARN), read at start and re-read every
	// KeyRefreshInterval.
	SecretKeyARN, CallbackKeyARN string
	// KeyRefreshInterval is how often those secrets are re-read
	// (KEY_REFRESH_INTERVAL).
	KeyRefreshInterval time.Duration
	// DBIAMAuth authenticates to the database with an RDS IAM token minted
	// per connection (DB_IAM_AUTH); DATABASE_URL then has no password and
	// must require TLS.
	DBIAMAuth bool
	// AllowCIDRs lets endpoints reach these otherwise-blocked networks
	// (DISPATCH_ALLOW_CIDRS), e.g. an internal VPC range.
	AllowCIDRs []netip.Prefix
	// AWS returns the base AWS configuration of Lambda targets; nil loads
	// the default credential chain. Not from the environment: tests set it.
	AWS func(context.Context) (aws.Config, error)
	// ReaperRetryWindow is how long a lagging resource with no live task
	// waits before the reaper re-schedules it (REAPER_RETRY_WINDOW).
	ReaperRetryWindow time.Duration
	// PhaseCountInterval is how often the control pod holding shard 0
	// counts resources by kind and phase (PHASE_COUNT_INTERVAL).
	PhaseCountInterval time.Duration
	// DeliveryLogMaxAge and DeliveryLogKeep bound the delivery log
	// (DELIVERY_LOG_MAX_AGE, DELIVERY_LOG_KEEP).
	DeliveryLogMaxAge time.Duration
	DeliveryLogKeep   int
	// AuditRetention is how long the audit trail keeps a request
	// (AUDIT_RETENTION).
	AuditRetention time.Duration
	// SpecHistoryLimit is how many spec revisions each root resource keeps
	// (SPEC_HISTORY_LIMIT).
	SpecHistoryLimit int
	// IdempotencyRetention is how long the answer of a POST sent with an
	// Idempotency-Key is kept for its retries (IDEMPOTENCY_KEY_RETENTION).
	IdempotencyRetention time.Duration
	// Tracer, when set, is what the pod traces with (the API's requests,
	// the dispatcher's deliveries and callbacks) instead of the OTLP
	// exporter the OTEL_* environment configures; its owner flushes and
	// shuts it down. A program embedding the server, or a test with an
	// in-memory exporter, sets it; the environment never does.
	Tracer trace.TracerProvider
	// ListPageBytes is the byte budget of a list page (LIST_PAGE_BYTES).
	ListPageBytes int
	// MemberID names this process in the cluster view (MEMBER_ID; empty:
	// host-pid).
	MemberID string
	// PprofAddr, when set, serves net/http/pprof there (PPROF_ADDR).
	PprofAddr string
	// ShutdownTimeout is the budget of a graceful stop (SHUTDOWN_TIMEOUT):
	// the dispatcher's wait for deliveries in flight, past which it cancels
	// them and releases their tasks, then the HTTP listeners' wait for open
	// requests. Zero takes the default.
	ShutdownTimeout time.Duration
	// DatabaseWait is how long a starting process waits for the database
	// to accept connections (DATABASE_WAIT). Zero takes the default.
	DatabaseWait time.Duration
	// Dev is set by `converge dev`: plain-http loopback endpoints allowed.
	Dev bool
}

// The defaults of LISTEN_ADDR, HEALTH_ADDR, TLS_RELOAD_INTERVAL and
// REAPER_RETRY_WINDOW.
const (
	ListenAddrDefault        = ":8080"
	HealthAddrDefault        = ":8081"
	TLSReloadIntervalDefault = time.Minute
	ReaperRetryWindowDefault = 30 * time.Second
)

// MaxConnsDefault is LISTEN_MAX_CONNS's default where the open-file limit
// allows it.
const MaxConnsDefault = 10000

// The defaults of API_STATEMENT_TIMEOUT and API_LOCK_TIMEOUT.
const (
	APIStatementTimeoutDefault = 10 * time.Second
	APILockTimeoutDefault      = 5 * time.Second
)

// DatabaseWaitDefault is DATABASE_WAIT's default.
const DatabaseWaitDefault = 60 * time.Second

// ShutdownTimeoutDefault is SHUTDOWN_TIMEOUT's default: Kubernetes' default
// termination grace period.
const ShutdownTimeoutDefault = 30 * time.Second

// LoadConfig reads the configuration through getenv, one variable of
// settings after another, and reports every bad variable at once, each
// error naming it (a secret's value is never echoed).
func LoadConfig(getenv func(string) string) (Config, error) {
	var (
		c    Config
		errs []error
	)
	for _, s := range settings() {
		v := getenv(s.name)
		if err := s.read(&c, v, getenv); err != nil {
			errs = append(errs, s.refusal(v, err)...)
		}
	}
	return c, errors.Join(errs...)
}

// A setting is one environment variable of the configuration: its name,
// the default and meaning docs/operations.md's configuration table shows,
// and how LoadConfig reads it into a Config.
type setting struct {
	name string
	// def is the table's default column (Markdown), "" for none.
	def string
	// doc is the table's meaning column (Markdown).
	doc string
	// secret values are never quoted in an error.
	secret bool
	// read sets c from v, the variable's value ("" when unset: the
	// default), and returns why v is refused, or nil. getenv reads the
	// variables a rule between two of them needs; the settings are read in
	// order, so c holds those read before.
	read func(c *Config, v string, getenv func(string) string) error
}

// badItem refuses one item of a list variable, quoting the item rather
// than the whole value.
type badItem struct{ item, why string }

func (b badItem) Error() string { return b.why }

// refusal turns read's error for the value v into the errors LoadConfig
// reports: NAME="value": why, one per item (errors.Join) refused.
func (s setting) refusal(v string, err error) []error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		shown := v
		var item badItem
		if errors.As(e, &item) {
			shown = item.item
		}
		if s.secret {
			shown = "(redacted)"
		}
		out[i] = fmt.Errorf("%s=%q: %s", s.name, shown, e.Error())
	}
	return out
}

// parseListen accepts host:port, http://host:port and https://host:port.
func parseListen(s string) (addr string, tls bool, err error) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", false, fmt.Errorf("is not a URL: %w", err)
		}
		switch u.Scheme {
		case "http":
		case "https":
			tls = true
		default:
			return "", false, errors.New("scheme must be http or https")
		}
		if u.Path != "" && u.Path != "/" {
			return "", false, errors.New("must not have a path")
		}
		s = u.Host
	}
	if _, port, err := net.SplitHostPort(s); err != nil {
		return "", false, errors.New("must be host:port, http://host:port or https://host:port")
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", false, errors.New("port must be 0-65535")
	}
	return s, tls, nil
}

// The key variables; each may instead name a Secrets Manager secret with
// <name>_SECRET_ARN.
const (
	secretKeyVar   = "CONVERGE_SECRET_KEY"
	callbackKeyVar = "CONVERGE_CALLBACK_KEY"
)

// parseKey decodes a base64 key of minLen..maxLen bytes, or says why not
// (without quoting it).
func parseKey(v string, minLen, maxLen int) ([]byte, string) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, "must be base64"
	}
	if len(b) < minLen || len(b) > maxLen {
		if minLen == maxLen {
			return nil, fmt.Sprintf("must decode to exactly %d bytes (got %d)", minLen, len(b))
		}
		return nil, fmt.Sprintf("must decode to at least %d bytes (got %d)", minLen, len(b))
	}
	return b, ""
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// OIDCConfig is the API's OIDC configuration, nil when OIDC_ISSUER_URL is
// unset.
func (c Config) OIDCConfig() *api.OIDCConfig {
	if c.OIDC.IssuerURL == "" {
		return nil
	}
	o := c.OIDC
	return &o
}

// NewLogger builds the process logger.
func (c Config) NewLogger(w *os.File) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
