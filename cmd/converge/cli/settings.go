package cli

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
)

// settings is every variable LoadConfig reads, in the order of the
// configuration table in docs/operations.md, which TestConfigReference
// writes from it.
//
//go:generate go test -run ^TestConfigReference$ -update .
func settings() []setting {
	return []setting{
		{name: "DATABASE_URL", def: "— (required; `converge dev` starts an embedded Postgres)", secret: true,
			doc:  "PostgreSQL DSN, URL or key=value. Every pool of the process connects with it ([database pools](#database-pools)); pgx's pool settings ride on it and size the engine's pool: `pool_max_conns` (default the larger of 12 and the CPU count: at least as many as the engine's duties hold at once) and `pool_min_conns` (default: `pool_max_conns`, see [Warm connections](#warm-connections))",
			read: readDSN(func(c *Config) *string { return &c.DatabaseURL })},
		{name: "DATABASE_READ_URL", secret: true,
			doc:  "a second DSN, typically a read replica (an Aurora reader endpoint, a hot standby), for the API's reads: its `GET`s and `HEAD`s under `/api/v1` (gets and lists of resources, kinds, manifests, events, endpoints, deliveries, operations, bindings, provider configs, cluster members), which may then lag the primary by the replica's delay; a `GET` with `Consistent-Read: true` reads `DATABASE_URL` ([reads from a replica](#reads-from-a-replica)). Writes and their answers, the change stream, the engine, the dispatcher, the drainer, the reaper, `/readyz` and a resource's current task (the UNLOGGED work queue is not replicated) always use `DATABASE_URL`. A replica that does not answer is not an outage: its reads fall back to `DATABASE_URL`. `pool_max_conns` on it sizes its pool; `connect_timeout` defaults to " + code(formatDuration(ReadConnectTimeoutDefault)) + ". Its connections run under `API_STATEMENT_TIMEOUT` and `API_LOCK_TIMEOUT`. With `DB_IAM_AUTH` it is authenticated the same way and must require TLS too",
			read: readDSN(func(c *Config) *string { return &c.DatabaseReadURL })},
		{name: "API_POOL_MAX_CONNS", def: "the larger of 4 and the CPU count",
			doc:  "connections of the API's own pool on `DATABASE_URL` (`all`, `control`), apart from the engine's ([database pools](#database-pools))",
			read: positiveInt(func(c *Config) *int { return &c.APIPoolMaxConns }, 0)},
		apiTimeout("API_STATEMENT_TIMEOUT", APIStatementTimeoutDefault, func(c *Config) *time.Duration { return &c.APIStatementTimeout },
			"`statement_timeout` of the API's connections (and the read pool's): a request's statement is cancelled past it and answered `503` with `Retry-After`; must be under the 30 s request timeout"),
		apiTimeout("API_LOCK_TIMEOUT", APILockTimeoutDefault, func(c *Config) *time.Duration { return &c.APILockTimeout },
			"`lock_timeout` of the same connections: a request's wait for a lock; must be under the 30 s request timeout"),
		{name: "ROLE", def: code(string(RoleAll)), doc: "`all`, `control` or `dispatch`",
			read: func(c *Config, v string, _ func(string) string) error {
				switch r := Role(or(v, string(RoleAll))); r {
				case RoleAll, RoleControl, RoleDispatch:
					c.Role = r
					return nil
				}
				return errors.New("must be all, control or dispatch")
			}},
		{name: "LISTEN_ADDR", def: code(ListenAddrDefault) + " (`converge dev`: " + code(DevListenAddrDefault) + ")",
			doc:  "`host:port`, `http://host:port`, or `https://host:port` (needs `TLS_CERT_FILE` and `TLS_KEY_FILE`; TLS 1.2+)",
			read: readListenAddr},
		tlsFile("TLS_CERT_FILE", func(c *Config) *string { return &c.TLSCertFile },
			"the PEM certificate, chain included, that an `https://` `LISTEN_ADDR` serves ([TLS](#tls))",
			"is set but LISTEN_ADDR is not https://; refusing to serve plain HTTP by mistake"),
		tlsFile("TLS_KEY_FILE", func(c *Config) *string { return &c.TLSKeyFile },
			"the PEM private key of `TLS_CERT_FILE`",
			"is set but LISTEN_ADDR is not https://; refusing to serve plain HTTP by mistake"),
		{name: "TLS_RELOAD_INTERVAL", def: code(formatDuration(TLSReloadIntervalDefault)),
			doc: "how often `TLS_CERT_FILE`, `TLS_KEY_FILE` and `TLS_CLIENT_CA_FILE` are re-read; a changed set serves new connections without a restart (see TLS below); `0` never re-reads them",
			read: func(c *Config, v string, _ func(string) string) error {
				c.TLSReloadInterval = TLSReloadIntervalDefault
				if v == "" {
					return nil
				}
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					return errors.New("must be a duration like " + formatDuration(TLSReloadIntervalDefault) + ", or 0 to never re-read the TLS files")
				}
				c.TLSReloadInterval = d
				return nil
			}},
		tlsFile("TLS_CLIENT_CA_FILE", func(c *Config) *string { return &c.TLSClientCAFile },
			"PEM bundle of CAs: every client of `LISTEN_ADDR` must present a certificate it verifies (mutual TLS); `https://` only",
			"is set but LISTEN_ADDR is not https://; client certificates need TLS"),
		{name: "HEALTH_ADDR", def: code(HealthAddrDefault) + " (`converge dev`: " + code(DevHealthAddrDefault) + ")",
			doc:  "`/livez` and `/readyz` on a listener of their own, for every role ([Readiness](#readiness))",
			read: readHostPort(func(c *Config) *string { return &c.HealthAddr }, HealthAddrDefault)},
		duration("HTTP_HEADER_TIMEOUT", api.HeaderTimeoutDefault, func(c *Config) *time.Duration { return &c.HTTPHeaderTimeout },
			"how long a connection may take to send a request's headers; one that sends none, or never finishes them, is closed ([listener timeouts](#listener-timeouts-and-connection-caps); every listener)"),
		duration("HTTP_READ_TIMEOUT", api.ReadTimeoutDefault, func(c *Config) *time.Duration { return &c.HTTPReadTimeout },
			"how long a request's body may take once its headers are in"),
		duration("HTTP_WRITE_TIMEOUT", api.WriteTimeoutDefault, func(c *Config) *time.Duration { return &c.HTTPWriteTimeout },
			"how long writing a response may take (the console's change stream: each write)"),
		duration("HTTP_IDLE_TIMEOUT", api.IdleTimeoutDefault, func(c *Config) *time.Duration { return &c.HTTPIdleTimeout },
			"how long a kept-alive connection may wait for its next request; keep it above a load balancer's idle timeout (AWS ALB: 60 s)"),
		{name: "LISTEN_MAX_CONNS", def: code(strconv.Itoa(MaxConnsDefault)) + ", or half the open-file limit if that is lower",
			doc:  "connections open at once on `LISTEN_ADDR`; at the cap the next ones wait in the kernel's backlog ([connection caps](#listener-timeouts-and-connection-caps))",
			read: positiveInt(func(c *Config) *int { return &c.MaxConns }, 0)},
		{name: "LISTEN_MAX_CONNS_PER_ADDR", def: "a tenth of `LISTEN_MAX_CONNS`",
			doc: "connections open at once on `LISTEN_ADDR` from one client IP address; one more is closed at once. Behind a load balancer, see [connection caps](#listener-timeouts-and-connection-caps)",
			read: func(c *Config, v string, getenv func(string) string) error {
				if err := positiveInt(func(c *Config) *int { return &c.MaxConnsPerAddr }, 0)(c, v, getenv); err != nil {
					return err
				}
				if c.MaxConns > 0 && c.MaxConnsPerAddr > c.MaxConns {
					return errors.New("must not exceed LISTEN_MAX_CONNS")
				}
				return nil
			}},
		{name: "LOG_LEVEL", def: "`info`", doc: "`debug`, `info`, `warn` or `error`",
			read: func(c *Config, v string, _ func(string) string) error {
				if v != "" && c.LogLevel.UnmarshalText([]byte(v)) != nil {
					return errors.New("must be debug, info, warn or error")
				}
				return nil
			}},
		{name: "LOG_FORMAT", def: "`text`", doc: "`text`, or `json` (one object per line)",
			read: func(c *Config, v string, _ func(string) string) error {
				switch c.LogFormat = or(v, "text"); c.LogFormat {
				case "text", "json":
					return nil
				}
				return errors.New("must be text or json")
			}},
		tokens("CONVERGE_ADMIN_TOKENS", func(c *Config) *[]string { return &c.AdminTokens },
			"comma-separated bearer tokens allowed to write (≥ 16 chars each)"),
		tokens("CONVERGE_READ_TOKENS", func(c *Config) *[]string { return &c.ReadTokens },
			"comma-separated bearer tokens allowed to read; with neither set the API is **open** (dev only)"),
		{name: "OIDC_ISSUER_URL",
			doc:  "the OIDC issuer whose tokens the API accepts beside the static tokens ([OIDC sign-in](#oidc-sign-in)): its discovery document is at `<url>/.well-known/openid-configuration`, and a token's `iss` must equal the URL exactly. `https://`, or `http://` on a loopback host only. Needs `OIDC_AUDIENCE`",
			read: readIssuerURL},
		{name: "OIDC_AUDIENCE", def: "— (required with `OIDC_ISSUER_URL`)",
			doc: "the audience an OIDC token's `aud` must include: the API's identifier at the provider (often the console's client ID)",
			read: func(c *Config, v string, _ func(string) string) error {
				c.OIDC.Audience = v
				switch {
				case v == "" && c.OIDC.IssuerURL != "":
					return errors.New("is required when OIDC_ISSUER_URL is set")
				case v != "" && c.OIDC.IssuerURL == "":
					return errors.New("is set but OIDC_ISSUER_URL is not")
				}
				return nil
			}},
		{name: "OIDC_USERNAME_CLAIM", def: code(api.OIDCUsernameClaimDefault),
			doc: "the claim that names the caller (the subject `whoami`, role bindings and the audit trail use); `email` or `preferred_username` are common choices",
			read: func(c *Config, v string, _ func(string) string) error {
				c.OIDC.UsernameClaim = or(v, api.OIDCUsernameClaimDefault)
				return nil
			}},
		{name: "OIDC_GROUPS_CLAIM", def: code(api.OIDCGroupsClaimDefault),
			doc: "the claim holding the caller's groups, a string or an array of strings (Entra: `groups` or `roles`; Cognito: `cognito:groups`)",
			read: func(c *Config, v string, _ func(string) string) error {
				c.OIDC.GroupsClaim = or(v, api.OIDCGroupsClaimDefault)
				return nil
			}},
		duration("OIDC_CLOCK_SKEW", api.OIDCClockSkewDefault, func(c *Config) *time.Duration { return &c.OIDC.ClockSkew },
			"how far a token's `exp`, `nbf` and `iat` may be off this server's clock"),
		{name: "OIDC_CONSOLE_CLIENT_ID", def: "`OIDC_AUDIENCE`",
			doc: "the OAuth client (a public client: no secret) the console signs in as, with the authorization-code flow and PKCE; the console sends the ID token when this equals `OIDC_AUDIENCE`, else the access token",
			read: func(c *Config, v string, _ func(string) string) error {
				c.OIDC.ClientID = or(v, c.OIDC.Audience)
				return nil
			}},
		{name: "OIDC_CONSOLE_SCOPES", def: "`" + strings.Join(api.OIDCScopesDefault(), " ") + "`",
			doc: "the scopes the console asks for, space- or comma-separated (add `groups` where the provider needs it for the groups claim, or the API's scope, such as Entra's `api://<app>/access`, for an access token whose audience is `OIDC_AUDIENCE`)",
			read: func(c *Config, v string, _ func(string) string) error {
				c.OIDC.Scopes = strings.Fields(strings.ReplaceAll(v, ",", " "))
				if len(c.OIDC.Scopes) == 0 {
					c.OIDC.Scopes = api.OIDCScopesDefault()
				}
				return nil
			}},
		key(secretKeyVar, 32, 32, func(c *Config) *[]byte { return &c.SecretKey },
			"base64 of 32 bytes; encrypts endpoint signing secrets at rest (AES-256-GCM)"),
		key(callbackKeyVar, 32, 1024, func(c *Config) *[]byte { return &c.CallbackKey },
			"base64 of ≥ 32 bytes, the same on every dispatch pod; signs callback tokens"),
		keyARN(secretKeyVar, func(c *Config) *string { return &c.SecretKeyARN }),
		keyARN(callbackKeyVar, func(c *Config) *string { return &c.CallbackKeyARN }),
		duration("KEY_REFRESH_INTERVAL", KeyRefreshIntervalDefault, func(c *Config) *time.Duration { return &c.KeyRefreshInterval },
			"how often the `*_SECRET_ARN` secrets are re-read, so a rotation is taken up without a restart ([key rotation](#key-rotation)); the rotation function waits this plus a minute between staging a key and making it current, so keep them together"),
		{name: "DB_IAM_AUTH", def: "`false`",
			doc: "`true`: authenticate to Postgres (RDS, Aurora) with an IAM auth token minted for each new connection instead of a password; `DATABASE_URL` names the user and must set `sslmode=require` or `verify-full` (see AWS below)",
			read: func(c *Config, v string, _ func(string) string) error {
				if v == "" {
					return nil
				}
				b, err := strconv.ParseBool(v)
				if err != nil {
					return errors.New("must be true or false")
				}
				c.DBIAMAuth = b
				return nil
			}},
		{name: "CALLBACK_BASE_URL", def: "the listen address in dev",
			doc: "the externally reachable base of the dispatch pods (a load balancer); each task's callback URL is built from it",
			read: func(c *Config, v string, _ func(string) string) error {
				c.CallbackBaseURL = strings.TrimSuffix(v, "/")
				if c.CallbackBaseURL == "" {
					return nil
				}
				if u, err := url.Parse(c.CallbackBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return badItem{item: c.CallbackBaseURL, why: "must be an absolute http(s) URL"}
				}
				return nil
			}},
		{name: "DISPATCH_ALLOW_CIDRS",
			doc: "networks endpoints may reach that the SSRF guard otherwise blocks (private ranges, loopback)",
			read: func(c *Config, v string, _ func(string) string) error {
				var errs []error
				for _, s := range splitList(v) {
					p, err := netip.ParsePrefix(s)
					if err != nil {
						errs = append(errs, badItem{item: s, why: "is not a CIDR prefix"})
						continue
					}
					c.AllowCIDRs = append(c.AllowCIDRs, p)
				}
				return errors.Join(errs...)
			}},
		duration("REAPER_RETRY_WINDOW", ReaperRetryWindowDefault, func(c *Config) *time.Duration { return &c.ReaperRetryWindow },
			"how long a lagging resource with no live task waits before the reaper re-schedules it"),
		duration("PHASE_COUNT_INTERVAL", reaper.PhaseCountEveryDefault, func(c *Config) *time.Duration { return &c.PhaseCountInterval },
			"how often the control pod holding shard 0 counts resources by kind and phase for `converge_resources` ([resources by phase](#resources-by-phase))"),
		duration("DELIVERY_LOG_MAX_AGE", store.DeliveryLogMaxAgeDefault, func(c *Config) *time.Duration { return &c.DeliveryLogMaxAge },
			"how long the delivery log keeps an attempt; the reaper drops older ones ([the delivery log](#the-delivery-log))"),
		count("DELIVERY_LOG_KEEP", store.DeliveryLogKeepDefault, func(c *Config) *int { return &c.DeliveryLogKeep },
			"how many attempts the delivery log keeps per endpoint; the reaper drops the rest, oldest first"),
		duration("AUDIT_RETENTION", store.AuditRetentionDefault, func(c *Config) *time.Duration { return &c.AuditRetention },
			"how long the audit trail keeps a request (`GET /api/v1/audit`, [api.md](api.md#audit-trail)); `2160h` is 90 days. The reaper deletes older entries ([the audit trail](#the-audit-trail))"),
		count("SPEC_HISTORY_LIMIT", store.SpecHistoryLimitDefault, func(c *Config) *int { return &c.SpecHistoryLimit },
			"how many spec revisions each root resource keeps (`GET .../spec-history`, `POST .../rollback`)"),
		duration("IDEMPOTENCY_KEY_RETENTION", api.IdempotencyRetentionDefault, func(c *Config) *time.Duration { return &c.IdempotencyRetention },
			"how long the answer of a `POST` sent with an `Idempotency-Key` is kept for its retries ([api.md](api.md#idempotency-keys)); the reaper deletes expired keys"),
		{name: "LIST_PAGE_BYTES", def: fmt.Sprintf("`%d` (%d MiB)", store.ListBytesDefault, store.ListBytesDefault>>20),
			doc:  "the byte budget of a list page of resources, children, provider configs, operations or spec revisions: a page ends early, with a `next_cursor`, before the item that would take the bytes read for it past this many (a page always holds one item). It bounds the memory one list request takes: measured with the garbage collector's headroom, about 4 × the budget per concurrent list request (the rows read, the items, the answer, written item by item); see [api.md](api.md#page-budget)",
			read: positiveInt(func(c *Config) *int { return &c.ListPageBytes }, store.ListBytesDefault)},
		duration("SHUTDOWN_TIMEOUT", ShutdownTimeoutDefault, func(c *Config) *time.Duration { return &c.ShutdownTimeout },
			"the budget of a graceful stop on SIGTERM (see Shutdown below); keep it below the pod's `terminationGracePeriodSeconds`"),
		duration("DATABASE_WAIT", DatabaseWaitDefault, func(c *Config) *time.Duration { return &c.DatabaseWait },
			"how long a starting process retries (250 ms doubling to 5 s) while its database refuses connections, is unreachable or is starting up, before it exits with status 1; a refusal a retry cannot fix (bad credentials, a missing database) exits at once"),
		{name: "MEMBER_ID", def: "`host-pid`", doc: "this process's name in the cluster view",
			read: func(c *Config, v string, _ func(string) string) error { c.MemberID = v; return nil }},
		{name: "PPROF_ADDR",
			doc:  "serve Go's `net/http/pprof` on this host:port (its own listener; bind it to loopback), for profiling a live process",
			read: readHostPort(func(c *Config) *string { return &c.PprofAddr }, "")},
		{name: "CONVERGE_DATA_DIR", def: "`$XDG_CACHE_HOME/converge`, else `~/.cache/converge`",
			doc: "dev mode only: embedded Postgres data, dev keys and a demo's logs (as root the cluster may live elsewhere; see Local development)",
			read: func(c *Config, v string, getenv func(string) string) error {
				c.DataDir = v
				if v != "" {
					return nil
				}
				base := getenv("XDG_CACHE_HOME")
				if base == "" {
					if home, err := os.UserHomeDir(); err == nil {
						base = filepath.Join(home, ".cache")
					} else {
						base = os.TempDir()
					}
				}
				c.DataDir = filepath.Join(base, "converge")
				return nil
			}},
	}
}

