package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/pgxpoolprometheus"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/cluster"
	"github.com/convergeplane/converge/control/drainer"
	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/sinks"
	"github.com/convergeplane/converge/internal/acceptor"
	"github.com/convergeplane/converge/internal/framing"
	"github.com/convergeplane/converge/internal/problem"
	"github.com/convergeplane/converge/internal/tlsreload"
	"github.com/convergeplane/converge/internal/version"
	"github.com/convergeplane/converge/migrations"
	"github.com/convergeplane/converge/ui"
)

// service is the lifecycle every duty shares.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// duty is a service that /readyz watches: Running is false once its loop
// has ended, by Stop or by itself.
type duty interface {
	service
	Running() bool
}

// namedDuty is a duty as /readyz names it.
type namedDuty struct {
	name    string
	running func() bool
}

// Server is a running converge process: its pools, its duties, and its HTTP
// listeners.
type Server struct {
	cfg          Config
	log          *slog.Logger
	pool         *pgxpool.Pool // the engine's: DATABASE_URL, warmed
	apiPool      *pgxpool.Pool // the API's, on a pod that serves it; else nil
	readPool     *pgxpool.Pool // DATABASE_READ_URL's, or nil
	readyPool    *pgxpool.Pool // one connection kept for /readyz
	migration    int64         // the newest embedded numbered migration
	store        *store.Store  // over pool: membership, the kind cache, endpoints, the delivery log
	metrics      *prometheus.Registry
	services     []service // started in order, stopped in reverse
	duties       []namedDuty
	engine       *engine.Engine // over pool: the engine's duties and callbacks; set by startShared
	dispatcher   atomic.Pointer[dispatch.Dispatcher]
	events       *api.EventHub // the console's change stream, on a control pod
	app          *fiber.App
	dispatchHTTP *http.Server
	ln           net.Listener
	health       *http.Server
	healthAddr   string
	pprof        *http.Server
	tracing      *sdktrace.TracerProvider // the OTLP exporter's, which Stop flushes; nil unless the environment configures one
	tracer       trace.TracerProvider     // what the API and the dispatcher trace with: Config.Tracer or tracing; nil: off
	served       chan error
}

