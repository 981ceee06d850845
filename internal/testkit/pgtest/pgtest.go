// Package pgtest gives each test its own real PostgreSQL database, holding the
// migrated schema, in tens of milliseconds.
//
// Usage:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		db := pgtest.New(t) // db.Pool, db.DSN
//		...
//	}
//
// Where the server comes from, first match wins:
//
//  1. DATABASE_URL, if set: an existing server and a role allowed to create
//     databases (the URL's database is only used for administration).
//  2. A throwaway cluster started once per test binary with embeddedpg from
//     the machine's PostgreSQL server binaries, stopped and deleted by Main.
//     go test runs each package as its own process, so each package starts
//     its own cluster; that costs a couple of seconds per package.
//  3. With `go test -tags testcontainers` and a reachable Docker engine, a
//     PostgreSQL container (testcontainers-go). The tag keeps the Docker
//     client out of ordinary builds. CONVERGE_TEST_DOCKER=1 (make
//     test-docker) takes the container before the embedded cluster.
//
// Otherwise New fails the test with instructions for getting one of these.
//
// The schema is built once per server and migration set: a database named
// converge_tmpl_<first 12 hex of migrations.Hash()> is created, migrated and
// only then marked IS_TEMPLATE, all under a session advisory lock, so the
// parallel test binaries that share one DATABASE_URL never race and a
// half-built template left by a crash is rebuilt. New then clones it with
// CREATE DATABASE ... TEMPLATE, which copies files instead of replaying SQL.
//
// A test's database is dropped when the test passes and kept when it fails;
// New logs its DSN. Note that an embedded cluster disappears with its test
// binary, so to inspect a failed test's database run the tests against a
// long-lived server through DATABASE_URL (for example `converge dev`'s).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/convergeplane/converge/internal/embeddedpg"
	"github.com/convergeplane/converge/migrations"
)

const (
	// PoolMaxConns is each test database's pool size: enough for code under
	// test that runs concurrent workers, small enough that hundreds of
	// parallel tests fit in the embedded server's max_connections=300.
	PoolMaxConns = 20

	templatePrefix = "converge_tmpl_"
	testDBPrefix   = "test_"
	maxIdentBytes  = 63 // PostgreSQL truncates longer identifiers (NAMEDATALEN-1)

	serverTimeout   = 2 * time.Minute // cluster start (initdb) or container pull
	templateTimeout = 5 * time.Minute // every migration, under the lock
	cloneTimeout    = time.Minute
	cleanupTimeout  = time.Minute
	// leakGrace is how long a backend may linger after its pool is closed:
	// a server process exits shortly after its client hangs up, not at once.
	leakGrace = 3 * time.Second
)

// Database is one test's private database.
type Database struct {
	// DSN connects to the database as a role that owns it. Use it for code
	// that opens its own connections (a server under test, migrations).
	DSN string
	// Pool is connected to the database and closed when the test ends.
	Pool *pgxpool.Pool
}

// proc is the once-per-process state: the server all tests in this binary
// share and the template built on it. It is this package's only mutable
// global, and has to be one: the server must be started once per test binary
// and stopped by Main after the last test.
var proc struct { // see above
	mainCalled atomic.Bool

	serverOnce sync.Once
	server     *server
	serverErr  error

	templateOnce sync.Once
	template     string
	templateErr  error
}

// server is where test databases are created.
type server struct {
	source string                 // where it came from, for messages
	dsnFor func(db string) string // a DSN for database db on this server
	admin  *pgxpool.Pool          // CREATE/DROP DATABASE, leak checks
	stop   func(context.Context) error
	took   time.Duration
}

// Main runs the package's tests, then stops the server this process started
// (if any), and exits with the tests' status. Call it from TestMain; New
// refuses to run without it, since nothing else would stop the server.
func Main(m *testing.M) {
	proc.mainCalled.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	// Every test has stopped what it started: a goroutine still running
	// now is a leak (a duty, listener or pool left open). fasthttp (under
	// Fiber) keeps a process-wide clock goroutine, and its worker pool's
	// cleaner only notices a stopped server when its 10 s sleep ends.
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func shutdown() error {
	s := proc.server // m.Run has returned: no test is still starting one
	if s == nil {
		return nil
	}
	s.admin.Close()
	if s.stop == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := s.stop(ctx); err != nil {
		return fmt.Errorf("cannot stop the %s server: %w", s.source, err)
	}
	return nil
}

// New returns a new database for t, cloned from the migrated template, and
// drops it when t passes. It fails t if no server can be had.
func New(t testing.TB) *Database {
	t.Helper()
	return NewWith(t, nil)
}

// NewWith is New with the pool's configuration passed through configure
// (if not nil) before the pool opens: a benchmark gives its pool what a
// converge process gives its own (engine.PoolDefaults); Warm opens its connections.
func NewWith(t testing.TB, configure func(*pgxpool.Config)) *Database {
	t.Helper()
	s := getServer(t)
	proc.templateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(t.Context(), templateTimeout)
		defer cancel()
		begin := time.Now()
		proc.template, proc.templateErr = s.ensureTemplate(ctx)
		if proc.templateErr == nil {
			t.Logf("pgtest: template %s ready in %s", proc.template, time.Since(begin).Round(time.Millisecond))
		}
	})
	if proc.templateErr != nil {
		t.Fatalf("pgtest: %v", proc.templateErr)
	}
	return s.create(t, proc.template, configure)
}