// duration is a setting holding a duration above zero, def when unset.
func duration(name string, def time.Duration, field func(*Config) *time.Duration, doc string) setting {
	return setting{name: name, def: code(formatDuration(def)), doc: doc, read: positiveDuration(field, def)}
}

// count is a setting holding an integer above zero, def when unset.
func count(name string, def int, field func(*Config) *int, doc string) setting {
	return setting{name: name, def: code(strconv.Itoa(def)), doc: doc, read: positiveInt(field, def)}
}

// apiTimeout is a duration setting of the API's connections, which must be
// shorter than the API's request timeout.
func apiTimeout(name string, def time.Duration, field func(*Config) *time.Duration, doc string) setting {
	s := duration(name, def, field, doc)
	read := s.read
	s.read = func(c *Config, v string, getenv func(string) string) error {
		if err := read(c, v, getenv); err != nil {
			return err
		}
		if *field(c) >= api.RequestTimeoutDefault {
			*field(c) = def
			return errors.New("must be shorter than the API's request timeout (" + api.RequestTimeoutDefault.String() + "), or a request gives up before its statement")
		}
		return nil
	}
	return s
}

// positiveDuration reads a duration above zero into field, def when unset.
func positiveDuration(field func(*Config) *time.Duration, def time.Duration) func(*Config, string, func(string) string) error {
	return func(c *Config, v string, _ func(string) string) error {
		*field(c) = def
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("must be a positive duration like " + formatDuration(def))
		}
		*field(c) = d
		return nil
	}
}

