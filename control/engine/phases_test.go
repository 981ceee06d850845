package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestResourceCountByPhase: resources Ready, Reconciling and Failed are
// counted under their kind and phase; a count that cannot finish within
// its statement timeout (here, waiting for a lock) fails instead of
// waiting on.
func TestResourceCountByPhase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := enginetest.LeafDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO resources (kind, kind_version, name, spec_gen, synced_gen, failure_gen)
		SELECT 'leaf', 1, 'r' || i, CASE WHEN i <= 3 THEN 1 ELSE 0 END, CASE WHEN i <= 3 THEN 1 ELSE 0 END, CASE WHEN i = 4 THEN 1 ELSE 0 END
		  FROM generate_series(1, 6) i`); err != nil {
		t.Fatal(err)
	}
	e := engine.New(db.Pool, engine.Config{})
	got, err := e.ResourceCountByPhase(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.PhaseCount{{Kind: "leaf", KindVersion: 1, Phase: "Failed", Resources: 1},
		{Kind: "leaf", KindVersion: 1, Phase: "Ready", Resources: 3}, {Kind: "leaf", KindVersion: 1, Phase: "Reconciling", Resources: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}

	lock, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE resources IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var pgErr *pgconn.PgError
	if _, err := e.ResourceCountByPhase(wait, 50*time.Millisecond); !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("a count blocked past its statement timeout: %v, want PostgreSQL's statement timeout (57014)", err)
	}
}

// BenchmarkResourceCountByPhase times the count over 100,000 resources of
// four kinds in three phases (Ready, Reconciling, Failed): the cost the one counting pod puts on the
// database every PhaseCountEvery (docs/operations.md quotes it).
func BenchmarkResourceCountByPhase(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version)
		SELECT 'k' || i, 1 FROM generate_series(1, 4) i`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO resources (kind, kind_version, name, spec_gen, synced_gen, failure_gen)
		SELECT 'k' || (i % 4 + 1), 1, 'r' || i, i % 2, i % 2, CASE WHEN i % 100 = 0 THEN 1 ELSE 0 END
		  FROM generate_series(1, 100000) i`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE resources`); err != nil {
		b.Fatal(err)
	}
	e := engine.New(db.Pool, engine.Config{})
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ResourceCountByPhase(ctx, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
