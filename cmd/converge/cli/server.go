package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/cluster"
	"github.com/convergeplane/converge/control/drainer"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/internal/version"
	"github.com/convergeplane/converge/migrations"
	"github.com/convergeplane/converge/ui"
)

// service is the lifecycle every duty shares.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// Server is a running converge process: its pool, its duties, and its HTTP
// listeners.
type Server struct {
	cfg          Config
	log          *slog.Logger
	pool         *pgxpool.Pool
	store        *store.Store
	metrics      *prometheus.Registry
	services     []service // started in order, stopped in reverse
	dispatcher   atomic.Pointer[dispatch.Dispatcher]
	events       *api.EventHub // the console's change stream, on a control pod
	app          *fiber.App
	dispatchHTTP *http.Server
	ln           net.Listener
	health       *http.Server
	pprof        *http.Server
	served       chan error
}

// Start migrates the database (under goose's session advisory lock, so of
// several pods starting at once one applies and the rest wait and no-op),
// then starts the duties ROLE selects and the HTTP listeners: the shared
// ones (cluster membership, the kind cache), the control plane's (drainer,
// reaper) and the dispatcher with its callback receiver, then the NOTIFY
// listener they all subscribed to, then the API or, on a dispatch-only pod,
// the callback and health listeners.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Server, err error) {
	control := cfg.Role == RoleAll || cfg.Role == RoleControl
	dispatching := cfg.Role == RoleAll || cfg.Role == RoleDispatch
	if err := cfg.fetchKeys(ctx); err != nil {
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
			if s.ln != nil {
				s.ln.Close()
			}
			s.pool.Close()
		}
	}()
	// Bind first: in dev mode the callback URL is the bound address.
	if s.ln, err = s.listen(cfg.ListenAddr); err != nil {
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
		if box, err = store.NewSecretBox(cfg.SecretKey); err != nil {
			return nil, fmt.Errorf("CONVERGE_SECRET_KEY: %w", err)
		}
	}

	lis := s.store.NewListener(log)
	member, kinds, err := s.startShared(ctx, lis)
	if err != nil {
		return nil, err
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
	// Every duty has subscribed; the listener wakes them all on connect.
	if err := s.startService(ctx, lis); err != nil {
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

// open migrates the database and opens the pool and the store.
func open(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	pcfg, err := poolConfig(ctx, cfg)
	if err != nil {
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
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Server{cfg: cfg, log: log, pool: pool, store: store.New(pool, store.Config{SpecHistoryLimit: cfg.SpecHistoryLimit}), metrics: metrics,
		served: make(chan error, 2)}, nil
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

// startShared starts what every role runs: cluster membership (which
// assigns this pod its shards) and the kind cache.
func (s *Server) startShared(ctx context.Context, lis *store.Listener) (*cluster.Member, *store.KindCache, error) {
	member := cluster.New(cluster.Config{MemberID: s.cfg.MemberID, Role: string(s.cfg.Role), Version: version.Version,
		InFlight: func() int {
			if d := s.dispatcher.Load(); d != nil {
				return d.InFlight()
			}
			return 0
		}}, s.store, lis.Subscribe("cluster_changed"), s.log)
	kinds := store.NewKindCache(s.store, store.KindCacheConfig{}, s.log)
	for _, svc := range []service{member, kinds} {
		if err := s.startService(ctx, svc); err != nil {
			return nil, nil, err
		}
	}
	return member, kinds, nil
}

// startControl starts the control plane's duties on this pod's shards: the
// drainer and the reaper; and the console's change stream, which shares the
// pod's one LISTEN connection.
func (s *Server) startControl(ctx context.Context, lis *store.Listener, member *cluster.Member) error {
	rp, err := reaper.New(reaper.Config{Range: member.Range, RetryWindow: s.cfg.ReaperRetryWindow, Metrics: s.metrics,
		DeliveryMaxAge: s.cfg.DeliveryLogMaxAge, DeliveryKeep: s.cfg.DeliveryLogKeep}, s.store, s.log)
	if err != nil {
		return err
	}
	dr := drainer.New(drainer.Config{Range: member.Range}, s.store, lis.Subscribe("outbox_ready"), s.log)
	s.events = api.NewEventHub(api.EventHubConfig{}, lis.Subscribe)
	for _, svc := range []service{dr, rp, s.events} {
		if err := s.startService(ctx, svc); err != nil {
			return err
		}
	}
	return nil
}

// startDispatch starts the dispatcher on this pod's shards. Its callback
// receiver (Dispatcher.Callbacks) comes with it, from the same config.
func (s *Server) startDispatch(ctx context.Context, lis *store.Listener, member *cluster.Member, box *store.SecretBox,
	callbackBase string) (*dispatch.Dispatcher, error) {
	d, err := dispatch.New(dispatch.Config{Claimer: member.ID(), Range: member.Range,
		CallbackBaseURL: callbackBase, TokenKey: s.cfg.CallbackKey, SecretBox: box,
		DevMode: s.cfg.Dev, AllowCIDRs: s.cfg.AllowCIDRs, AWS: s.cfg.AWS, Version: version.Version, Metrics: s.metrics, Logger: s.log},
		s.store, dispatch.Wakeups{WorkReady: lis.Subscribe("work_ready"), EndpointsChanged: lis.Subscribe("endpoints_changed")})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	s.dispatcher.Store(d)
	return d, nil
}

// serveControl serves the API (and the UI's routes) on the main listener,
// with /metrics, and the callback routes when this pod dispatches (d != nil).
func (s *Server) serveControl(kinds *store.KindCache, box *store.SecretBox, d *dispatch.Dispatcher, callbackBase string) error {
	console, built := ui.Files()
	if !built {
		s.log.Info("this binary has no web console built in: / serves a page saying how to build it (make ui)")
	}
	acfg := api.Config{Version: version.Version, ReadTokens: s.cfg.ReadTokens, AdminTokens: s.cfg.AdminTokens,
		Metrics: promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}), Console: console, Events: s.events}
	if box != nil {
		policy := egress.Policy{DevMode: s.cfg.Dev, AllowCIDRs: s.cfg.AllowCIDRs}
		acfg.Endpoints = &api.EndpointsConfig{Box: box,
			ValidateURL: func(u string) error { return egress.ValidateTargetURL(u, policy) }}
	} else {
		s.log.Warn("CONVERGE_SECRET_KEY is not set: the endpoint routes are disabled on this pod")
	}
	if d != nil {
		acfg.PairStatus = d.Registry().PairStatus
	}
	if d != nil && acfg.Endpoints != nil {
		acfg.Endpoints.Status = func(name string) any {
			st, ok := d.Registry().EndpointStatus(name)
			if !ok {
				return nil
			}
			return st
		}
	}
	srv, err := api.New(acfg, s.store, kinds, s.log)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	s.app = srv.App()
	if d != nil {
		s.app.All("/v1/tasks/*", adaptor.HTTPHandler(detached(d.Callbacks(), cmp.Or(acfg.RequestTimeout, api.RequestTimeoutDefault))))
	}
	go func() { s.served <- s.app.Listener(s.ln) }()
	s.log.Info("serving the API", "addr", s.ln.Addr().String(), "tls", s.cfg.TLS, "role", s.cfg.Role, "callbacks", callbackBase)
	return nil
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
	mux.Handle("GET /metrics", api.RequireReadToken(s.cfg.ReadTokens, s.cfg.AdminTokens, promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{})))
	s.dispatchHTTP = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.served <- s.dispatchHTTP.Serve(s.ln) }()
	s.log.Info("serving callbacks", "addr", s.ln.Addr().String(), "callbacks", callbackBase)
	return s.serveHealth()
}

