package cli

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/store"
	"github.com/google/go-cmp/cmp"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(env(map[string]string{"CONVERGE_DATA_DIR": "/tmp/x"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Role != RoleAll || c.ListenAddr != ":8080" || c.TLS || c.HealthAddr != ":8081" || c.LogFormat != "text" ||
		c.ReaperRetryWindow != 30*time.Second || c.DataDir != "/tmp/x" || c.DeliveryLogMaxAge != 168*time.Hour || c.DeliveryLogKeep != 10_000 {
		t.Errorf("defaults = %+v", c)
	}
	if c.HTTPHeaderTimeout != 10*time.Second || c.HTTPReadTimeout != time.Minute || c.HTTPWriteTimeout != time.Minute ||
		c.HTTPIdleTimeout != 90*time.Second || c.APIStatementTimeout != 10*time.Second || c.APILockTimeout != 5*time.Second {
		t.Errorf("timeout defaults: header %s, read %s, write %s, idle %s, statement %s, lock %s", c.HTTPHeaderTimeout, c.HTTPReadTimeout,
			c.HTTPWriteTimeout, c.HTTPIdleTimeout, c.APIStatementTimeout, c.APILockTimeout)
	}
	// Derived at start, from the CPU count and the open-file limit.
	if c.MaxConns != 0 || c.MaxConnsPerAddr != 0 || c.APIPoolMaxConns != 0 {
		t.Errorf("LISTEN_MAX_CONNS %d, LISTEN_MAX_CONNS_PER_ADDR %d, API_POOL_MAX_CONNS %d unset: want 0 (the defaults)",
			c.MaxConns, c.MaxConnsPerAddr, c.APIPoolMaxConns)
	}
}

// TestLoadConfigEdge: the listener and API pool variables are read, and
// bad values are refused naming the variable.
func TestLoadConfigEdge(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(env(map[string]string{"HTTP_HEADER_TIMEOUT": "2s", "HTTP_READ_TIMEOUT": "3s", "HTTP_WRITE_TIMEOUT": "4s",
		"HTTP_IDLE_TIMEOUT": "5s", "LISTEN_MAX_CONNS": "100", "LISTEN_MAX_CONNS_PER_ADDR": "10", "API_POOL_MAX_CONNS": "7",
		"API_STATEMENT_TIMEOUT": "8s", "API_LOCK_TIMEOUT": "1s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPHeaderTimeout != 2*time.Second || c.HTTPReadTimeout != 3*time.Second || c.HTTPWriteTimeout != 4*time.Second ||
		c.HTTPIdleTimeout != 5*time.Second || c.MaxConns != 100 || c.MaxConnsPerAddr != 10 || c.APIPoolMaxConns != 7 ||
		c.APIStatementTimeout != 8*time.Second || c.APILockTimeout != time.Second {
		t.Errorf("config = %+v", c)
	}
	_, err = LoadConfig(env(map[string]string{"HTTP_HEADER_TIMEOUT": "0s", "HTTP_IDLE_TIMEOUT": "soon", "LISTEN_MAX_CONNS": "10",
		"LISTEN_MAX_CONNS_PER_ADDR": "11", "API_POOL_MAX_CONNS": "-1", "API_STATEMENT_TIMEOUT": "30s", "API_LOCK_TIMEOUT": "1m"}))
	for _, want := range []string{`HTTP_HEADER_TIMEOUT="0s"`, `HTTP_IDLE_TIMEOUT="soon"`, `LISTEN_MAX_CONNS_PER_ADDR="11": must not exceed`,
		`API_POOL_MAX_CONNS="-1"`, `API_STATEMENT_TIMEOUT="30s": must be shorter`, `API_LOCK_TIMEOUT="1m": must be shorter`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestLoadConfigReportsEveryBadVariable(t *testing.T) {
	t.Parallel()
	_, err := LoadConfig(env(map[string]string{
		"ROLE":                  "worker",
		"LISTEN_ADDR":           "https://:8443",
		"LOG_LEVEL":             "loud",
		"LOG_FORMAT":            "xml",
		"CONVERGE_SECRET_KEY":   "c2hvcnQ=",
		"DISPATCH_ALLOW_CIDRS":  "10.0.0.0/8,nope",
		"REAPER_RETRY_WINDOW":   "-1s",
		"CALLBACK_BASE_URL":     "ftp://x",
		"CONVERGE_ADMIN_TOKENS": "short",
		"DELIVERY_LOG_MAX_AGE":  "a week",
		"DELIVERY_LOG_KEEP":     "0",
	}))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{`ROLE="worker"`, "https:// needs TLS_CERT_FILE", `LOG_LEVEL="loud"`, `LOG_FORMAT="xml"`,
		"CONVERGE_SECRET_KEY", `DISPATCH_ALLOW_CIDRS="nope"`, `REAPER_RETRY_WINDOW="-1s"`, `CALLBACK_BASE_URL="ftp://x"`, "at least 16 characters",
		`DELIVERY_LOG_MAX_AGE="a week"`, `DELIVERY_LOG_KEEP="0"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "c2hvcnQ=") {
		t.Error("error leaks a secret value")
	}
}

func TestParseListen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, addr string
		tls, ok  bool
	}{
		{":8080", ":8080", false, true},
		{"0.0.0.0:9000", "0.0.0.0:9000", false, true},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"https://:8443", ":8443", true, true},
		{"ftp://:1", "", false, false},
		{"8080", "", false, false},
		{"http://:8080/api", "", false, false},
	} {
		addr, tls, err := parseListen(tc.in)
		if (err == nil) != tc.ok || addr != tc.addr || tls != tc.tls {
			t.Errorf("parseListen(%q) = %q, %v, %v; want %q, %v, ok=%v", tc.in, addr, tls, err, tc.addr, tc.tls, tc.ok)
		}
	}
}

// TestDevConfigBindsLoopback: `converge dev` serves an open API, so without
// LISTEN_ADDR and HEALTH_ADDR it must listen on loopback only, not on every
// interface.
func TestDevConfigBindsLoopback(t *testing.T) {
	t.Parallel()
	c, err := loadDevConfig(env(map[string]string{"CONVERGE_DATA_DIR": "/tmp/x"}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Dev || c.ListenAddr != "127.0.0.1:8080" || c.HealthAddr != "127.0.0.1:8081" {
		t.Errorf("dev config: Dev=%v ListenAddr=%q HealthAddr=%q, want dev mode on 127.0.0.1:8080 and :8081", c.Dev, c.ListenAddr, c.HealthAddr)
	}
	c, err = loadDevConfig(env(map[string]string{"CONVERGE_DATA_DIR": "/tmp/x", "LISTEN_ADDR": "0.0.0.0:9000", "HEALTH_ADDR": "0.0.0.0:9001"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenAddr != "0.0.0.0:9000" || c.HealthAddr != "0.0.0.0:9001" {
		t.Errorf("dev config with LISTEN_ADDR=0.0.0.0:9000 HEALTH_ADDR=0.0.0.0:9001 listens on %q and %q", c.ListenAddr, c.HealthAddr)
	}
}

func TestLoadConfigPprofAddr(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(env(map[string]string{"PPROF_ADDR": "127.0.0.1:6060"}))
	if err != nil || c.PprofAddr != "127.0.0.1:6060" {
		t.Fatalf("PPROF_ADDR=127.0.0.1:6060: %q, %v", c.PprofAddr, err)
	}
	if _, err := LoadConfig(env(map[string]string{"PPROF_ADDR": "6060"})); err == nil || !strings.Contains(err.Error(), "PPROF_ADDR") {
		t.Fatalf("PPROF_ADDR=6060: err = %v, want one naming PPROF_ADDR", err)
	}
}

// TestLoadConfigTLS: the TLS variables are checked at boot, every bad one
// named: a bad reload interval, a client CA without https, files that
// cannot be read.
func TestLoadConfigTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key, ca := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	for _, f := range []string{cert, key, ca} {
		if err := os.WriteFile(f, []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := LoadConfig(env(map[string]string{"LISTEN_ADDR": "https://:8443", "TLS_CERT_FILE": cert, "TLS_KEY_FILE": key}))
	if err != nil || c.TLSReloadInterval != time.Minute || c.TLSClientCAFile != "" {
		t.Fatalf("defaults: interval %s, client CA %q, err %v; want 1m, none", c.TLSReloadInterval, c.TLSClientCAFile, err)
	}
	c, err = LoadConfig(env(map[string]string{"LISTEN_ADDR": "https://:8443", "TLS_CERT_FILE": cert, "TLS_KEY_FILE": key,
		"TLS_CLIENT_CA_FILE": ca, "TLS_RELOAD_INTERVAL": "0"}))
	if err != nil || c.TLSReloadInterval != 0 || c.TLSClientCAFile != ca {
		t.Fatalf("TLS_RELOAD_INTERVAL=0 with a client CA: interval %s, client CA %q, err %v", c.TLSReloadInterval, c.TLSClientCAFile, err)
	}

	_, err = LoadConfig(env(map[string]string{"LISTEN_ADDR": "https://:8443", "TLS_CERT_FILE": cert + ".gone",
		"TLS_KEY_FILE": key + ".gone", "TLS_CLIENT_CA_FILE": ca + ".gone", "TLS_RELOAD_INTERVAL": "soon"}))
	for _, want := range []string{`TLS_CERT_FILE="` + cert + `.gone": cannot be read`, `TLS_KEY_FILE="` + key + `.gone": cannot be read`,
		`TLS_CLIENT_CA_FILE="` + ca + `.gone": cannot be read`, `TLS_RELOAD_INTERVAL="soon"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
	_, err = LoadConfig(env(map[string]string{"TLS_CLIENT_CA_FILE": ca, "TLS_RELOAD_INTERVAL": "-1m"}))
	for _, want := range []string{`TLS_CLIENT_CA_FILE="` + ca + `": is set but LISTEN_ADDR is not https://`, `TLS_RELOAD_INTERVAL="-1m"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

// TestLoadConfigDurations: each duration variable has its default, takes a
// Go duration, and refuses zero, negative and malformed values by name.
func TestLoadConfigDurations(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		def time.Duration
		get func(Config) time.Duration
	}{
		"SHUTDOWN_TIMEOUT":          {30 * time.Second, func(c Config) time.Duration { return c.ShutdownTimeout }},
		"DATABASE_WAIT":             {60 * time.Second, func(c Config) time.Duration { return c.DatabaseWait }},
		"IDEMPOTENCY_KEY_RETENTION": {24 * time.Hour, func(c Config) time.Duration { return c.IdempotencyRetention }},
	} {
		cfg, err := LoadConfig(env(map[string]string{}))
		if err != nil || c.get(cfg) != c.def {
			t.Fatalf("default %s = %s, %v; want %s", name, c.get(cfg), err, c.def)
		}
		cfg, err = LoadConfig(env(map[string]string{name: "5s"}))
		if err != nil || c.get(cfg) != 5*time.Second {
			t.Fatalf("%s=5s: %s, %v", name, c.get(cfg), err)
		}
		for _, v := range []string{"0", "-1s", "soon"} {
			if _, err := LoadConfig(env(map[string]string{name: v})); err == nil || !strings.Contains(err.Error(), name+`="`+v+`"`) {
				t.Errorf("%s=%s: err = %v, want one naming it", name, v, err)
			}
		}
	}
}

// TestLoadConfigListPageBytes: LIST_PAGE_BYTES defaults to the store's
// budget, takes a positive byte count, and refuses anything else by name.
func TestLoadConfigListPageBytes(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(env(map[string]string{}))
	if err != nil || c.ListPageBytes != store.ListBytesDefault {
		t.Fatalf("default = %d, %v; want %d", c.ListPageBytes, err, store.ListBytesDefault)
	}
	c, err = LoadConfig(env(map[string]string{"LIST_PAGE_BYTES": "1048576"}))
	if err != nil || c.ListPageBytes != 1<<20 {
		t.Fatalf("LIST_PAGE_BYTES=1048576: %d, %v", c.ListPageBytes, err)
	}
	for _, v := range []string{"0", "-1", "4MiB", "1e6"} {
		if _, err := LoadConfig(env(map[string]string{"LIST_PAGE_BYTES": v})); err == nil || !strings.Contains(err.Error(), `LIST_PAGE_BYTES="`+v+`"`) {
			t.Errorf("LIST_PAGE_BYTES=%s: err = %v, want one naming it", v, err)
		}
	}
}

var update = flag.Bool("update", false, "rewrite docs/operations.md's configuration table from settings")

// TestConfigReference keeps docs/operations.md's configuration table the
// one settings describes: every variable LoadConfig reads, with its default
// and meaning. With -update (go generate ./cmd/converge/cli) it rewrites
// the table instead.
func TestConfigReference(t *testing.T) {
	const (
		doc   = "../../../docs/operations.md"
		begin = "<!-- The configuration table is written from cmd/converge/cli/settings.go: go generate ./cmd/converge/cli -->\n"
		end   = "<!-- end of the configuration table -->\n"
	)
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(b), begin)
	table, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("%s has no configuration table between the lines\n%s%s", doc, begin, end)
	}
	want := configReference()
	if *update {
		if err := os.WriteFile(doc, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, table); diff != "" {
		t.Errorf("%s's configuration table is not the one settings.go describes (-want +got); "+
			"run go generate ./cmd/converge/cli:\n%s", doc, diff)
	}
	for _, s := range settings() {
		if !regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(s.name) || s.doc == "" || s.read == nil {
			t.Errorf("setting %q: want an upper-case name, a doc and a reader", s.name)
		}
	}
}

// TestLoadConfigNeverQuotesASecret: a refused secret (a DSN, a token, a
// key) is named, its value never quoted.
func TestLoadConfigNeverQuotesASecret(t *testing.T) {
	t.Parallel()
	const value = "%zz-s3cret"
	n := 0
	for _, s := range settings() {
		if !s.secret {
			continue
		}
		n++
		_, err := LoadConfig(env(map[string]string{s.name: value}))
		if err == nil || !strings.Contains(err.Error(), s.name+`="(redacted)"`) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s=%s: err = %v, want one naming it and redacting the value", s.name, value, err)
		}
	}
	if n < 6 {
		t.Errorf("%d secret settings, want DATABASE_URL, DATABASE_READ_URL, two token lists and two keys", n)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{5 * time.Second: "5s", time.Minute: "60s", 90 * time.Second: "90s",
		5*time.Minute + 30*time.Second: "5m30s", 10 * time.Minute: "10m", 90 * time.Minute: "1h30m", 168 * time.Hour: "168h",
		1500 * time.Millisecond: "1.5s"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestLoadConfigOIDC: the OIDC variables are read with their defaults, the
// console's client ID defaults to the audience, and an issuer without an
// audience, an audience without an issuer or a plain-http issuer off
// loopback is refused naming the variable.
func TestLoadConfigOIDC(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if c.OIDCConfig() != nil {
		t.Errorf("OIDC on without OIDC_ISSUER_URL: %+v", c.OIDC)
	}
	c, err = LoadConfig(env(map[string]string{"OIDC_ISSUER_URL": "https://idp.example.com/realms/x", "OIDC_AUDIENCE": "converge"}))
	if err != nil {
		t.Fatal(err)
	}
	want := api.OIDCConfig{IssuerURL: "https://idp.example.com/realms/x", Audience: "converge", ClientID: "converge",
		Scopes: []string{"openid", "profile", "email"}, UsernameClaim: "sub", GroupsClaim: "groups", ClockSkew: time.Minute}
	if diff := cmp.Diff(&want, c.OIDCConfig()); diff != "" {
		t.Errorf("OIDC defaults (-want +got):\n%s", diff)
	}
	c, err = LoadConfig(env(map[string]string{"OIDC_ISSUER_URL": "http://127.0.0.1:9000", "OIDC_AUDIENCE": "api://converge",
		"OIDC_USERNAME_CLAIM": "email", "OIDC_GROUPS_CLAIM": "cognito:groups", "OIDC_CLOCK_SKEW": "10s",
		"OIDC_CONSOLE_CLIENT_ID": "console", "OIDC_CONSOLE_SCOPES": "openid, api://converge/access"}))
	if err != nil {
		t.Fatal(err)
	}
	want = api.OIDCConfig{IssuerURL: "http://127.0.0.1:9000", Audience: "api://converge", ClientID: "console",
		Scopes: []string{"openid", "api://converge/access"}, UsernameClaim: "email", GroupsClaim: "cognito:groups", ClockSkew: 10 * time.Second}
	if diff := cmp.Diff(&want, c.OIDCConfig()); diff != "" {
		t.Errorf("OIDC (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OIDC_ISSUER_URL": "https://idp.example.com"}, `OIDC_AUDIENCE="": is required`},
		{map[string]string{"OIDC_AUDIENCE": "converge"}, `OIDC_AUDIENCE="converge": is set but OIDC_ISSUER_URL is not`},
		{map[string]string{"OIDC_ISSUER_URL": "http://idp.example.com", "OIDC_AUDIENCE": "x"}, `OIDC_ISSUER_URL="http://idp.example.com": must be https://`},
		{map[string]string{"OIDC_ISSUER_URL": "idp.example.com", "OIDC_AUDIENCE": "x"}, `OIDC_ISSUER_URL="idp.example.com"`},
		{map[string]string{"OIDC_ISSUER_URL": "https://idp.example.com", "OIDC_AUDIENCE": "x", "OIDC_CLOCK_SKEW": "-1s"}, `OIDC_CLOCK_SKEW="-1s"`},
	} {
		if _, err := LoadConfig(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to say %s", tc.env, err, tc.want)
		}
	}
}
