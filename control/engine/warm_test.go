package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestWarmConnWritesNothing: warming a connection runs the engine's hot
// functions on input that matches nothing, so it changes no row, however
// much work is pending or claimed.
func TestWarmConnWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	eng := engine.New(db.Pool, engine.Config{})
	for _, q := range []string{
		`INSERT INTO kind_manifest (kind, kind_version, reactions) VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]')`,
		`INSERT INTO resources (kind, kind_version, name) SELECT 'leaf', 1, 'r' || i FROM generate_series(1, 20) i`,
		`SELECT schedule_eligible(array_agg(id)) FROM resources`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	claimed, err := eng.TaskClaim(ctx, engine.TaskClaimParams{Claimer: "t", Lo: 0, Hi: 255, Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 10 {
		t.Fatalf("claim: %d tasks, %v", len(claimed), err)
	}

	// A new session (pg_stat_xact_user_tables also counts what its
	// backend wrote before and has not yet reported), in one transaction.
	c, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := engine.WarmConn(ctx, c); err != nil {
		t.Fatal(err)
	}
	var written int64
	if err := c.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
		FROM pg_stat_xact_user_tables`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	if written != 0 {
		t.Fatalf("warming wrote %d rows, want none", written)
	}
}

// TestPoolDefaults: a pool configured by PoolDefaults has at least
// PoolSizeMin connections unless the connection string sets
// pool_max_conns, keeps MaxConns connections unless it sets
// pool_min_conns, warms each new connection (pgtest.Warm opens them all at
// once), and serves a connection whose warming failed rather than refusing
// it.
func TestPoolDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// warm_session, replaced by one that records the sessions it ran in.
	for _, q := range []string{
		`CREATE TABLE warmed (pid int)`,
		`CREATE OR REPLACE FUNCTION warm_session() RETURNS void LANGUAGE sql AS 'INSERT INTO warmed VALUES (pg_backend_pid())'`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	open := func(t *testing.T, dsn string) (*pgxpool.Pool, *bytes.Buffer) {
		t.Helper()
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		engine.PoolDefaults(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		pgtest.Warm(t, pool)
		return pool, &logs
	}
	sep := "?"
	if strings.Contains(db.DSN, "?") {
		sep = "&"
	}
	small := db.DSN + sep + "pool_max_conns=3"

	t.Run("MaxConnsFloor", func(t *testing.T) {
		cfg, err := pgxpool.ParseConfig(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		engine.PoolDefaults(cfg, slog.New(slog.DiscardHandler))
		if want := max(engine.PoolSizeMin, runtime.NumCPU()); cfg.MaxConns != int32(want) {
			t.Fatalf("MaxConns %d, want %d", cfg.MaxConns, want)
		}
	})
	t.Run("KeepsMaxConnsWarm", func(t *testing.T) {
		pool, _ := open(t, small)
		if got := pool.Config().MinConns; got != 3 {
			t.Fatalf("MinConns %d, want MaxConns (3)", got)
		}
		var warmed int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT pid) FROM warmed`).Scan(&warmed); err != nil {
			t.Fatal(err)
		}
		if warmed != 3 {
			t.Fatalf("%d sessions warmed, want the pool's 3", warmed)
		}
	})
	t.Run("MinConnsFromConnString", func(t *testing.T) {
		pool, _ := open(t, small+"&pool_min_conns=1")
		if got := pool.Config().MinConns; got != 1 {
			t.Fatalf("MinConns %d, want pool_min_conns (1)", got)
		}
	})
	t.Run("ColdWhenWarmingFails", func(t *testing.T) {
		if _, err := db.Pool.Exec(ctx, `DROP TABLE warmed`); err != nil {
			t.Fatal(err)
		}
		pool, logs := open(t, small)
		var one int
		if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			t.Fatalf("a connection whose warming failed was refused: %v", err)
		}
		if !strings.Contains(logs.String(), "not warmed") {
			t.Fatalf("no warning logged for the failed warming; logs: %q", logs.String())
		}
	})
}
