package api_test

import (
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/api/apitest"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/pgtest"
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
