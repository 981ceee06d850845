package migrations_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergeplane/converge/internal/testkit/pgtest"
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

	// DATABASE_URL may carry pgxpool's settings; they are not the server's.
	t.Run("PoolSettingsInTheDSN", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		u, err := url.Parse(b.db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("pool_max_conns", "4")
		q.Set("pool_min_conns", "1")
		u.RawQuery = q.Encode()
		if err := migrations.Up(ctxT(t), u.String(), b.log); err != nil {
			t.Fatalf("Up with pool settings in the DSN: %v", err)
		}
		if diff := cmp.Diff(onceEach(b.versions), appliedCounts(t, b.db.Pool)); diff != "" {
			t.Errorf("applied versions (-want +got):\n%s", diff)
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
		want := catalogue(t, b.db.Pool)
		if err := migrations.Down(ctx, b.db.DSN); err != nil {
			t.Fatalf("Down: %v", err)
		}
		last := b.versions[len(b.versions)-1]
		if diff := cmp.Diff(onceEach(b.versions[:len(b.versions)-1]), appliedCounts(t, b.db.Pool)); diff != "" {
			t.Errorf("after Down, applied versions (-want +got); want all but %d:\n%s", last, diff)
		}
		// The rolled-back file's checksum is forgotten (or, when it created
		// the checksums table, gone with it).
		var table bool
		if err := b.db.Pool.QueryRow(ctx, `SELECT to_regclass('converge_migration_checksums') IS NOT NULL`).Scan(&table); err != nil {
			t.Fatalf("look for the checksums table: %v", err)
		}
		if table {
			var sums int
			if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM converge_migration_checksums WHERE version = $1`, last).Scan(&sums); err != nil {
				t.Fatalf("count checksums: %v", err)
			}
			if sums != 0 {
				t.Errorf("after Down, version %d still has a checksum recorded: Down forgets the rolled-back file's", last)
			}
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
		// Whatever the Down dropped of the engine (a function and its
		// triggers) is back: Down forgot the engine's checksums.
		if diff := cmp.Diff(want, catalogue(t, b.db.Pool)); diff != "" {
			t.Errorf("schema after Down+Up (-before +after):\n%s", diff)
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

// TestStatus: one line per numbered migration, applied or pending, then one
// per engine file, applied, changed (its recorded checksum differs) or
// pending (never applied).
func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	engine := engineFiles(t)
	if err := migrations.Up(ctx, b.db.DSN, b.log); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE converge_engine_checksums SET sha256 = repeat('0', 64) WHERE file = $1`, engine[0]); err != nil {
		t.Fatal(err)
	}
	engineStates := make([]string, len(engine))
	for i := range engine {
		engineStates[i] = "applied"
	}
	engineStates[0] = "changed"
	checkStatus(t, b, len(b.versions), engineStates)

	// A Down forgets the engine's checksums (the next Up applies the whole
	// engine again): every engine file is pending after it, down to 00012
	// and with 00012 rolled back too (its Down drops the table).
	for i := range engineStates {
		engineStates[i] = "pending"
	}
	for applied := len(b.versions) - 1; applied >= 0; applied-- {
		if err := migrations.Down(ctx, b.db.DSN); err != nil {
			t.Fatalf("Down from version %d: %v", b.versions[applied], err)
		}
		checkStatus(t, b, applied, engineStates)
		if b.versions[applied] == 12 {
			break
		}
	}
}

// checkStatus runs Status and checks that its first applied versions are
// applied and the rest pending, and that engine file i is in engineStates[i].
func checkStatus(t *testing.T, b *testBundle, applied int, engineStates []string) {
	t.Helper()
	var out bytes.Buffer
	if err := migrations.Status(ctxT(t), b.db.DSN, &out); err != nil {
		t.Fatalf("Status: %v", err)
	}
	t.Logf("status:\n%s", out.String())
	numbered, engine, ok := strings.Cut(strings.TrimSpace(out.String()), "\n\n")
	if !ok {
		t.Fatalf("Status printed no blank line between the migrations and the engine")
	}
	lines := strings.Split(numbered, "\n")
	if len(lines) != len(b.versions)+1 {
		t.Fatalf("Status printed %d migration lines, want a header and %d migrations", len(lines), len(b.versions))
	}
	for i, v := range b.versions {
		state := "applied"
		if i >= applied {
			state = "pending"
		}
		re := regexp.MustCompile(`^` + strconv.FormatInt(v, 10) + `\s+` + state + `\s`)
		if !re.MatchString(lines[i+1]) {
			t.Errorf("status line %q: want version %d %s", lines[i+1], v, state)
		}
	}
	files := engineFiles(t)
	lines = strings.Split(engine, "\n")
	if len(lines) != len(files)+1 || !strings.HasPrefix(lines[0], "ENGINE FILE") {
		t.Fatalf("Status printed engine lines %q, want a header and %d files", lines, len(files))
	}
	for i, f := range files {
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(f) + `\s+` + engineStates[i] + `\s`)
		if !re.MatchString(lines[i+1]) {
			t.Errorf("engine status line %q: want %s %s", lines[i+1], f, engineStates[i])
		}
	}
}

// engineFiles lists the embedded engine files, in the order they apply.
func engineFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "engine/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("glob engine files = %v, %v; want some", names, err)
	}
	return names
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
	if _, err := b.db.Pool.Exec(ctx, `UPDATE converge_migration_checksums SET sha256 = repeat('0', 64) WHERE version = 12`); err != nil {
		t.Fatal(err)
	}
	err := migrations.Up(ctx, b.db.DSN, b.log)
	if err == nil || !strings.Contains(err.Error(), "00012_engine_home.sql") || !strings.Contains(err.Error(), "edited") {
		t.Fatalf("Up over an edited migration = %v, want an error naming 00012_engine_home.sql", err)
	}
	var applied int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != len(b.versions) {
		t.Errorf("%d versions applied after the refused Up, want %d (nothing new)", applied, len(b.versions))
	}
}