// positiveInt reads an integer above zero into field, def when unset.
func positiveInt(field func(*Config) *int, def int) func(*Config, string, func(string) string) error {
	return func(c *Config, v string, _ func(string) string) error {
		*field(c) = def
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errors.New("must be a positive integer")
		}
		*field(c) = n
		return nil
	}
}

// readDSN reads a Postgres DSN: a URL or key=value pairs.
func readDSN(field func(*Config) *string) func(*Config, string, func(string) string) error {
	return func(c *Config, v string, _ func(string) string) error {
		*field(c) = v
		if _, err := url.Parse(v); v != "" && err != nil && !strings.Contains(v, "=") {
			return errors.New("is neither a URL nor a key=value DSN")
		}
		return nil
	}
}

// readHostPort reads a host:port, def when unset ("": none).
func readHostPort(field func(*Config) *string, def string) func(*Config, string, func(string) string) error {
	return func(c *Config, v string, _ func(string) string) error {
		*field(c) = or(v, def)
		if *field(c) == "" {
			return nil
		}
		if _, _, err := net.SplitHostPort(*field(c)); err != nil {
			return errors.New("must be host:port")
		}
		return nil
	}
}

// readListenAddr reads LISTEN_ADDR; https:// needs both TLS files.
func readListenAddr(c *Config, v string, getenv func(string) string) error {
	c.ListenAddr = or(v, ListenAddrDefault)
	addr, tls, err := parseListen(c.ListenAddr)
	if err != nil {
		return err
	}
	c.ListenAddr, c.TLS = addr, tls
	if tls && (getenv("TLS_CERT_FILE") == "" || getenv("TLS_KEY_FILE") == "") {
		return errors.New("https:// needs TLS_CERT_FILE and TLS_KEY_FILE")
	}
	return nil
}

