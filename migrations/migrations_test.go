package migrations_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/internal/pgtest"
	"github.com/convergeplane/converge/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	db       *pgtest.Database
	versions []int64 // embedded, ascending
	log      *slog.Logger
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		t.Fatalf("glob: %v", err)
	}
	var versions []int64
	for _, n := range names {
		prefix, _, _ := strings.Cut(n, "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			t.Fatalf("migration %s has no numeric prefix: %v", n, err)
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	if len(versions) == 0 {
		t.Fatal("no embedded migrations")
	}
	return &testBundle{
		db:       pgtest.NewEmpty(t),
		versions: versions,
		log:      slog.New(slog.NewTextHandler(tWriter{t}, nil)),
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// appliedCounts returns, per version, how many rows record it as applied.
func appliedCounts(t *testing.T, pool *pgxpool.Pool) map[int64]int {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `
		SELECT version_id, count(*) FROM goose_db_version
		WHERE version_id > 0 AND is_applied GROUP BY version_id`)
	if err != nil {
		t.Fatalf("query goose_db_version: %v", err)
	}
	defer rows.Close()
	got := map[int64]int{}
	for rows.Next() {
		var v int64
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatalf("scan: %v", err)
		}
		got[v] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows: %v", err)
	}
	return got
}

func onceEach(versions []int64) map[int64]int {
	m := map[int64]int{}
	for _, v := range versions {
		m[v] = 1
	}
	return m
}

func TestUp(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentCallersApplyEachVersionOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)

		const callers = 4
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				errs[i] = migrations.Up(ctx, b.db.DSN, b.log.With("caller", i))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("caller %d: Up = %v", i, err)
			}
		}
		if diff := cmp.Diff(onceEach(b.versions), appliedCounts(t, b.db.Pool)); diff != "" {
			t.Errorf("applied versions -> row count (-want +got):\n%s", diff)
		}
	})

	t.Run("SecondUpIsNoop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 2 {
			if err := migrations.Up(ctxT(t), b.db.DSN, b.log); err != nil {
				t.Fatalf("Up: %v", err)
			}
		}
		if diff := cmp.Diff(onceEach(b.versions), appliedCounts(t, b.db.Pool)); diff != "" {
			t.Errorf("applied versions (-want +got):\n%s", diff)
		}
	})
}

func TestDown(t *testing.T) {
	t.Parallel()

	t.Run("DownThenUpRoundTrips", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
			t.Fatalf("Up: %v", err)
		}
		if err := migrations.Down(ctx, b.db.DSN); err != nil {
			t.Fatalf("Down: %v", err)
		}
		last := b.versions[len(b.versions)-1]
		if diff := cmp.Diff(onceEach(b.versions[:len(b.versions)-1]), appliedCounts(t, b.db.Pool)); diff != "" {
			t.Errorf("after Down, applied versions (-want +got); want all but %d:\n%s", last, diff)
		}
		var sums int
		if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM converge_migration_checksums`).Scan(&sums); err != nil {
			t.Fatalf("count checksums: %v", err)
		}
		if sums != len(b.versions)-1 {
			t.Errorf("after Down, %d checksums recorded, want %d: Down forgets the rolled-back file's", sums, len(b.versions)-1)
		}
		if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
			t.Fatalf("Up after Down: %v", err)
		}
		var latest int64
		if err := b.db.Pool.QueryRow(ctx,
			"SELECT max(version_id) FROM goose_db_version WHERE is_applied").Scan(&latest); err != nil {
			t.Fatalf("max version: %v", err)
		}
		if latest != last {
			t.Errorf("after Down+Up latest applied = %d, want %d", latest, last)
		}
	})

	t.Run("EveryMigrationRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := ctxT(t)
		if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
			t.Fatalf("Up: %v", err)
		}
		for i := len(b.versions) - 1; i >= 0; i-- {
			if err := migrations.Down(ctx, b.db.DSN); err != nil {
				t.Fatalf("Down from version %d: %v", b.versions[i], err)
			}
		}
		if got := appliedCounts(t, b.db.Pool); len(got) != 0 {
			t.Errorf("after rolling everything back, still applied: %v", got)
		}
		if err := migrations.Down(ctx, b.db.DSN); err == nil {
			t.Error("Down with nothing applied = nil, want an error")
		}
	})
}

func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if err := migrations.Down(ctx, b.db.DSN); err != nil {
		t.Fatalf("Down: %v", err)
	}
	var out bytes.Buffer
	if err := migrations.Status(ctx, b.db.DSN, &out); err != nil {
		t.Fatalf("Status: %v", err)
	}
	t.Logf("status:\n%s", out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(b.versions)+1 {
		t.Fatalf("Status printed %d lines, want a header and %d migrations", len(lines), len(b.versions))
	}
	for i, v := range b.versions {
		state := "applied"
		if i == len(b.versions)-1 {
			state = "pending"
		}
		re := regexp.MustCompile(`^` + strconv.FormatInt(v, 10) + `\s+` + state + `\s`)
		if !re.MatchString(lines[i+1]) {
			t.Errorf("status line %q: want version %d %s", lines[i+1], v, state)
		}
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	h := migrations.Hash()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h) {
		t.Errorf("Hash() = %q, want 64 hex digits", h)
	}
	if h2 := migrations.Hash(); h2 != h {
		t.Errorf("Hash() changed between calls: %s then %s", h, h2)
	}
}

// TestChecksums: Up records every applied migration's checksum, and an Up
// against a database whose recorded checksum differs (a merged migration
// edited since) fails, naming the file, and applies nothing.
func TestChecksums(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
		t.Fatalf("Up: %v", err)
	}
	var n int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM converge_migration_checksums`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(b.versions) {
		t.Fatalf("%d checksums recorded, want one per migration (%d)", n, len(b.versions))
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE converge_migration_checksums SET sha256 = repeat('0', 64) WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	err := migrations.Up(ctx, b.db.DSN, b.log)
	if err == nil || !strings.Contains(err.Error(), "00002_engine.sql") || !strings.Contains(err.Error(), "edited") {
		t.Fatalf("Up over an edited migration = %v, want an error naming 00002_engine.sql", err)
	}
	var applied int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != len(b.versions) {
		t.Errorf("%d versions applied after the refused Up, want %d (nothing new)", applied, len(b.versions))
	}
}