func (s *Server) listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if !s.cfg.TLS {
		return ln, nil
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("cannot load the TLS keypair: %w", err)
	}
	return tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}), nil
}

// serveHealth serves /livez and /readyz for a pod without the API.
func (s *Server) serveHealth() error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ping(ctx); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n") // a client gone mid-answer needs nothing more
	})
	ln, err := net.Listen("tcp", s.cfg.HealthAddr)
	if err != nil {
		return fmt.Errorf("listen on HEALTH_ADDR %s: %w", s.cfg.HealthAddr, err)
	}
	s.health = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.served <- s.health.Serve(ln) }()
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
	s.pprof = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.pprof.Serve(ln) }() // ends with Close in Stop
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

// Stop shuts the listeners down gracefully, then the duties in reverse start
// order, then the pool.
func (s *Server) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	// The dispatcher drains first, while callbacks can still land.
	if d := s.dispatcher.Load(); d != nil {
		d.Stop()
	}
	if s.dispatchHTTP != nil {
		errs = append(errs, s.dispatchHTTP.Shutdown(ctx))
	}
	// Open console streams never end by themselves, and the shutdown below
	// waits for every open response.
	if s.events != nil {
		s.events.Stop()
	}
	if s.app != nil {
		errs = append(errs, s.app.ShutdownWithContext(ctx))
	}
	if s.health != nil {
		errs = append(errs, s.health.Shutdown(ctx))
	}
	if s.pprof != nil {
		errs = append(errs, s.pprof.Close())
	}
	s.stopServices()
	s.pool.Close()
	return errors.Join(errs...)
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