// Warm opens pool's MinConns connections at once and returns once each has
// connected and run its AfterConnect (a pool configured as a converge
// process's warms each one): a benchmark then times a pool as a running
// process has it, not the background opening of its connections.
func Warm(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	conns := make([]*pgxpool.Conn, pool.Config().MinConns)
	var g errgroup.Group
	for i := range conns {
		g.Go(func() (err error) {
			conns[i], err = pool.Acquire(t.Context())
			return err
		})
	}
	err := g.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	if err != nil {
		t.Fatalf("pgtest: cannot open the pool's connections: %v", err)
	}
}

// NewEmpty returns a new database without the schema, for tests of the
// migrations themselves. Otherwise it behaves like New.
func NewEmpty(t testing.TB) *Database {
	t.Helper()
	return getServer(t).create(t, "template1", nil)
}

func getServer(t testing.TB) *server {
	t.Helper()
	if !proc.mainCalled.Load() {
		t.Fatal("pgtest: add `func TestMain(m *testing.M) { pgtest.Main(m) }` to this package's tests " +
			"so the test server is stopped when they finish")
	}
	proc.serverOnce.Do(func() {
		ctx, cancel := context.WithTimeout(t.Context(), serverTimeout)
		defer cancel()
		proc.server, proc.serverErr = startServer(ctx)
		if proc.serverErr == nil {
			t.Logf("pgtest: using %s server (ready in %s)", proc.server.source, proc.server.took.Round(time.Millisecond))
		}
	})
	if proc.serverErr != nil {
		t.Fatalf("pgtest: %v", proc.serverErr)
	}
	return proc.server
}

func startServer(ctx context.Context) (*server, error) {
	begin := time.Now()
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		return newServer(ctx, "DATABASE_URL", dsn, nil, begin)
	}

	if os.Getenv("CONVERGE_TEST_DOCKER") != "" {
		dsn, stop, err := startContainer(ctx)
		if err != nil {
			return nil, fmt.Errorf("CONVERGE_TEST_DOCKER is set: %w", err)
		}
		return newServer(ctx, "testcontainers", dsn, stop, begin)
	}
	pg, embeddedErr := embeddedpg.Start(ctx, embeddedpg.Config{})
	if embeddedErr == nil {
		return newServer(ctx, "embedded", pg.DSN("postgres"), pg.Stop, begin)
	}
	if !errors.Is(embeddedErr, embeddedpg.ErrNoBinaries) {
		// The binaries exist but the server would not start: say why rather
		// than hide it behind a fallback.
		return nil, fmt.Errorf("cannot start embedded PostgreSQL: %w", embeddedErr)
	}

	dsn, stop, containerErr := startContainer(ctx)
	if containerErr == nil {
		return newServer(ctx, "testcontainers", dsn, stop, begin)
	}
	return nil, fmt.Errorf(`no PostgreSQL server for tests.
  embedded:       %w
  testcontainers: %w
Get one of these:
  - install the PostgreSQL server binaries: sudo apt-get install postgresql
    (or run scripts/ensure-postgres.sh; macOS: brew install postgresql);
  - or point DATABASE_URL at a server where the role may create databases, e.g.
    DATABASE_URL='postgres://postgres:postgres@localhost:5432/postgres?sslmode=disable';
  - or start a Docker engine and run the tests with -tags testcontainers`, embeddedErr, containerErr)
}

func newServer(ctx context.Context, source, adminDSN string, stop func(context.Context) error,
	begin time.Time,
) (_ *server, retErr error) {
	defer func() {
		if retErr != nil && stop != nil {
			_ = stop(context.WithoutCancel(ctx)) // the setup error is what matters
		}
	}()
	dsnFor, err := dsnBuilder(adminDSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	cfg, err := pgxpool.ParseConfig(adminDSN)
	if err != nil {
		return nil, fmt.Errorf("%s: bad DSN: %w", source, err)
	}
	cfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("cannot connect to the %s server: %w", source, err)
	}
	return &server{source: source, dsnFor: dsnFor, admin: admin, stop: stop, took: time.Since(begin)}, nil
}

// dsnBuilder returns a function that points adminDSN at another database,
// for both URL and keyword/value DSNs.
func dsnBuilder(adminDSN string) (func(string) string, error) {
	if strings.HasPrefix(adminDSN, "postgres://") || strings.HasPrefix(adminDSN, "postgresql://") {
		u, err := url.Parse(adminDSN)
		if err != nil {
			return nil, fmt.Errorf("bad DSN: %w", err) // url.Error masks no password; pgx would
		}
		return func(db string) string {
			v := *u
			v.Path, v.RawPath = "/"+db, ""
			return v.String()
		}, nil
	}
	// Keyword/value: a later dbname overrides an earlier one.
	return func(db string) string { return adminDSN + " dbname=" + db }, nil
}

