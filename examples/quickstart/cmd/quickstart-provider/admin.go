package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/convergeplane/converge/examples/quickstart/provider"
)

// adminHandler is the readiness switch: POST /ready/{kind} and POST
// /unready/{kind} switch a kind, and they and GET /ready answer the kinds
// that are not ready, {"unready": [...]}. It has no authentication: it is
// served only on a loopback address.
func adminHandler(ready *provider.Readiness, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	list := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string][]string{"unready": append([]string{}, ready.Unready()...)}) //nolint:errcheck // the client went away
	}
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) { list(w) })
	for path, to := range map[string]bool{"POST /ready/{kind}": true, "POST /unready/{kind}": false} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			kind := r.PathValue("kind")
			if err := ready.Set(kind, to); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			log.Info("readiness switched", "kind", kind, "ready", to)
			list(w)
		})
	}
	return mux
}

// serveAdmin serves the readiness switch on addr, which must be a loopback
// address, until stop is called.
func serveAdmin(ctx context.Context, addr string, ready *provider.Readiness, log *slog.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("ADMIN_ADDR=%q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("ADMIN_ADDR=%q: want a loopback address (the switch has no authentication)", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ADMIN_ADDR: %w", err)
	}
	srv := &http.Server{Handler: adminHandler(ready, log), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("readiness switch stopped", "err", err)
		}
	}()
	log.Info("serving the readiness switch", "addr", ln.Addr().String(), "unready", ready.Unready())
	return func() { _ = srv.Close() }, nil
}