// Start migrates the database (under goose's session advisory lock, so of
// several pods starting at once one applies and the rest wait and no-op),
// then starts the duties ROLE selects and the HTTP listeners: the shared
// ones (cluster membership, the kind cache), the control plane's (drainer,
// reaper) and the dispatcher with its callback receiver, then the NOTIFY
// listener they all subscribed to, then the API or, on a dispatch-only pod,
// the callback listener, and the health listener.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Server, err error) {
	control := cfg.Role == RoleAll || cfg.Role == RoleControl
	dispatching := cfg.Role == RoleAll || cfg.Role == RoleDispatch
	keys, err := cfg.fetchKeys(ctx)
	if err != nil {
		return nil, err
	}
	if dispatching && (cfg.SecretKey == nil || cfg.CallbackKey == nil) {
		return nil, errors.New("a dispatching role needs CONVERGE_SECRET_KEY and CONVERGE_CALLBACK_KEY (converge dev generates both)")
	}
	s, err := open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if d := s.dispatcher.Load(); d != nil {
				d.Stop()
			}
			s.stopServices()
			if s.tracing != nil {
				_ = s.tracing.Shutdown(context.Background()) // nothing was exported yet
			}
			if s.ln != nil {
				s.ln.Close()
			}
			s.closePools()
		}
	}()
	// Bind first: in dev mode the callback URL is the bound address.
	if s.ln, err = s.listen(ctx, cfg.ListenAddr, s.listenCaps()); err != nil {
		return nil, err
	}
	callbackBase, err := s.callbackBase(dispatching)
	if err != nil {
		return nil, err
	}
	if err := s.servePprof(); err != nil {
		return nil, err
	}
	var box *store.SecretBox
	if cfg.SecretKey != nil {
		if box, err = store.NewSecretBox(cfg.SecretKey, cfg.PreviousSecretKeys...); err != nil {
			return nil, fmt.Errorf("CONVERGE_SECRET_KEY: %w", err)
		}
	}

	lis := s.store.NewListener(log)
	member, kinds, err := s.startShared(ctx, lis)
	if err != nil {
		return nil, err
	}
	logOTelErrors(log) // before the exporter and the sampler read their variables
	if s.tracer = cfg.Tracer; s.tracer == nil {
		if s.tracing, err = startTracing(ctx, version.Version); err != nil {
			return nil, err
		}
		if s.tracing != nil {
			s.tracer = s.tracing
		}
	}
	if control {
		if err := s.startControl(ctx, lis, member); err != nil {
			return nil, err
		}
	}
	var d *dispatch.Dispatcher
	if dispatching {
		if d, err = s.startDispatch(ctx, lis, member, box, callbackBase); err != nil {
			return nil, err
		}
	}
	if keys != nil {
		if err := s.startKeyRefresh(ctx, keys, box, d, control); err != nil {
			return nil, err
		}
	}
	// Every duty has subscribed; the listener wakes them all on connect.
	if err := s.startDuty(ctx, "listener", lis); err != nil {
		return nil, err
	}

	if control {
		err = s.serveControl(kinds, box, d, callbackBase)
	} else {
		err = s.serveDispatch(d, callbackBase)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// open migrates the database and opens the pools and the store. The
// engine (its duties, the callback receiver, the kind cache and the LISTEN
// connections) keeps DATABASE_URL's pool; the API gets its own pool, whose
// statements run under API_STATEMENT_TIMEOUT and API_LOCK_TIMEOUT; /readyz
// keeps one connection of its own. A request stuck on a lock can then hold
// only the API's connections, never the engine's or readiness's.
func open(ctx context.Context, cfg Config, log *slog.Logger) (_ *Server, err error) {
	pcfg, err := poolConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := waitForDatabase(ctx, pcfg, cmp.Or(cfg.DatabaseWait, DatabaseWaitDefault), log); err != nil {
		return nil, err
	}
	var opts []stdlib.OptionOpenDB
	if pcfg.BeforeConnect != nil {
		opts = append(opts, stdlib.OptionBeforeConnect(pcfg.BeforeConnect))
	}
	if err := migrations.Up(ctx, cfg.DatabaseURL, log, opts...); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	pcfg.MaxConnLifetime = 30 * time.Minute
	pcfg.MaxConnLifetimeJitter = 5 * time.Minute
	latest, err := latestMigration()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, migration: latest, served: make(chan error, 2)}
	defer func() {
		if err != nil {
			s.closePools()
		}
	}()
	// The side pools are copies of DATABASE_URL's configuration (IAM auth
	// included) taken before the engine's warming is added to it.
	readyCfg := pcfg.Copy()
	readyCfg.MinConns, readyCfg.MaxConns = 1, 1
	if s.readyPool, err = pgxpool.NewWithConfig(ctx, readyCfg); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if cfg.Role == RoleAll || cfg.Role == RoleControl {
		apiCfg := pcfg.Copy()
		apiCfg.MinConns, apiCfg.MaxConns = 0, int32(cmp.Or(cfg.APIPoolMaxConns, apiPoolMaxConnsDefault()))
		s.apiTimeouts(apiCfg.ConnConfig)
		if s.apiPool, err = pgxpool.NewWithConfig(ctx, apiCfg); err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		if s.readPool, err = s.openReadPool(ctx, pcfg); err != nil {
			return nil, err
		}
	}
	engine.PoolDefaults(pcfg, log)
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	s.metrics = prometheus.NewRegistry()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		pgxpoolprometheus.NewCollector(s.pool, map[string]string{"pool": "primary"}), buildInfo())
	for name, p := range map[string]*pgxpool.Pool{"api": s.apiPool, "read": s.readPool} {
		if p != nil {
			s.metrics.MustRegister(pgxpoolprometheus.NewCollector(p, map[string]string{"pool": name}))
		}
	}
	s.store = store.New(s.pool, store.Config{SpecHistoryLimit: cfg.SpecHistoryLimit})
	return s, nil
}

// buildInfo is converge_build_info: 1, labelled with the build's version,
// VCS revision and Go version, so a dashboard can tell which build each pod
// runs and a rollout shows as the labels change.
func buildInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "converge_build_info",
		Help:        "1, labelled with the build: version (git describe), revision (the VCS commit) and goversion.",
		ConstLabels: prometheus.Labels{"version": version.Version, "revision": version.Commit(), "goversion": runtime.Version()}},
		func() float64 { return 1 })
}

// apiPoolMaxConnsDefault is API_POOL_MAX_CONNS's default: the larger of 4
// and the CPU count, as pgx sizes a pool.
func apiPoolMaxConnsDefault() int { return max(4, runtime.NumCPU()) }

// apiTimeouts sets the statement and lock timeouts of an API connection.
func (s *Server) apiTimeouts(cc *pgx.ConnConfig) {
	for name, d := range map[string]time.Duration{
		"statement_timeout": cmp.Or(s.cfg.APIStatementTimeout, APIStatementTimeoutDefault),
		"lock_timeout":      cmp.Or(s.cfg.APILockTimeout, APILockTimeoutDefault),
	} {
		cc.RuntimeParams[name] = strconv.FormatInt(d.Milliseconds(), 10)
	}
}