// ensureTemplate creates the template for the embedded migrations unless a
// complete one exists. Completion is recorded by IS_TEMPLATE, set last, so a
// template left half-migrated by a crash is dropped and rebuilt.
func (s *server) ensureTemplate(ctx context.Context) (string, error) {
	name := templatePrefix + migrations.Hash()[:12]
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("cannot connect to build template: %w", err)
	}
	defer conn.Release()

	// Session lock, not transaction lock: CREATE DATABASE cannot run in a
	// transaction. Other test binaries block here until the template is done.
	key := lockKey(name)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return "", fmt.Errorf("cannot lock template %s: %w", name, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			// Close the session so the server drops the lock with it.
			_ = conn.Conn().Close(ctx)
		}
	}()

	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return name, nil
	case err == nil:
		if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("cannot drop incomplete template %s: %w", name, err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("cannot look up template %s: %w", name, err)
	}

	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		return "", fmt.Errorf("cannot create template %s: %w", name, err)
	}
	if err := migrations.Up(ctx, s.dsnFor(name), nil); err != nil {
		return "", fmt.Errorf("cannot migrate template %s: %w", name, err)
	}
	// ALLOW_CONNECTIONS false: a stray session on a template makes every
	// clone fail with "source database is being accessed by other users".
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("cannot mark template %s: %w", name, err)
	}
	return name, nil
}

// create clones template into a database for t and arranges its removal.
func (s *server) create(t testing.TB, template string, configure func(*pgxpool.Config)) *Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cloneTimeout)
	defer cancel()

	begin := time.Now()
	name := databaseName(t.Name())
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)); err != nil {
		t.Fatalf("pgtest: cannot create database %s from %s: %v", name, template, err)
	}
	db := &Database{DSN: s.dsnFor(name)}
	t.Cleanup(func() { s.drop(t, name, db.Pool) })

	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: bad DSN for %s: %v", name, err)
	}
	cfg.MaxConns = PoolMaxConns
	if configure != nil {
		configure(cfg)
	}
	if db.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatalf("pgtest: cannot open pool on %s: %v", name, err)
	}
	t.Logf("pgtest: database %s (from %s, %s): %s", name, template, time.Since(begin).Round(time.Millisecond), db.DSN)
	return db
}

// drop closes the test's pool and, if the test passed, drops its database.
// Connections still open at that point are reported: they mean the code
// under test does not close what it opens.
func (s *server) drop(t testing.TB, name string, pool *pgxpool.Pool) {
	if pool != nil {
		// pgxpool.Close waits for every acquired connection; a leaked one
		// would hang the test binary, so bound the wait.
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(leakGrace):
			t.Errorf("pgtest: a connection acquired from the pool of %s was never released", name)
		}
	}
	if t.Failed() {
		t.Logf("pgtest: test failed; keeping database %s for inspection", name)
		return
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), cleanupTimeout)
	defer cancel()
	if n, err := s.waitIdle(ctx, name); err != nil {
		t.Errorf("pgtest: cannot check %s for open connections: %v", name, err)
	} else if n > 0 {
		t.Errorf("pgtest: %d connection(s) to %s still open after the test; close every pool and conn the test opens",
			n, name)
	}
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: cannot drop database %s: %v", name, err)
	}
}

// waitIdle polls until no client session is connected to name, for up to
// leakGrace, and returns how many remain. Only client backends count: an
// autovacuum worker still vacuuming a large test's tables (BenchmarkScale's
// million rows) is the server's, not a leak, and DROP ... WITH (FORCE) ends
// it.
func (s *server) waitIdle(ctx context.Context, name string) (int, error) {
	deadline := time.Now().Add(leakGrace)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := s.admin.QueryRow(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'", name,
		).Scan(&n); err != nil {
			return 0, err
		}
		if n == 0 || time.Now().After(deadline) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, nil
		case <-tick.C:
		}
	}
}

// databaseName derives a readable, unique, valid name from the test's name,
// so a kept database can be matched to its test at a glance.
func databaseName(testName string) string {
	var b strings.Builder
	underscore := false
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix) // never fails (crypto/rand, Go 1.24+)
	tail := "_" + hex.EncodeToString(suffix)
	base := strings.Trim(b.String(), "_")
	if room := maxIdentBytes - len(testDBPrefix) - len(tail); len(base) > room {
		base = strings.TrimRight(base[:room], "_")
	}
	return testDBPrefix + base + tail
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// lockKey maps a template name to an advisory lock key, so templates for
// different migration sets build in parallel.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("pgtest:" + name))
	return int64(h.Sum64()) // wrap-around is fine for a lock key
}
