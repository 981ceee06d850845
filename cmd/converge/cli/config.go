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
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/store"
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
// (12-factor). Every variable is validated at boot; a bad value is a loud
// error naming the variable.
type Config struct {
	// DatabaseURL is the Postgres DSN (DATABASE_URL). Required except in
	// dev mode, which starts an embedded Postgres when it is empty.
	DatabaseURL string
	// DatabaseReadURL, when set, is a second DSN (a read replica) the API's
	// read routes query (DATABASE_READ_URL); writes, the engine, dispatch
	// and the drainer always use DatabaseURL.
	DatabaseReadURL string
	// Role is ROLE: all (default), control or dispatch.
	Role Role
	// ListenAddr is the API's listen address (LISTEN_ADDR, default :8080):
	// host:port, http://host:port, or https://host:port with TLSCertFile and
	// TLSKeyFile.
	ListenAddr  string
	TLS         bool
	TLSCertFile string
	TLSKeyFile  string
	// TLSReloadInterval is how often the TLS files are re-read, a changed
	// pair (or client CA bundle) serving new connections without a restart
	// (TLS_RELOAD_INTERVAL, default 1m; 0 never re-reads them).
	TLSReloadInterval time.Duration
	// TLSClientCAFile, when set, requires every client of LISTEN_ADDR to
	// present a certificate this PEM bundle verifies (TLS_CLIENT_CA_FILE;
	// https:// only).
	TLSClientCAFile string
	// HealthAddr serves /livez and /readyz on its own listener, for every
	// role (HEALTH_ADDR, default :8081; `converge dev`: 127.0.0.1:8081), so
	// probes reach a pod whose LISTEN_ADDR is flooded.
	HealthAddr string
	// HTTPHeaderTimeout, HTTPReadTimeout, HTTPWriteTimeout and
	// HTTPIdleTimeout bound the connections of every listener: the wait for
	// a request's headers, then for its body, the writing of its response,
	// and a kept-alive connection's wait for its next request
	// (HTTP_HEADER_TIMEOUT 10s, HTTP_READ_TIMEOUT 60s, HTTP_WRITE_TIMEOUT
	// 60s, HTTP_IDLE_TIMEOUT 90s; see api.Config). Zero takes the default.
	HTTPHeaderTimeout, HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	// MaxConns caps the connections open at once on LISTEN_ADDR; at the cap
	// the next waits in the kernel's backlog (LISTEN_MAX_CONNS). Zero takes
	// the default: MaxConnsDefault, or half the process's open-file limit
	// if that is lower.
	MaxConns int
	// MaxConnsPerAddr caps the connections open at once on LISTEN_ADDR from
	// one client IP address; one more is closed at once
	// (LISTEN_MAX_CONNS_PER_ADDR). Zero takes the default: a tenth of
	// MaxConns.
	MaxConnsPerAddr int
	// APIPoolMaxConns is the size of the API's own database pool, apart
	// from the engine's DATABASE_URL pool (API_POOL_MAX_CONNS, default the
	// larger of 4 and the CPU count). Zero takes the default.
	APIPoolMaxConns int
	// APIStatementTimeout and APILockTimeout are the statement_timeout and
	// lock_timeout of the API's database connections, its read pool's
	// included (API_STATEMENT_TIMEOUT 10s, API_LOCK_TIMEOUT 5s): a statement
	// the API runs gives up well within the 30 s request timeout, and its
	// connection returns to the pool. Zero takes the default.
	APIStatementTimeout, APILockTimeout time.Duration
	// LogLevel and LogFormat (text|json) come from LOG_LEVEL, LOG_FORMAT.
	LogLevel  slog.Level
	LogFormat string
	// DataDir is where dev mode keeps its embedded Postgres
	// (CONVERGE_DATA_DIR, default $XDG_CACHE_HOME/converge or ~/.cache/converge).
	DataDir string
	// ReadTokens and AdminTokens enable bearer-token auth on the API
	// (CONVERGE_READ_TOKENS, CONVERGE_ADMIN_TOKENS; comma-separated). Empty
	// means the API is open, which is only sensible in dev.
	ReadTokens, AdminTokens []string
	// CallbackBaseURL is the externally reachable base URL of the dispatch
	// API, used to build each task's callback URL (CALLBACK_BASE_URL;
	// defaults to the listen address in dev mode).
	CallbackBaseURL string
	// SecretKey encrypts endpoint signing secrets at rest
	// (CONVERGE_SECRET_KEY, base64 of 32 bytes). Required for dispatch.
	SecretKey []byte
	// CallbackKey signs callback tokens, shared by all dispatch pods
	// (CONVERGE_CALLBACK_KEY, base64 of >= 32 bytes). Required for dispatch.
	CallbackKey []byte
	// SecretKeyARN and CallbackKeyARN name Secrets Manager secrets holding
	// SecretKey and CallbackKey instead (CONVERGE_SECRET_KEY_SECRET_ARN,
	// CONVERGE_CALLBACK_KEY_SECRET_ARN), read once at start.
	SecretKeyARN, CallbackKeyARN string
	// DBIAMAuth authenticates to the database with an RDS IAM token minted
	// per connection (DB_IAM_AUTH); DATABASE_URL then has no password and
	// must require TLS.
	DBIAMAuth bool
	// AllowCIDRs lets endpoints reach these otherwise-blocked networks
	// (DISPATCH_ALLOW_CIDRS, comma-separated), e.g. an internal VPC range.
	AllowCIDRs []netip.Prefix
	// AWS returns the base AWS configuration of Lambda targets; nil loads
	// the default credential chain. Not from the environment: tests set it.
	AWS func(context.Context) (aws.Config, error)
	// ReaperRetryWindow is how long a lagging resource with no live task
	// waits before the reaper re-schedules it (REAPER_RETRY_WINDOW, 30s).
	ReaperRetryWindow time.Duration
	// DeliveryLogMaxAge and DeliveryLogKeep bound the delivery log: the
	// reaper drops attempts older than the age (DELIVERY_LOG_MAX_AGE,
	// 168h) and all but each endpoint's newest Keep (DELIVERY_LOG_KEEP,
	// 10000).
	DeliveryLogMaxAge time.Duration
	DeliveryLogKeep   int
	// SpecHistoryLimit is how many spec revisions each root resource keeps
	// (SPEC_HISTORY_LIMIT, default 20).
	SpecHistoryLimit int
	// IdempotencyRetention is how long the answer of a POST sent with an
	// Idempotency-Key is kept for its retries (IDEMPOTENCY_KEY_RETENTION,
	// default 24h).
	IdempotencyRetention time.Duration
	// ListPageBytes is the byte budget of a list page of resources,
	// children, provider configs, operations or spec revisions
	// (LIST_PAGE_BYTES, default 4 MiB): a page ends early, with a cursor,
	// before the item that would pass it.
	ListPageBytes int
	// MemberID names this process in the cluster view (MEMBER_ID,
	// default host-pid).
	MemberID string
	// PprofAddr, when set (PPROF_ADDR, e.g. 127.0.0.1:6060), serves
	// net/http/pprof there: off by default, for profiling a live process.
	PprofAddr string
	// ShutdownTimeout is the budget of a graceful stop (SHUTDOWN_TIMEOUT,
	// default 30s): the dispatcher's wait for deliveries in flight, past
	// which it cancels them and releases their tasks, then the HTTP
	// listeners' wait for open requests. Zero takes the default.
	ShutdownTimeout time.Duration
	// DatabaseWait is how long a starting process waits for the database
	// to accept connections (DATABASE_WAIT, default 60s): a pod started
	// with, or just before, its database retries instead of exiting. A
	// refusal that retrying cannot fix (a bad password, a missing
	// database) fails at once. Zero takes the default.
	DatabaseWait time.Duration
	// Dev is set by `converge dev`: plain-http loopback endpoints allowed.
	Dev bool
}

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

