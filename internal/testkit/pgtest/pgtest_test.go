package pgtest

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/migrations"
)

func TestMain(m *testing.M) { Main(m) }

// embeddedVersions lists the versions of the embedded migration files.
func embeddedVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		t.Fatalf("glob migrations: %v", err)
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
	return versions
}

func TestNew(t *testing.T) {
	t.Parallel()

	begin := time.Now()
	first := New(t)
	t.Logf("first New (server start + template + clone) took %s", time.Since(begin))

	// Each parallel test sees a database of its own holding the schema.
	names := make(chan string, 2)
	for _, marker := range []string{"a", "b"} {
		t.Run("Parallel_"+marker, func(t *testing.T) {
			t.Parallel()
			begin := time.Now()
			db := New(t)
			t.Logf("clone took %s", time.Since(begin))
			ctx := t.Context()

			var name string
			if err := db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatalf("current_database: %v", err)
			}
			names <- name

			var applied []int64
			rows, err := db.Pool.Query(ctx,
				"SELECT version_id FROM goose_db_version WHERE version_id > 0 AND is_applied ORDER BY version_id")
			if err != nil {
				t.Fatalf("query goose_db_version: %v", err)
			}
			for rows.Next() {
				var v int64
				if err := rows.Scan(&v); err != nil {
					t.Fatalf("scan: %v", err)
				}
				applied = append(applied, v)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("rows: %v", err)
			}
			if diff := cmp.Diff(embeddedVersions(t), applied); diff != "" {
				t.Errorf("applied migrations (-want +got):\n%s", diff)
			}

			// Writes stay private to the test's database.
			if _, err := db.Pool.Exec(ctx, "CREATE TABLE pgtest_private (marker text)"); err != nil {
				t.Fatalf("create table: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		close(names)
		var got []string
		for n := range names {
			got = append(got, n)
		}
		if len(got) != 2 || got[0] == got[1] {
			t.Errorf("parallel tests got databases %q, want two distinct ones", got)
		}
	})

	var exists bool
	if err := first.Pool.QueryRow(t.Context(),
		"SELECT to_regclass('pgtest_private') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatalf("to_regclass: %v", err)
	}
	if exists {
		t.Error("a table created in another test's database is visible here")
	}
}

func TestDatabaseIsDroppedWhenTestPasses(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("Inner", func(t *testing.T) {
		db := New(t)
		if err := db.Pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatalf("current_database: %v", err)
		}
	})
	var n int
	if err := proc.server.admin.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	if n != 0 {
		t.Errorf("database %s of a passed test still exists", name)
	}
}

// recordingTB lets a test drive create and drop by hand: it collects
// cleanups and errors instead of acting on them, and fails on demand.
type recordingTB struct {
	testing.TB
	failed   bool
	errors   []string
	cleanups []func()
}

func (r *recordingTB) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Failed() bool              { return r.failed || len(r.errors) > 0 }
func (r *recordingTB) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }

func (r *recordingTB) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	New(t) // make sure the server and template exist
	s := proc.server

	nameOf := func(t *testing.T, db *Database) string {
		t.Helper()
		var name string
		if err := db.Pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		return name
	}
	exists := func(t *testing.T, name string) bool {
		t.Helper()
		var n int
		if err := s.admin.QueryRow(t.Context(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n == 1
	}

	t.Run("FailedTestKeepsDatabase", func(t *testing.T) {
		t.Parallel()
		r := &recordingTB{TB: t, failed: true}
		name := nameOf(t, s.create(r, proc.template, nil))
		r.runCleanups()
		if !exists(t, name) {
			t.Error("database of a failed test was dropped; want it kept for inspection")
		}
		if _, err := s.admin.Exec(t.Context(), "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Fatalf("drop: %v", err)
		}
	})

	t.Run("LeakedConnectionIsReported", func(t *testing.T) {
		t.Parallel()
		r := &recordingTB{TB: t}
		db := s.create(r, proc.template, nil)
		conn, err := pgx.Connect(t.Context(), db.DSN)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(context.Background()) // already terminated by the forced drop
		r.runCleanups()
		if len(r.errors) != 1 || !strings.Contains(r.errors[0], "still open") {
			t.Errorf("errors = %q, want one report of an open connection", r.errors)
		}
	})

	t.Run("PassedTestDropsDatabase", func(t *testing.T) {
		t.Parallel()
		r := &recordingTB{TB: t}
		name := nameOf(t, s.create(r, proc.template, nil))
		r.runCleanups()
		if len(r.errors) != 0 {
			t.Errorf("errors = %q, want none", r.errors)
		}
		if exists(t, name) {
			t.Error("database of a passed test still exists")
		}
	})
}

func TestNewEmpty(t *testing.T) {
	t.Parallel()
	db := NewEmpty(t)
	var exists bool
	if err := db.Pool.QueryRow(t.Context(),
		"SELECT to_regclass('goose_db_version') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatalf("to_regclass: %v", err)
	}
	if exists {
		t.Error("NewEmpty database has the goose version table; want no schema")
	}
}

func TestDatabaseName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		reason     string
		testName   string
		wantPrefix string
	}{
		{
			name: "Simple", reason: "lower-cased, separators become one underscore",
			testName: "TestStore/Create#01", wantPrefix: "test_teststore_create_01_",
		},
		{
			name: "Unicode", reason: "only [a-z0-9_] survive",
			testName: "TestÜber/ü ß", wantPrefix: "test_test_ber_",
		},
		{
			name: "VeryLong", reason: "63-byte identifier limit keeps the random suffix",
			testName: "Test" + strings.Repeat("VeryLongSubtestName/", 10), wantPrefix: "test_testverylongsubtestname_",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := databaseName(tt.testName), databaseName(tt.testName)
			if a == b {
				t.Errorf("two names for %q are equal (%s); want a random suffix", tt.testName, a)
			}
			for _, got := range []string{a, b} {
				if !strings.HasPrefix(got, tt.wantPrefix) {
					t.Errorf("databaseName(%q) = %q, want prefix %q (%s)", tt.testName, got, tt.wantPrefix, tt.reason)
				}
				if len(got) > maxIdentBytes {
					t.Errorf("databaseName(%q) = %q is %d bytes, want <= %d", tt.testName, got, len(got), maxIdentBytes)
				}
				if strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
					t.Errorf("databaseName(%q) = %q has characters outside [a-z0-9_]", tt.testName, got)
				}
			}
		})
	}
}

func TestDSNBuilder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason string
		admin  string
		want   string
	}{
		{
			name: "URL", reason: "path is replaced, query and credentials kept",
			admin: "postgres://u:p%40ss@db:5432/postgres?sslmode=disable",
			want:  "postgres://u:p%40ss@db:5432/test_x?sslmode=disable",
		},
		{
			name: "URLWithoutDatabase", reason: "a path is added",
			admin: "postgresql://u@db", want: "postgresql://u@db/test_x",
		},
		{
			name: "KeywordValue", reason: "a later dbname overrides the first",
			admin: "host=db user=u dbname=postgres", want: "host=db user=u dbname=postgres dbname=test_x",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			build, err := dsnBuilder(tt.admin)
			if err != nil {
				t.Fatalf("dsnBuilder(%q): %v", tt.admin, err)
			}
			if diff := cmp.Diff(tt.want, build("test_x")); diff != "" {
				t.Errorf("DSN (-want +got) (%s):\n%s", tt.reason, diff)
			}
		})
	}
}

// BenchmarkClone measures what New pays per test, CREATE DATABASE from the
// template plus DROP, for each PostgreSQL 15 copy strategy.
func BenchmarkClone(b *testing.B) {
	New(b) // start the server and build the template
	s := proc.server
	for _, strategy := range []string{"", "WAL_LOG", "FILE_COPY"} {
		b.Run("Strategy="+strategy, func(b *testing.B) {
			ctx := b.Context()
			suffix := ""
			if strategy != "" {
				suffix = " STRATEGY " + strategy
			}
			var creating, dropping time.Duration
			for b.Loop() {
				name := databaseName(b.Name())
				begin := time.Now()
				if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(proc.template)+suffix); err != nil {
					b.Fatalf("create: %v", err)
				}
				creating += time.Since(begin)
				begin = time.Now()
				if _, err := s.admin.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
					b.Fatalf("drop: %v", err)
				}
				dropping += time.Since(begin)
			}
			b.ReportMetric(float64(creating.Milliseconds())/float64(b.N), "create-ms/op")
			b.ReportMetric(float64(dropping.Milliseconds())/float64(b.N), "drop-ms/op")
		})
	}
}
