package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/cluster"
	"github.com/convergeplane/converge/control/drainer"
	"github.com/convergeplane/converge/control/reaper"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/internal/version"
	"github.com/convergeplane/converge/migrations"
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
	services     []service // started in order, stopped in reverse
	dispatcher   *dispatch.Dispatcher
	app          *fiber.App
	dispatchHTTP *http.Server
	ln           net.Listener
	health       *http.Server
	served       chan error
}

// Start migrates the database (under goose's session advisory lock, so of
// several pods starting at once one applies and the rest wait and no-op),
// then starts the duties ROLE selects and the HTTP listeners.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Server, err error) {
	control := cfg.Role == RoleAll || cfg.Role == RoleControl
	dispatching := cfg.Role == RoleAll || cfg.Role == RoleDispatch
	if dispatching && (cfg.SecretKey == nil || cfg.CallbackKey == nil) {
		return nil, errors.New("a dispatching role needs CONVERGE_SECRET_KEY and CONVERGE_CALLBACK_KEY (converge dev generates both)")
	}
	if err := migrations.Up(ctx, cfg.DatabaseURL, log); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConnLifetime = 30 * time.Minute
	pcfg.MaxConnLifetimeJitter = 5 * time.Minute
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	s := &Server{cfg: cfg, log: log, pool: pool, store: store.New(pool, store.Config{}), served: make(chan error, 2)}
	defer func() {
		if err != nil {
			s.stopServices()
			if s.ln != nil {
				s.ln.Close()
			}
			pool.Close()
		}
	}()
	// Bind first: in dev mode the callback URL is the bound address.
	if s.ln, err = s.listen(cfg.ListenAddr); err != nil {
		return nil, err
	}
	callbackBase := cfg.CallbackBaseURL
	if callbackBase == "" {
		if !cfg.Dev && dispatching {
			return nil, errors.New("CALLBACK_BASE_URL is required for a dispatching role: the externally reachable base URL of the dispatch pods")
		}
		scheme := "http"
		if cfg.TLS {
			scheme = "https"
		}
		callbackBase = scheme + "://" + loopback(s.ln.Addr().String())
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var box *store.SecretBox
	if cfg.SecretKey != nil {
		if box, err = store.NewSecretBox(cfg.SecretKey); err != nil {
			return nil, fmt.Errorf("CONVERGE_SECRET_KEY: %w", err)
		}
	}
	policy := egress.Policy{DevMode: cfg.Dev, AllowCIDRs: cfg.AllowCIDRs}

	kinds := store.NewKindCache(s.store, store.KindCacheConfig{}, log)
	lis := s.store.NewListener(log)
	var inflight func() int
	member := cluster.New(cluster.Config{MemberID: cfg.MemberID, Role: string(cfg.Role), Version: version.Version,
		InFlight: func() int {
			if inflight == nil {
				return 0
			}
			return inflight()
		}}, s.store, lis.Subscribe("cluster_changed"), log)
	s.services = []service{lis, member, kinds}
	if control {
		rp, err := reaper.New(reaper.Config{Range: member.Range, RetryWindow: cfg.ReaperRetryWindow, Metrics: metrics}, s.store, log)
		if err != nil {
			return nil, err
		}
		s.services = append(s.services,
			drainer.New(drainer.Config{Range: member.Range}, s.store, lis.Subscribe("outbox_ready"), log), rp)
	}
	var callbacks http.Handler
	if dispatching {
		s.dispatcher, err = dispatch.New(dispatch.Config{Claimer: member.ID(), Range: member.Range,
			CallbackBaseURL: callbackBase, TokenKey: cfg.CallbackKey, SecretBox: box,
			DevMode: cfg.Dev, AllowCIDRs: cfg.AllowCIDRs, Version: version.Version, Metrics: metrics, Logger: log},
			s.store, dispatch.Wakeups{WorkReady: lis.Subscribe("work_ready"), EndpointsChanged: lis.Subscribe("endpoints_changed")})
		if err != nil {
			return nil, err
		}
		inflight = s.dispatcher.InFlight
		tokens, err := callback.NewTokens(cfg.CallbackKey)
		if err != nil {
			return nil, fmt.Errorf("CONVERGE_CALLBACK_KEY: %w", err)
		}
		if callbacks, err = callback.NewHandler(callback.Config{Tokens: tokens, Store: s.store, Metrics: metrics, Logger: log}); err != nil {
			return nil, err
		}
	}
	for i, svc := range s.services {
		if err := svc.Start(ctx); err != nil {
			s.services = s.services[:i]
			return nil, err
		}
	}
	if s.dispatcher != nil {
		if err := s.dispatcher.Start(ctx); err != nil {
			return nil, err
		}
	}

	promHandler := promhttp.HandlerFor(metrics, promhttp.HandlerOpts{})
	if control {
		acfg := api.Config{Version: version.Version, ReadTokens: cfg.ReadTokens, AdminTokens: cfg.AdminTokens, Metrics: promHandler}
		if box != nil {
			acfg.Endpoints = &api.EndpointsConfig{Box: box,
				ValidateURL: func(u string) error { return egress.ValidateTargetURL(u, policy) }}
		} else {
			log.Warn("CONVERGE_SECRET_KEY is not set: the endpoint routes are disabled on this pod")
		}
		if d := s.dispatcher; d != nil {
			acfg.PairStatus = d.Registry().PairStatus
			acfg.Endpoints.Status = func(name string) any {
				st, ok := d.Registry().EndpointStatus(name)
				if !ok {
					return nil
				}
				return st
			}
		}
		srv, err := api.New(acfg, s.store, kinds, log)
		if err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
		s.app = srv.App()
		if callbacks != nil {
			s.app.All("/v1/tasks/*", adaptor.HTTPHandler(callbacks))
		}
		go func() { s.served <- s.app.Listener(s.ln) }()
		log.Info("serving the API", "addr", s.ln.Addr().String(), "tls", cfg.TLS, "role", cfg.Role, "callbacks", callbackBase)
	} else {
		mux := http.NewServeMux()
		mux.Handle("/v1/tasks/", callbacks)
		mux.Handle("GET /metrics", api.RequireReadToken(cfg.ReadTokens, cfg.AdminTokens, promHandler))
		s.dispatchHTTP = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { s.served <- s.dispatchHTTP.Serve(s.ln) }()
		log.Info("serving callbacks", "addr", s.ln.Addr().String(), "callbacks", callbackBase)
		if err := s.serveHealth(); err != nil {
			return nil, err
		}
	}
	return s, nil
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
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ping(ctx); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	ln, err := net.Listen("tcp", s.cfg.HealthAddr)
	if err != nil {
		return fmt.Errorf("listen on HEALTH_ADDR %s: %w", s.cfg.HealthAddr, err)
	}
	s.health = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.served <- s.health.Serve(ln) }()
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
	if s.dispatcher != nil {
		s.dispatcher.Stop()
	}
	if s.dispatchHTTP != nil {
		errs = append(errs, s.dispatchHTTP.Shutdown(ctx))
	}
	if s.app != nil {
		errs = append(errs, s.app.ShutdownWithContext(ctx))
	}
	if s.health != nil {
		errs = append(errs, s.health.Shutdown(ctx))
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