// tlsFile is a setting naming a file an https:// LISTEN_ADDR reads: set
// with a plain http LISTEN_ADDR it is refused, saying plain; an unreadable
// one is refused too.
func tlsFile(name string, field func(*Config) *string, doc, plain string) setting {
	return setting{name: name, doc: doc, read: func(c *Config, v string, getenv func(string) string) error {
		*field(c) = v
		if v == "" {
			return nil
		}
		if _, tls, err := parseListen(or(getenv("LISTEN_ADDR"), ListenAddrDefault)); err == nil && !tls {
			return errors.New(plain)
		}
		f, err := os.Open(v)
		if err != nil {
			return errors.New("cannot be read: " + err.Error())
		}
		return f.Close()
	}}
}

// tokens is a setting holding comma-separated bearer tokens.
func tokens(name string, field func(*Config) *[]string, doc string) setting {
	return setting{name: name, doc: doc, secret: true, read: func(c *Config, v string, _ func(string) string) error {
		*field(c) = splitList(v)
		for _, t := range *field(c) {
			if len(t) < 16 {
				return errors.New("every token must be at least 16 characters")
			}
		}
		return nil
	}}
}

// key is a setting holding a base64 key of minLen..maxLen bytes.
func key(name string, minLen, maxLen int, field func(*Config) *[]byte, doc string) setting {
	return setting{name: name, def: "— (dev: generated into the data dir)", doc: doc, secret: true,
		read: func(c *Config, v string, _ func(string) string) error {
			if v == "" {
				return nil
			}
			b, why := parseKey(v, minLen, maxLen)
			if why != "" {
				return errors.New(why)
			}
			*field(c) = b
			return nil
		}}
}

