package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestDatabaseDownIs503 serves the API over a store whose database is
// down (its port refuses connections, as a stopped or crashed Postgres
// does): every route that needs the database answers 503 with Retry-After
// and an RFC 9457 problem, not 500; /livez stays 200 and /readyz is 503.
func TestDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	// The kind cache reads a live database at start; the API's store does not.
	db := pgtest.New(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	kinds := store.NewKindCache(store.New(db.Pool, store.Config{}), store.KindCacheConfig{}, log)
	if err := kinds.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kinds.Stop)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	if err := ln.Close(); err != nil { // nothing listens there any more
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+deadAddr+"/converge?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv, err := api.New(api.Config{}, store.New(pool, store.Config{}), kinds, log)
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{t: t, db: db, kinds: kinds, srv: srv, base: apitest.Serve(t, srv)}

	for _, req := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/resources", nil},
		{"GET", "/api/v1/kinds", nil},
		{"GET", "/api/v1/resources/site/shop", nil},
		{"PUT", "/api/v1/kinds/widget/manifest", map[string]any{"kind": "widget", "kind_version": 1}},
		{"GET", "/readyz", nil},
	} {
		r := b.do(req.method, req.path, req.body)
		if r.status != http.StatusServiceUnavailable {
			t.Errorf("%s %s with the database down = %d %s, want 503", req.method, req.path, r.status, r.body)
			continue
		}
		if got := r.header.Get("Retry-After"); got == "" {
			t.Errorf("%s %s: 503 without Retry-After", req.method, req.path)
		}
		if ct := r.header.Get("Content-Type"); ct != api.ProblemContentType {
			t.Errorf("%s %s: Content-Type %q, want a problem", req.method, req.path, ct)
		}
		p := r.object(t)
		if p["type"] != "urn:converge:problem:unavailable" || p["status"] != float64(503) {
			t.Errorf("%s %s: problem %v, want type unavailable, status 503", req.method, req.path, p)
		}
	}
	b.do("GET", "/livez", nil).want(t, http.StatusOK)
}

// TestDatabaseBusyIs503: a request the database gives up on, or that waits
// for a connection past its deadline, is answered 503 with Retry-After and
// an RFC 9457 problem, never 500: its statement cancelled by
// statement_timeout (57014) or lock_timeout (55P03), both set on the API's
// connections by a converge process, or its pool's one connection held
// elsewhere until the request timeout.
func TestDatabaseBusyIs503(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, params, typ string
		holdConn          bool
	}{
		{name: "statement timeout", params: "statement_timeout=200", typ: "urn:converge:problem:unavailable"},
		{name: "lock timeout", params: "lock_timeout=200", typ: "urn:converge:problem:unavailable"},
		{name: "no connection free", holdConn: true, typ: "urn:converge:problem:timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, api.Config{})
			b.putManifest("widget", map[string]any{"kind": "widget", "kind_version": 1}).want(t, http.StatusCreated)
			cfg, err := pgxpool.ParseConfig(b.db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			if k, v, ok := strings.Cut(tc.params, "="); ok {
				cfg.ConnConfig.RuntimeParams[k] = v
			}
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			srv, err := api.New(api.Config{RequestTimeout: time.Second}, b.st.Over(pool, nil), b.kinds, nil)
			if err != nil {
				t.Fatal(err)
			}
			base := apitest.Serve(t, srv)
			if tc.holdConn {
				conn, err := pool.Acquire(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
			} else {
				// A lock every read of the manifests waits on.
				tx, err := b.db.Pool.Begin(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // ends the lock; nothing to report
				if _, err := tx.Exec(t.Context(), `LOCK TABLE kind_manifest IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := http.Get(base + "/api/v1/manifests") //nolint:noctx // a test's short request
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var p struct{ Type string }
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusServiceUnavailable || p.Type != tc.typ || resp.Header.Get("Retry-After") == "" ||
				resp.Header.Get("Content-Type") != api.ProblemContentType {
				t.Errorf("GET /manifests = %d %s (Retry-After %q, %s), want a 503 %s problem with Retry-After",
					resp.StatusCode, p.Type, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), tc.typ)
			}
		})
	}
}