// ReadConnectTimeoutDefault is the connect timeout of the read pool when
// DATABASE_READ_URL sets no connect_timeout.
const ReadConnectTimeoutDefault = 5 * time.Second

// openReadPool opens the pool on DATABASE_READ_URL, if set, configured as
// the primary's pcfg is (IAM auth included): the API's read routes use it,
// under the API's statement and lock timeouts. The pool opens whether or
// not the replica answers: until it does, reads fall back to the primary.
func (s *Server) openReadPool(ctx context.Context, pcfg *pgxpool.Config) (*pgxpool.Pool, error) {
	if s.cfg.DatabaseReadURL == "" {
		return nil, nil
	}
	rcfg, err := pgxpool.ParseConfig(s.cfg.DatabaseReadURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_READ_URL: %w", err)
	}
	if pcfg.BeforeConnect != nil {
		if err := requireTLS(rcfg.ConnConfig); err != nil {
			return nil, fmt.Errorf("DATABASE_READ_URL: %w", err)
		}
		rcfg.BeforeConnect = pcfg.BeforeConnect
	}
	rcfg.MaxConnLifetime, rcfg.MaxConnLifetimeJitter = pcfg.MaxConnLifetime, pcfg.MaxConnLifetimeJitter
	// A replica that does not answer costs a read this long before it
	// falls back to DATABASE_URL (see store.Config.ReadPool).
	rcfg.ConnConfig.ConnectTimeout = cmp.Or(rcfg.ConnConfig.ConnectTimeout, ReadConnectTimeoutDefault)
	s.apiTimeouts(rcfg.ConnConfig)
	read, err := pgxpool.NewWithConfig(ctx, rcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to DATABASE_READ_URL: %w", err)
	}
	return read, nil
}

// closePools closes the database pools opened.
func (s *Server) closePools() {
	for _, p := range []*pgxpool.Pool{s.pool, s.apiPool, s.readPool, s.readyPool} {
		if p != nil {
			p.Close()
		}
	}
}

// waitForDatabase connects once to the database, retrying with backoff
// (250ms doubling to 5s) for up to wait while it cannot be reached or is
// starting up, so that a pod started with its database does not exit for
// arriving first. A refusal that a retry cannot fix (authentication, a
// missing database) returns at once.
func waitForDatabase(ctx context.Context, pcfg *pgxpool.Config, wait time.Duration, log *slog.Logger) error {
	deadline := time.Now().Add(wait)
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cc := pcfg.ConnConfig.Copy()
		var err error
		if pcfg.BeforeConnect != nil {
			err = pcfg.BeforeConnect(ctx, cc)
		}
		if err == nil {
			var conn *pgx.Conn
			if conn, err = pgx.ConnectConfig(ctx, cc); err == nil {
				return conn.Close(ctx)
			}
		}
		if !retryableConnectError(err) || ctx.Err() != nil {
			return fmt.Errorf("connect: %w", err)
		}
		if time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("connect: the database was not reachable within DATABASE_WAIT (%s): %w", wait, err)
		}
		log.Warn("the database is not reachable yet; retrying", "attempt", attempt, "in", delay, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// retryableConnectError reports whether a failed connect may succeed later:
// anything but a refusal by the server, or the server's own "starting up",
// "shutting down" or "too many connections".
func retryableConnectError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // the network: refused, reset, timed out, unresolvable
	}
	switch pgErr.Code {
	case "57P03", "57P01", "57P02", "53300": // cannot_connect_now, admin_shutdown, crash_shutdown, too_many_connections
		return true
	}
	return false
}

// poolConfig parses DATABASE_URL and, with DB_IAM_AUTH, mints an RDS IAM
// token as each new connection's password (region and credentials from the
// AWS default chain).
func poolConfig(ctx context.Context, cfg Config) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if !cfg.DBIAMAuth {
		return pcfg, nil
	}
	if err := requireTLS(pcfg.ConnConfig); err != nil {
		return nil, err
	}
	aws, err := loadAWS(ctx)
	if err != nil {
		return nil, fmt.Errorf("DB_IAM_AUTH: %w", err)
	}
	pcfg.BeforeConnect = rdsIAMAuth(aws.Region, aws.Credentials)
	return pcfg, nil
}

// callbackBase is the base URL envelopes send providers back to:
// CALLBACK_BASE_URL, or in dev mode the bound listen address.
func (s *Server) callbackBase(dispatching bool) (string, error) {
	if s.cfg.CallbackBaseURL != "" {
		return s.cfg.CallbackBaseURL, nil
	}
	if !s.cfg.Dev && dispatching {
		return "", errors.New("CALLBACK_BASE_URL is required for a dispatching role: the externally reachable base URL of the dispatch pods")
	}
	scheme := "http"
	if s.cfg.TLS {
		scheme = "https"
	}
	return scheme + "://" + loopback(s.ln.Addr().String()), nil
}

