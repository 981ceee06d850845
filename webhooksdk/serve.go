package webhooksdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// readHeaderTimeout bounds how long a connection may take to send its request headers:
// a client that never finishes them holds the connection and no handler sees it.
const readHeaderTimeout = 5 * time.Second

// ListenAndServe listens on the TCP address addr ("host:port") and serves providers
// there, as [Serve] does, until ctx ends or the process receives SIGINT or SIGTERM. It
// is a provider process's whole server:
//
//	err := webhooksdk.ListenAndServe(ctx, ":8443", providers,
//		webhooksdk.WithSecrets(secret), webhooksdk.WithTLS("tls.crt", "tls.key"))
//
// The providers and options are checked before it listens.
func ListenAndServe(ctx context.Context, addr string, providers []Provider, opts ...Option) error {
	s, err := newServer(providers, opts)
	if err != nil {
		return err
	}
	if addr == "" {
		return errors.New("webhooksdk serve: empty listen address")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("webhooksdk serve: %w", err)
	}
	return s.serve(ctx, ln)
}

// Serve serves providers, with the same options as [Handler] and the serving options
// ([WithDrainTimeout], [WithTLS], [WithMiddleware]), on ln until ctx ends or the
// process receives SIGINT or SIGTERM, then stops gracefully: it closes ln, waits for
// the requests in flight, then for the asynchronous Work and its callbacks (as
// [Endpoint.Shutdown] does), all within the drain timeout, and returns. It returns nil
// after a stop that finished its work, and an error if the providers or options are
// invalid (then ln is closed at once), if serving failed, or if the drain timed out.
// It never exits the process.
//
// Serve is [ListenAndServe] on a listener of the caller's: one from a socket activation,
// or a test's on port 0.
func Serve(ctx context.Context, ln net.Listener, providers []Provider, opts ...Option) error {
	s, err := newServer(providers, opts)
	if err != nil {
		_ = ln.Close() // nothing was served on it
		return err
	}
	return s.serve(ctx, ln)
}

// server is one run of Serve: the Endpoint and the server options.
type server struct {
	cfg config
	ep  *Endpoint
}

func newServer(providers []Provider, opts []Option) (*server, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("webhooksdk serve: %w", err)
	}
	ep, err := newEndpoint(cfg, providers)
	if err != nil {
		return nil, fmt.Errorf("webhooksdk serve: %w", err)
	}
	return &server{cfg: cfg, ep: ep}, nil
}

func (s *server) serve(ctx context.Context, ln net.Listener) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h http.Handler = s.ep
	for i := len(s.cfg.middleware) - 1; i >= 0; i-- {
		h = s.cfg.middleware[i](h)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(s.ep.log.Handler(), slog.LevelWarn),
	}
	https := s.cfg.tlsCert != nil
	if https {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*s.cfg.tlsCert}, MinVersion: tls.VersionTLS12}
	}
	// From here srv's fields are the serving goroutine's: Serve and ServeTLS set some as
	// they start.
	served := make(chan error, 1)
	go func() {
		if https {
			served <- srv.ServeTLS(ln, "", "")
			return
		}
		served <- srv.Serve(ln)
	}()
	kinds := make([]string, len(s.ep.slots))
	for i, slot := range s.ep.slots {
		kinds[i] = slot.kv.String()
	}
	s.ep.log.Info("provider endpoint listening", "addr", ln.Addr().String(), "tls", https, "kinds", kinds)

	var serveErr error
	select {
	case serveErr = <-served: // never ErrServerClosed: nothing has shut it down
	case <-ctx.Done():
		s.ep.log.Info("provider endpoint stopping", "cause", context.Cause(ctx), "drain_timeout", s.cfg.drainTimeout)
	}
	drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.drainTimeout)
	defer cancel()
	// The server first: it stops accepting and waits for the inline answers. Then the
	// Endpoint: the asynchronous runs and their callbacks.
	err := errors.Join(serveErr, srv.Shutdown(drain), s.ep.Shutdown(drain))
	if serveErr == nil {
		// Shutdown closed the listener: Serve returns, with ErrServerClosed.
		if closed := <-served; !errors.Is(closed, http.ErrServerClosed) {
			err = errors.Join(err, closed)
		}
	}
	if err != nil {
		return fmt.Errorf("webhooksdk serve: %w", err)
	}
	s.ep.log.Info("provider endpoint stopped")
	return nil
}