// LoadConfig reads the configuration through getenv and reports every bad
// variable at once.
func LoadConfig(getenv func(string) string) (Config, error) {
	var (
		c    Config
		errs []error
	)
	bad := func(name, val, why string) {
		errs = append(errs, fmt.Errorf("%s=%q: %s", name, val, why))
	}
	// positiveDuration and positiveInt read an optional variable that must
	// be above zero; an unset one takes def, a bad one is reported.
	positiveDuration := func(name string, def time.Duration, example string) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad(name, v, "must be a positive duration like "+example)
			return def
		}
		return d
	}
	positiveInt := func(name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad(name, v, "must be a positive integer")
			return def
		}
		return n
	}
	c.DatabaseURL = getenv("DATABASE_URL")
	c.DatabaseReadURL = getenv("DATABASE_READ_URL")
	for _, v := range []struct{ name, dsn string }{{"DATABASE_URL", c.DatabaseURL}, {"DATABASE_READ_URL", c.DatabaseReadURL}} {
		if v.dsn == "" {
			continue
		}
		if _, err := url.Parse(v.dsn); err != nil && !strings.Contains(v.dsn, "=") {
			bad(v.name, "(redacted)", "is neither a URL nor a key=value DSN")
		}
	}
	switch r := Role(or(getenv("ROLE"), string(RoleAll))); r {
	case RoleAll, RoleControl, RoleDispatch:
		c.Role = r
	default:
		bad("ROLE", string(r), "must be all, control or dispatch")
	}

	c.ListenAddr = or(getenv("LISTEN_ADDR"), ":8080")
	c.TLSCertFile, c.TLSKeyFile = getenv("TLS_CERT_FILE"), getenv("TLS_KEY_FILE")
	addr, tls, err := parseListen(c.ListenAddr)
	if err != nil {
		bad("LISTEN_ADDR", c.ListenAddr, err.Error())
	} else {
		c.ListenAddr, c.TLS = addr, tls
		switch {
		case tls && (c.TLSCertFile == "" || c.TLSKeyFile == ""):
			bad("LISTEN_ADDR", getenv("LISTEN_ADDR"), "https:// needs TLS_CERT_FILE and TLS_KEY_FILE")
		case !tls && (c.TLSCertFile != "" || c.TLSKeyFile != ""):
			bad("TLS_CERT_FILE", c.TLSCertFile, "is set but LISTEN_ADDR is not https://; refusing to serve plain HTTP by mistake")
		}
	}
	c.TLSClientCAFile = getenv("TLS_CLIENT_CA_FILE")
	if c.TLSClientCAFile != "" && !c.TLS {
		bad("TLS_CLIENT_CA_FILE", c.TLSClientCAFile, "is set but LISTEN_ADDR is not https://; client certificates need TLS")
	}
	for _, f := range []struct{ name, path string }{
		{"TLS_CERT_FILE", c.TLSCertFile}, {"TLS_KEY_FILE", c.TLSKeyFile}, {"TLS_CLIENT_CA_FILE", c.TLSClientCAFile}} {
		if f.path == "" {
			continue
		}
		if fh, err := os.Open(f.path); err != nil {
			bad(f.name, f.path, "cannot be read: "+err.Error())
		} else {
			fh.Close()
		}
	}
	c.TLSReloadInterval = time.Minute
	if v := getenv("TLS_RELOAD_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad("TLS_RELOAD_INTERVAL", v, "must be a duration like 1m, or 0 to never re-read the TLS files")
		} else {
			c.TLSReloadInterval = d
		}
	}
	c.HealthAddr = or(getenv("HEALTH_ADDR"), ":8081")
	if _, _, err := net.SplitHostPort(c.HealthAddr); err != nil {
		bad("HEALTH_ADDR", c.HealthAddr, "must be host:port")
	}
	c.HTTPHeaderTimeout = positiveDuration("HTTP_HEADER_TIMEOUT", api.HeaderTimeoutDefault, "10s")
	c.HTTPReadTimeout = positiveDuration("HTTP_READ_TIMEOUT", api.ReadTimeoutDefault, "60s")
	c.HTTPWriteTimeout = positiveDuration("HTTP_WRITE_TIMEOUT", api.WriteTimeoutDefault, "60s")
	c.HTTPIdleTimeout = positiveDuration("HTTP_IDLE_TIMEOUT", api.IdleTimeoutDefault, "90s")
	c.MaxConns = positiveInt("LISTEN_MAX_CONNS", 0)
	c.MaxConnsPerAddr = positiveInt("LISTEN_MAX_CONNS_PER_ADDR", 0)
	if c.MaxConns > 0 && c.MaxConnsPerAddr > c.MaxConns {
		bad("LISTEN_MAX_CONNS_PER_ADDR", getenv("LISTEN_MAX_CONNS_PER_ADDR"), "must not exceed LISTEN_MAX_CONNS")
	}
	c.APIPoolMaxConns = positiveInt("API_POOL_MAX_CONNS", 0)
	for _, v := range []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{{"API_STATEMENT_TIMEOUT", &c.APIStatementTimeout, APIStatementTimeoutDefault}, {"API_LOCK_TIMEOUT", &c.APILockTimeout, APILockTimeoutDefault}} {
		*v.dst = positiveDuration(v.name, v.def, v.def.String())
		if *v.dst >= api.RequestTimeoutDefault {
			bad(v.name, getenv(v.name), "must be shorter than the API's request timeout ("+api.RequestTimeoutDefault.String()+"), or a request gives up before its statement")
			*v.dst = v.def
		}
	}

	if v := getenv("LOG_LEVEL"); v != "" {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			bad("LOG_LEVEL", v, "must be debug, info, warn or error")
		}
	}
	switch c.LogFormat = or(getenv("LOG_FORMAT"), "text"); c.LogFormat {
	case "text", "json":
	default:
		bad("LOG_FORMAT", c.LogFormat, "must be text or json")
	}

	c.DataDir = getenv("CONVERGE_DATA_DIR")
	if c.DataDir == "" {
		base := getenv("XDG_CACHE_HOME")
		if base == "" {
			if home, err := os.UserHomeDir(); err == nil {
				base = filepath.Join(home, ".cache")
			} else {
				base = os.TempDir()
			}
		}
		c.DataDir = filepath.Join(base, "converge")
	}

	c.ReadTokens = splitList(getenv("CONVERGE_READ_TOKENS"))
	c.AdminTokens = splitList(getenv("CONVERGE_ADMIN_TOKENS"))
	for _, t := range append(append([]string{}, c.ReadTokens...), c.AdminTokens...) {
		if len(t) < 16 {
			bad("CONVERGE_ADMIN_TOKENS/CONVERGE_READ_TOKENS", "(redacted)", "every token must be at least 16 characters")
			break
		}
	}

	c.CallbackBaseURL = strings.TrimSuffix(getenv("CALLBACK_BASE_URL"), "/")
	if c.CallbackBaseURL != "" {
		if u, err := url.Parse(c.CallbackBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("CALLBACK_BASE_URL", c.CallbackBaseURL, "must be an absolute http(s) URL")
		}
	}
	c.SecretKey = decodeKey(getenv, secretKeyVar, 32, 32, bad)
	c.CallbackKey = decodeKey(getenv, callbackKeyVar, 32, 1024, bad)
	c.SecretKeyARN = getenv(secretKeyVar + "_SECRET_ARN")
	c.CallbackKeyARN = getenv(callbackKeyVar + "_SECRET_ARN")
	for name, arn := range map[string]string{secretKeyVar: c.SecretKeyARN, callbackKeyVar: c.CallbackKeyARN} {
		if arn != "" && getenv(name) != "" {
			bad(name+"_SECRET_ARN", arn, "is set together with "+name+"; set one")
		}
	}
	if v := getenv("DB_IAM_AUTH"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad("DB_IAM_AUTH", v, "must be true or false")
		}
		c.DBIAMAuth = b
	}
	for _, s := range splitList(getenv("DISPATCH_ALLOW_CIDRS")) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			bad("DISPATCH_ALLOW_CIDRS", s, "is not a CIDR prefix")
			continue
		}
		c.AllowCIDRs = append(c.AllowCIDRs, p)
	}
	c.ReaperRetryWindow = positiveDuration("REAPER_RETRY_WINDOW", 30*time.Second, "30s")
	c.DeliveryLogMaxAge = positiveDuration("DELIVERY_LOG_MAX_AGE", store.DeliveryLogMaxAgeDefault, "168h")
	c.DeliveryLogKeep = positiveInt("DELIVERY_LOG_KEEP", store.DeliveryLogKeepDefault)
	c.SpecHistoryLimit = positiveInt("SPEC_HISTORY_LIMIT", store.SpecHistoryLimitDefault)
	c.IdempotencyRetention = positiveDuration("IDEMPOTENCY_KEY_RETENTION", api.IdempotencyRetentionDefault, "24h")
	c.ListPageBytes = positiveInt("LIST_PAGE_BYTES", store.ListBytesDefault)
	c.ShutdownTimeout = positiveDuration("SHUTDOWN_TIMEOUT", ShutdownTimeoutDefault, "30s")
	c.DatabaseWait = positiveDuration("DATABASE_WAIT", DatabaseWaitDefault, "60s")
	c.MemberID = getenv("MEMBER_ID")
	if c.PprofAddr = getenv("PPROF_ADDR"); c.PprofAddr != "" {
		if _, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			bad("PPROF_ADDR", c.PprofAddr, "must be host:port")
		}
	}
	return c, errors.Join(errs...)
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

func decodeKey(getenv func(string) string, name string, minLen, maxLen int, bad func(string, string, string)) []byte {
	v := getenv(name)
	if v == "" {
		return nil
	}
	b, why := parseKey(v, minLen, maxLen)
	if why != "" {
		bad(name, "(redacted)", why)
	}
	return b
}

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

// NewLogger builds the process logger.
func (c Config) NewLogger(w *os.File) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