// startService starts svc and keeps it to stop in reverse order.
func (s *Server) startService(ctx context.Context, svc service) error {
	if err := svc.Start(ctx); err != nil {
		return err
	}
	s.services = append(s.services, svc)
	return nil
}

// startDuty starts d as a service that /readyz reports under name.
func (s *Server) startDuty(ctx context.Context, name string, d duty) error {
	if err := s.startService(ctx, d); err != nil {
		return err
	}
	s.duties = append(s.duties, namedDuty{name, d.Running})
	return nil
}

// startShared starts what every role runs: cluster membership (which
// assigns this pod its shards) and the kind cache; and it makes the engine,
// which validates composed children with that cache.
func (s *Server) startShared(ctx context.Context, lis *store.Listener) (*cluster.Member, *store.KindCache, error) {
	member := cluster.New(cluster.Config{MemberID: s.cfg.MemberID, Role: string(s.cfg.Role), Version: version.Version,
		InFlight: func() int {
			if d := s.dispatcher.Load(); d != nil {
				return d.InFlight()
			}
			return 0
		}}, s.store, lis.Subscribe("cluster_changed"), s.log)
	kinds := store.NewKindCache(s.store, store.KindCacheConfig{}, s.log)
	s.engine = engine.New(s.pool, engine.Config{SpecCheck: kinds.CheckComposedSpec})
	if err := s.startDuty(ctx, "cluster", member); err != nil {
		return nil, nil, err
	}
	if err := s.startDuty(ctx, "kinds", kinds); err != nil {
		return nil, nil, err
	}
	return member, kinds, nil
}

// startControl starts the control plane's duties on this pod's shards: the
// drainer and the reaper; and the console's change stream, which shares the
// pod's one LISTEN connection.
func (s *Server) startControl(ctx context.Context, lis *store.Listener, member *cluster.Member) error {
	rp, err := reaper.New(reaper.Config{Range: member.Range, RetryWindow: s.cfg.ReaperRetryWindow, PhaseCountEvery: s.cfg.PhaseCountInterval, Metrics: s.metrics,
		DeliveryMaxAge: s.cfg.DeliveryLogMaxAge, DeliveryKeep: s.cfg.DeliveryLogKeep, AuditRetention: s.cfg.AuditRetention}, s.engine, s.store, s.log)
	if err != nil {
		return err
	}
	dr := drainer.New(drainer.Config{Range: member.Range, Metrics: s.metrics}, s.engine, lis.Subscribe("outbox_ready"), s.log)
	s.events = api.NewEventHub(api.EventHubConfig{}, lis.Subscribe)
	for _, d := range []struct {
		name string
		duty duty
	}{{"drainer", dr}, {"reaper", rp}, {"events", s.events}} {
		if err := s.startDuty(ctx, d.name, d.duty); err != nil {
			return err
		}
	}
	return nil
}

// startDispatch starts the dispatcher on this pod's shards. Its callback
// receiver (Dispatcher.Callbacks) comes with it, from the same config.
func (s *Server) startDispatch(ctx context.Context, lis *store.Listener, member *cluster.Member, box *store.SecretBox,
	callbackBase string) (*dispatch.Dispatcher, error) {
	dcfg := dispatch.Config{Claimer: member.ID(), Range: member.Range,
		CallbackBaseURL: callbackBase, TokenKey: s.cfg.CallbackKey, PreviousTokenKeys: s.cfg.PreviousCallbackKeys, SecretBox: box,
		DevMode: s.cfg.Dev, AllowCIDRs: s.cfg.AllowCIDRs, AWS: s.cfg.AWS, Version: version.Version, Metrics: s.metrics, Logger: s.log,
		DrainTimeout: s.shutdownTimeout()}
	if s.tracer != nil {
		dcfg.Tracer = s.tracer
	}
	d, err := dispatch.New(dcfg, s.engine, s.store, dispatch.Wakeups{WorkReady: lis.Subscribe("work_ready"), EndpointsChanged: lis.Subscribe("endpoints_changed")})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	s.dispatcher.Store(d)
	s.duties = append(s.duties, namedDuty{"dispatcher", d.Running})
	if err := s.startAlerts(ctx, box); err != nil {
		return nil, err
	}
	return d, nil
}