// keyARN is the setting naming a Secrets Manager secret that holds the key
// keyVar names, which must not be set too.
func keyARN(keyVar string, field func(*Config) *string) setting {
	return setting{name: keyVar + "_SECRET_ARN",
		doc: "instead of `" + keyVar + "`, the ARN (or name) of a Secrets Manager secret whose `SecretString` is that base64 key. Its `AWSCURRENT` version is the key, its `AWSPREVIOUS` and `AWSPENDING` versions still open and verify ([key rotation](#key-rotation)); read at start and every `KEY_REFRESH_INTERVAL`. Setting both is refused",
		read: func(c *Config, v string, getenv func(string) string) error {
			*field(c) = v
			if v != "" && getenv(keyVar) != "" {
				return errors.New("is set together with " + keyVar + "; set one")
			}
			return nil
		}}
}

// code is s as Markdown code.
func code(s string) string { return "`" + s + "`" }

// formatDuration is d as a person writes it: whole seconds under two
// minutes (60s, 90s), else without the zero units Duration.String adds
// (168h, not 168h0m0s).
func formatDuration(d time.Duration) string {
	switch {
	case d%time.Second != 0:
		return d.String()
	case d < 2*time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// configReference is the configuration table of docs/operations.md.
func configReference() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, s := range settings() {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.name, or(s.def, "—"), s.doc)
	}
	return b.String()
}

// readIssuerURL reads OIDC_ISSUER_URL: https, or http on a loopback host
// (a local issuer in development and tests), with no query or fragment.
func readIssuerURL(c *Config, v string, _ func(string) string) error {
	c.OIDC.IssuerURL = v
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must be an absolute https:// URL without a query")
	}
	if u.Scheme == "https" {
		return nil
	}
	if ip, err := netip.ParseAddr(u.Hostname()); u.Scheme == "http" && (u.Hostname() == "localhost" || err == nil && ip.IsLoopback()) {
		return nil
	}
	return errors.New("must be https:// (http:// only on a loopback host)")
}