// startAlerts starts the delivery of alert events to their sinks on this
// dispatching pod; webhooks go out under the dispatcher's egress policy.
func (s *Server) startAlerts(ctx context.Context, box *store.SecretBox) error {
	client, err := egress.NewClient(egress.ClientConfig{Policy: egress.Policy{DevMode: s.cfg.Dev, AllowCIDRs: s.cfg.AllowCIDRs}})
	if err != nil {
		return fmt.Errorf("alert sinks: %w", err)
	}
	client.Timeout = sinks.TimeoutDefault
	d, err := sinks.New(sinks.Config{Box: box, HTTP: client, AWS: s.cfg.AWS,
		UserAgent: "converge-alerts/" + version.Version, Logger: s.log, Metrics: s.metrics}, s.store)
	if err != nil {
		return err
	}
	return s.startDuty(ctx, "alerts", d)
}

// startKeyRefresh takes up key rotations on this pod: a control pod first
// re-seals what the secret key's AWSPREVIOUS version sealed, then every pod
// re-reads the keys' secrets every KEY_REFRESH_INTERVAL.
func (s *Server) startKeyRefresh(ctx context.Context, src *keySource, box *store.SecretBox, d *dispatch.Dispatcher, control bool) error {
	r := &keyRefresher{src: src, interval: s.cfg.KeyRefreshInterval, box: box, errors: newKeyRefreshErrors(), log: s.log, last: src.initial}
	if err := s.metrics.Register(r.errors); err != nil {
		return err
	}
	if d != nil {
		r.setTokenKeys = d.SetTokenKeys
	}
	if control && box != nil && src.initial.secret != nil {
		r.store, r.reseals = s.store, resealTicks-1
		if err := reseal(ctx, s.store, box, src.initial.secret, s.log); err != nil {
			r.errors.Inc()
			s.log.Error("keys: cannot re-seal under the current secret key; trying again next refresh", "err", err)
		}
	}
	return s.startService(ctx, r)
}

// serveControl serves the API (and the UI's routes) on the main listener,
// with /metrics, and the callback routes when this pod dispatches (d !=
// nil); and /livez and /readyz on HEALTH_ADDR.
func (s *Server) serveControl(kinds *store.KindCache, box *store.SecretBox, d *dispatch.Dispatcher, callbackBase string) error {
	console, built := ui.Files()
	if !built {
		s.log.Info("this binary has no web console built in: / serves a page saying how to build it (make ui)")
	}
	acfg := api.Config{Version: version.Version, ReadTokens: s.cfg.ReadTokens, AdminTokens: s.cfg.AdminTokens, OIDC: s.cfg.OIDCConfig(), ListPageBytes: s.cfg.ListPageBytes,
		Metrics: promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}), MetricsRegistry: s.metrics, Console: console, Events: s.events,
		ReadyChecks: s.readyChecks(), IdempotencyRetention: s.cfg.IdempotencyRetention, HeaderTimeout: s.cfg.HTTPHeaderTimeout,
		ReadTimeout: s.cfg.HTTPReadTimeout, WriteTimeout: s.cfg.HTTPWriteTimeout, IdleTimeout: s.cfg.HTTPIdleTimeout,
		Tracer: s.tracer}
	if box != nil {
		policy := egress.Policy{DevMode: s.cfg.Dev, AllowCIDRs: s.cfg.AllowCIDRs}
		acfg.Endpoints = &api.EndpointsConfig{Box: box,
			ValidateURL: func(u string) error { return egress.ValidateTargetURL(u, policy) }}
	} else {
		s.log.Warn("CONVERGE_SECRET_KEY is not set: the endpoint routes are disabled on this pod")
	}
	if d != nil {
		acfg.PairStatus = d.Registry().RouteStatus
	}
	if d != nil && acfg.Endpoints != nil {
		acfg.Endpoints.Status = func(name string) any {
			st, ok := d.Registry().EndpointStatus(name)
			if !ok {
				return nil
			}
			return st
		}
		acfg.Endpoints.Test = func(ctx context.Context, name string) (api.EndpointTest, error) {
			return testDelivery(ctx, d, name)
		}
	}
	// The API's requests run on the API's pools; the kind cache, on the
	// engine's, has installed its validator in s.store, which Over copies.
	st := s.store.Over(s.apiPool, s.readPool)
	if s.readPool != nil {
		s.metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "converge_api_read_fallbacks_total",
			Help: "Statements of the API's reads run on DATABASE_URL because DATABASE_READ_URL could not be reached."},
			func() float64 { return float64(st.ReadFallbacks()) }))
	}
	srv, err := api.New(acfg, st, kinds, s.log)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	s.app = srv.App()
	if d != nil {
		s.app.All("/v1/tasks/*", adaptor.HTTPHandler(detached(d.Callbacks(), cmp.Or(acfg.RequestTimeout, api.RequestTimeoutDefault))))
	}
	go func() { s.served <- s.app.Listener(s.ln) }()
	s.log.Info("serving the API", "addr", s.ln.Addr().String(), "tls", s.cfg.TLS, "role", s.cfg.Role, "callbacks", callbackBase)
	return s.serveHealth(srv.ReadyChecks())
}

// testDelivery sends endpoint name a test delivery through d, in the
// API's terms.
func testDelivery(ctx context.Context, d *dispatch.Dispatcher, name string) (api.EndpointTest, error) {
	at := time.Now()
	a, err := d.TestEndpoint(ctx, name)
	if errors.Is(err, dispatch.ErrNoProbe) {
		return api.EndpointTest{}, &store.ConflictError{Message: fmt.Sprintf(
			"endpoint %s has no health target (health type none): a test delivery is its health request, so there is nothing to send", name)}
	}
	if err != nil {
		return api.EndpointTest{}, err
	}
	t := api.EndpointTest{Endpoint: name, At: at.UTC(), HTTPStatus: a.Status, LatencyMS: int(a.Latency.Milliseconds()),
		Classification: a.Class, Ready: a.Ready, Excerpt: a.Excerpt}
	if a.Err != nil {
		t.Error = a.Err.Error()
	}
	return t, nil
}

// detached serves h under a request context cut loose from fasthttp's: the
// adaptor hands a net/http handler the *fasthttp.RequestCtx as its context,
// which ends only when the server shuts down, and whose Done reads a field
// Shutdown writes without synchronisation (the race detector caught a
// callback's database call watching it while the server stopped). The
// handler's work is bounded by timeout instead, as the API's is.
func detached(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// serveDispatch serves a dispatch-only pod: the callback routes and
// /metrics on the main listener, /livez and /readyz on HEALTH_ADDR.
func (s *Server) serveDispatch(d *dispatch.Dispatcher, callbackBase string) error {
	mux := http.NewServeMux()
	mux.Handle("/v1/tasks/", d.Callbacks())
	mux.Handle("GET /metrics", api.RequireReadToken(s.cfg.ReadTokens, s.cfg.AdminTokens, s.cfg.OIDCConfig(), promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{})))
	// A callback's work is bounded by the callback receiver (30 s).
	s.dispatchHTTP = s.httpServer(mux, api.RequestTimeoutDefault)
	go func() { s.served <- s.dispatchHTTP.Serve(s.ln) }()
	s.log.Info("serving callbacks", "addr", s.ln.Addr().String(), "callbacks", callbackBase)
	return s.serveHealth(s.readyChecks())
}

// listen binds addr with the connection caps of caps; with TLS it serves
// the certificate files through a reloader, started here, that re-reads
// them every TLS_RELOAD_INTERVAL.
func (s *Server) listen(ctx context.Context, addr string, caps acceptor.Config) (net.Listener, error) {
	if !s.cfg.TLS {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return acceptor.New(ln, caps), nil
	}
	rl, err := tlsreload.New(tlsreload.Config{CertFile: s.cfg.TLSCertFile, KeyFile: s.cfg.TLSKeyFile,
		ClientCAFile: s.cfg.TLSClientCAFile, Interval: s.cfg.TLSReloadInterval, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("TLS_CERT_FILE, TLS_KEY_FILE, TLS_CLIENT_CA_FILE: %w", err)
	}
	if err := s.startService(ctx, rl); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	// The caps count TCP connections, below the TLS handshake.
	return tls.NewListener(acceptor.New(ln, caps), rl.TLSConfig()), nil
}

// The connection caps of the probe and profiling listeners: a few probes
// (kubelet, a load balancer's nodes, a scraper) keep-alive each, and one
// operator profiles.
const (
	healthMaxConns = 32
	pprofMaxConns  = 8
)

// listenCaps logs the process's open-file limit and returns LISTEN_ADDR's
// connection caps: LISTEN_MAX_CONNS, by default MaxConnsDefault or half the
// soft limit if that is lower (the other half is the database pools', the
// dispatcher's and the other listeners'), and LISTEN_MAX_CONNS_PER_ADDR, by
// default a tenth of that. Go's runtime has already raised the soft limit
// to the hard one (less one, so a later prlimit of the process shows); a
// soft limit still low means the hard limit is.
func (s *Server) listenCaps() acceptor.Config {
	soft, hard, err := fileLimit()
	caps := acceptor.Config{Name: "LISTEN_ADDR", MaxConns: s.cfg.MaxConns, MaxConnsPerAddr: s.cfg.MaxConnsPerAddr, Logger: s.log}
	if caps.MaxConns == 0 {
		caps.MaxConns = MaxConnsDefault
		if err == nil && soft/2 < MaxConnsDefault {
			caps.MaxConns = max(1, int(soft/2))
		}
	}
	if caps.MaxConnsPerAddr == 0 {
		caps.MaxConnsPerAddr = max(1, caps.MaxConns/10)
	}
	if err != nil {
		s.log.Warn("cannot read the open-file limit", "err", err)
		return caps
	}
	s.log.Info("open files", "limit", soft, "hard_limit", hard, "listen_max_conns", caps.MaxConns,
		"listen_max_conns_per_addr", caps.MaxConnsPerAddr)
	if uint64(caps.MaxConns+healthMaxConns) > soft {
		s.log.Warn("LISTEN_MAX_CONNS leaves no descriptors for the database and the dispatcher under the open-file limit: "+
			"raise the limit (ulimit -n, the container's nofile) or lower LISTEN_MAX_CONNS", "limit", soft, "listen_max_conns", caps.MaxConns)
	}
	return caps
}

// httpServer is a net/http server of h (callbacks, HEALTH_ADDR, PPROF_ADDR)
// with the HTTP_* timeouts, behind the framing guard, which refuses what a
// proxy could read as two requests, its refusals and the mux's own 404 and
// 405 being problem documents, like every refusal. net/http's read timeout
// covers a request's headers and body together, so it gets both
// allowances; its write timeout runs from the end of the headers, over the
// handler's work, so work (the handler's own bound) is added to the write
// allowance.
func (s *Server) httpServer(h http.Handler, work time.Duration) *http.Server {
	header := cmp.Or(s.cfg.HTTPHeaderTimeout, api.HeaderTimeoutDefault)
	return &http.Server{Handler: framing.Guard(problem.Handler(h)), ReadHeaderTimeout: header,
		ReadTimeout:  header + cmp.Or(s.cfg.HTTPReadTimeout, api.ReadTimeoutDefault),
		WriteTimeout: work + cmp.Or(s.cfg.HTTPWriteTimeout, api.WriteTimeoutDefault),
		IdleTimeout:  cmp.Or(s.cfg.HTTPIdleTimeout, api.IdleTimeoutDefault)}
}

// readyChecks are /readyz's checks: the database answers, its schema is at
// this binary's latest migration, and every duty started runs. The database
// checks run on the connection kept for them: busy pools cannot fail them.
// With DATABASE_READ_URL, read_database says whether the read pool answers,
// advisory: while it does not, the API's reads run on DATABASE_URL.
func (s *Server) readyChecks() []api.ReadyCheck {
	checks := []api.ReadyCheck{api.DatabaseCheck(s.readyPool, s.log), {Name: "migrations", Check: s.checkMigrations}}
	for _, d := range s.duties {
		checks = append(checks, api.ReadyCheck{Name: d.name, Check: func(context.Context) error {
			if !d.running() {
				return errors.New("stopped")
			}
			return nil
		}})
	}
	if s.readPool != nil {
		// Last, and within its own bound: an unreachable replica must not
		// hold the answer past a probe's timeout.
		checks = append(checks, api.ReadyCheck{Name: "read_database", Advisory: true, Check: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, readPingTimeout)
			defer cancel()
			if err := s.readPool.Ping(ctx); err != nil {
				s.log.Warn("readiness: DATABASE_READ_URL does not answer; the API's reads fall back to DATABASE_URL while it cannot be reached", "err", err)
				return fmt.Errorf("does not answer within %s: the API's reads fall back to DATABASE_URL while it cannot be reached", readPingTimeout)
			}
			return nil
		}})
	}
	return checks
}

// readPingTimeout bounds /readyz's ping of the read pool.
const readPingTimeout = time.Second

// checkMigrations compares the database's goose version with the newest
// numbered migration embedded in this binary: a pod of another release
// (behind or ahead) is not ready.
func (s *Server) checkMigrations(ctx context.Context) error {
	var applied int64
	if err := s.readyPool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&applied); err != nil {
		s.log.Warn("readiness: cannot read the schema version", "err", err)
		return errors.New("cannot read the schema version")
	}
	if applied != s.migration {
		return fmt.Errorf("the database is at migration %d, this binary's migrations end at %d", applied, s.migration)
	}
	return nil
}

// latestMigration returns the version of the newest numbered migration
// embedded in this binary.
func latestMigration() (int64, error) {
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", name, err)
		}
		latest = max(latest, v)
	}
	return latest, nil
}

// serveHealth serves /livez and /readyz on HEALTH_ADDR, for every role:
// its own listener, so probes are answered while LISTEN_ADDR is flooded.
// /readyz runs checks (the API's, where it runs) and answers ReadyStatus as
// JSON, 200 or 503.
func (s *Server) serveHealth(checks []api.ReadyCheck) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), api.ReadyTimeoutDefault)
		defer cancel()
		st, failed := api.CheckReady(ctx, checks)
		w.Header().Set("Content-Type", "application/json")
		if failed != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st) // a client gone mid-answer needs nothing more
	})
	ln, err := net.Listen("tcp", s.cfg.HealthAddr)
	if err != nil {
		return fmt.Errorf("listen on HEALTH_ADDR %s: %w", s.cfg.HealthAddr, err)
	}
	s.health = s.httpServer(mux, api.ReadyTimeoutDefault)
	s.healthAddr = ln.Addr().String()
	go func() {
		s.served <- s.health.Serve(acceptor.New(ln, acceptor.Config{Name: "HEALTH_ADDR", MaxConns: healthMaxConns, Logger: s.log}))
	}()
	return nil
}

// servePprof serves net/http/pprof on PPROF_ADDR when it is set. It has its
// own listener (never the API's) so profiles are reachable only where the
// operator chose to bind them.
func (s *Server) servePprof() error {
	if s.cfg.PprofAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.PprofAddr)
	if err != nil {
		return fmt.Errorf("listen on PPROF_ADDR %s: %w", s.cfg.PprofAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A profile or trace must end within HTTP_WRITE_TIMEOUT (pprof refuses
	// a longer ?seconds=).
	s.pprof = s.httpServer(mux, 0)
	guarded := acceptor.New(ln, acceptor.Config{Name: "PPROF_ADDR", MaxConns: pprofMaxConns, Logger: s.log})
	go func() { _ = s.pprof.Serve(guarded) }() // ends with Close in Stop
	s.log.Info("serving pprof", "addr", ln.Addr().String())
	return nil
}

// Addr returns the API's bound address (useful with LISTEN_ADDR=:0).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// HealthAddr returns the bound address of HEALTH_ADDR's listener.
func (s *Server) HealthAddr() string { return s.healthAddr }

// shutdownTimeout is SHUTDOWN_TIMEOUT, or its default for a Config built
// by hand.
func (s *Server) shutdownTimeout() time.Duration {
	return cmp.Or(s.cfg.ShutdownTimeout, ShutdownTimeoutDefault)
}

// listenerGrace is the least time the HTTP listeners get to finish open
// requests once the dispatcher has drained, even if that used up
// SHUTDOWN_TIMEOUT: closing a connection that just went idle takes a moment.
const listenerGrace = 2 * time.Second

// Stop stops within SHUTDOWN_TIMEOUT: the dispatcher first, which waits for
// its deliveries in flight up to that budget and then cancels them and
// releases their tasks; then the listeners, which wait for open requests
// until the same deadline (but at least listenerGrace); then the duties in
// reverse start order, then the pools. On SIGTERM the duties' context has
// already ended, so the dispatcher stopped claiming when the signal came.
func (s *Server) Stop() error {
	deadline := time.Now().Add(s.shutdownTimeout())
	var errs []error
	// The dispatcher drains first, while callbacks can still land.
	if d := s.dispatcher.Load(); d != nil {
		d.Stop()
	}
	ctx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(listenerGrace)))
	defer cancel()
	if s.dispatchHTTP != nil {
		errs = append(errs, s.dispatchHTTP.Shutdown(ctx))
	}
	// Open console streams never end by themselves, and the shutdown below
	// waits for every open response.
	if s.events != nil {
		s.events.Stop()
	}
	if s.app != nil {
		errs = append(errs, s.stopAPI(ctx))
	}
	if s.health != nil {
		errs = append(errs, s.health.Shutdown(ctx))
	}
	if s.pprof != nil {
		errs = append(errs, s.pprof.Close())
	}
	s.stopServices()
	if s.tracing != nil {
		errs = append(errs, s.tracing.Shutdown(ctx)) // flushes the spans still batched
	}
	s.closePools()
	return errors.Join(errs...)
}

// stopAPI shuts the API's listener down. fasthttp's Shutdown returns at
// once, closing nothing, when Serve has not registered the listener yet (a
// Stop right after Start): the listener is closed here as well, so that a
// Serve starting afterwards returns instead of accepting forever (CI's leak
// check caught one, two minutes after its test had stopped the server).
func (s *Server) stopAPI(ctx context.Context) error {
	err := s.app.ShutdownWithContext(ctx)
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (s *Server) stopServices() {
	for i := len(s.services) - 1; i >= 0; i-- {
		s.services[i].Stop()
	}
	s.services = nil
}

// Serve runs the server until ctx ends.
func Serve(ctx context.Context, cfg Config, log *slog.Logger, _ io.Writer) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-s.served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Stop() //nolint:errcheck // reporting the serve error instead
			return fmt.Errorf("http server: %w", err)
		}
	}
	log.Info("shutting down")
	return s.Stop()
}
