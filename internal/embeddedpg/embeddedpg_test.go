package embeddedpg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if cfg.Log == nil {
		cfg.Log = testLogger(t)
	}
	if cfg.RootBaseDir == "" {
		cfg.RootBaseDir = testRootBase
	}
	s, err := Start(ctx, cfg)
	if errors.Is(err, ErrNoBinaries) {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s
}

func stop(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func exec1(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryString(t *testing.T, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestStart(t *testing.T) {
	t.Parallel()

	t.Run("ThrowawayClusterServesAndIsRemoved", func(t *testing.T) {
		t.Parallel()
		begin := time.Now()
		s := start(t, Config{Settings: map[string]string{"work_mem": "8MB"}})
		t.Logf("start took %s", time.Since(begin))

		if got := queryString(t, s.DSN("postgres"), "SELECT 1::text"); got != "1" {
			t.Errorf("SELECT 1 = %q, want 1", got)
		}
		for name, want := range map[string]string{
			"fsync":              "off",
			"full_page_writes":   "off",
			"max_connections":    "300",
			"listen_addresses":   "127.0.0.1",
			"work_mem":           "8MB",
			"server_encoding":    "UTF8",
			"shared_buffers":     "128MB",
			"synchronous_commit": "off",
		} {
			if got := queryString(t, s.DSN("postgres"), "SHOW "+name); got != want {
				t.Errorf("SHOW %s = %q, want %q", name, got, want)
			}
		}

		dir := s.dataDir
		begin = time.Now()
		stop(t, s)
		t.Logf("stop took %s", time.Since(begin))
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("data dir %s still exists after Stop (err %v)", dir, err)
		}
		if err := s.Stop(t.Context()); err != nil {
			t.Errorf("second Stop = %v, want the first result (nil)", err)
		}
	})

	t.Run("PersistentClusterKeepsDataAcrossRestart", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "pg")

		s := start(t, Config{DataDir: dir, Persistent: true})
		exec1(t, s.DSN("postgres"), "CREATE TABLE kept (v text)")
		exec1(t, s.DSN("postgres"), "INSERT INTO kept VALUES ('before restart')")
		if got := queryString(t, s.DSN("postgres"), "SHOW fsync"); got != "on" {
			t.Errorf("persistent cluster has fsync=%s, want on", got)
		}
		stop(t, s)
		if _, err := os.Stat(filepath.Join(s.DataDir(), "PG_VERSION")); err != nil {
			t.Fatalf("persistent data dir gone after Stop: %v", err)
		}

		begin := time.Now()
		s = start(t, Config{DataDir: dir, Persistent: true})
		t.Logf("restart took %s", time.Since(begin))
		defer stop(t, s)
		if got := queryString(t, s.DSN("postgres"), "SELECT v FROM kept"); got != "before restart" {
			t.Errorf("after restart kept.v = %q, want %q", got, "before restart")
		}
	})

	t.Run("StalePidFileIsIgnored", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "pg")
		s := start(t, Config{DataDir: dir, Persistent: true})
		stop(t, s)
		clusterDir := s.DataDir() // dir itself, or where root keeps it

		// A pid that has certainly exited, and a live one that is not a
		// postmaster (this test process: a recycled pid after a crash).
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatalf("run true: %v", err)
		}
		for _, pid := range []int{dead.Process.Pid, os.Getpid()} {
			t.Run("pid"+strconv.Itoa(pid), func(t *testing.T) {
				pidFile := filepath.Join(clusterDir, pidFileName)
				content := strconv.Itoa(pid) + "\n" + clusterDir + "\n1700000000\n5432\n/tmp\n127.0.0.1\n  1234  5678\nready\n"
				if err := os.WriteFile(pidFile, []byte(content), 0o600); err != nil {
					t.Fatalf("write pid file: %v", err)
				}
				s := start(t, Config{DataDir: dir, Persistent: true})
				defer stop(t, s)
				if got := queryString(t, s.DSN("postgres"), "SELECT 1::text"); got != "1" {
					t.Errorf("SELECT 1 = %q", got)
				}
			})
		}
	})

	t.Run("LeftoverServerIsStopped", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "pg")
		// first plays a server orphaned by a crashed `converge dev`.
		first := start(t, Config{DataDir: dir, Persistent: true})

		second := start(t, Config{DataDir: dir, Persistent: true})
		defer stop(t, second)
		if got := queryString(t, second.DSN("postgres"), "SELECT 1::text"); got != "1" {
			t.Errorf("SELECT 1 = %q", got)
		}
		select {
		case <-first.proc.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("leftover server still running after second Start")
		}
		if err := first.Stop(t.Context()); err == nil {
			t.Error("Stop of the displaced server = nil, want an error saying it had exited")
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reason  string
		cfg     Config
		wantErr string
	}{
		{name: "ZeroValue", reason: "a throwaway cluster needs nothing", cfg: Config{}},
		{
			name: "PersistentWithoutDataDir", reason: "a temp dir cannot persist",
			cfg: Config{Persistent: true}, wantErr: "DataDir is required",
		},
		{name: "PortTooLarge", reason: "not a TCP port", cfg: Config{Port: 70000}, wantErr: "out of range"},
		{name: "PortNegative", reason: "not a TCP port", cfg: Config{Port: -1}, wantErr: "out of range"},
		{name: "PortMax", reason: "upper boundary is valid", cfg: Config{Port: 65535}},
		{
			name: "ReservedSetting", reason: "DSN would lie about the port",
			cfg: Config{Settings: map[string]string{"port": "1"}}, wantErr: "must not set port",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("validate() = %v, want nil (%s)", err, tt.reason)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("validate() = %v, want error containing %q (%s)", err, tt.wantErr, tt.reason)
			}
		})
	}
}

// TestFindBinaries is not parallel: it empties PATH for the whole process
// (parallel top-level tests wait until it is done).
func TestFindBinaries(t *testing.T) {
	t.Run("NothingFoundExplainsWhereAndHow", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir()) // hides initdb and pg_config
		glob := filepath.Join(t.TempDir(), "*", "bin")
		_, err := findBinaries(t.Context(), glob)
		if err == nil {
			t.Fatal("findBinaries with empty PATH = nil error")
		}
		for _, want := range []string{"$PATH", "pg_config", glob, "apt-get install postgresql"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		if !errors.Is(err, ErrNoBinaries) {
			t.Errorf("error %v does not wrap ErrNoBinaries", err)
		}
	})
	t.Run("VersionDirsSortNumerically", func(t *testing.T) {
		if a, b := versionOfDir("/usr/lib/postgresql/15/bin"), versionOfDir("/usr/lib/postgresql/9.6/bin"); a <= b {
			t.Errorf("versionOfDir: 15 -> %d, 9.6 -> %d; want 15 newer", a, b)
		}
	})
}

// TestSweepAbandoned is not parallel: it points TMPDIR at its own directory.
func TestSweepAbandoned(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mk := func(name string) string {
		dir := filepath.Join(tmp, tempDirPrefix+name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatalf("mkdir: %v", err)
		}
		return dir
	}

	abandoned := mk("abandoned")
	f, err := lockOwner(filepath.Join(abandoned, ownerLockName))
	if err != nil {
		t.Fatalf("lockOwner: %v", err)
	}
	if err := f.Close(); err != nil { // as if its process had died
		t.Fatalf("close: %v", err)
	}
	live := mk("live")
	held, err := lockOwner(filepath.Join(live, ownerLockName))
	if err != nil {
		t.Fatalf("lockOwner: %v", err)
	}
	defer held.Close()

	// No lock file yet: its process is between MkdirTemp and lockOwner.
	settingUp := mk("settingup")

	sweepAbandoned(testLogger(t))

	for dir, wantGone := range map[string]bool{abandoned: true, live: false, settingUp: false} {
		_, err := os.Stat(dir)
		if gone := errors.Is(err, fs.ErrNotExist); gone != wantGone {
			t.Errorf("%s: removed = %v, want %v", filepath.Base(dir), gone, wantGone)
		}
	}
}

// TestOrphanedServerDies kills a process that started a throwaway cluster
// and checks that the server does not outlive it and that the next sweep
// removes its data dir.
func TestOrphanedServerDies(t *testing.T) {
	if os.Getenv("EMBEDDEDPG_TEST_HELPER") == "1" {
		s, err := Start(t.Context(), Config{})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(s.proc.cmd.Process.Pid, filepath.Dir(s.dataDir))
		select {} // wait to be killed
	}
	if _, err := findBinaries(t.Context(), debianBinGlob); err != nil {
		t.Skip(err)
	}
	t.Parallel()

	cmd := exec.Command(os.Args[0], "-test.run=^TestOrphanedServerDies$")
	cmd.Env = append(os.Environ(), "EMBEDDEDPG_TEST_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	var root string
	if _, err := fmt.Fscan(out, &pid, &root); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("reading helper output: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait() // killed: the error is expected

	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for processAlive(pid) {
		select {
		case <-deadline:
			_ = signalProcess(pid, sigImmediateShutdown)
			t.Fatalf("postmaster %d still running 30s after its parent was killed", pid)
		case <-tick.C:
		}
	}

	// A parallel test's Start sweeps too, and holds the dir's lock while it
	// removes it: this sweep skips a locked dir, so the dir may be gone a
	// moment later rather than now.
	swept := time.Now().Add(10 * time.Second)
	for {
		sweepAbandoned(testLogger(t))
		_, err := os.Stat(root)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if time.Now().After(swept) {
			t.Fatalf("abandoned dir %s not swept (stat err %v)", root, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStandby: a cluster started with StandbyOf is a hot standby of its
// primary: it reports recovery, replays what the primary writes after the
// copy, and refuses writes.
func TestStandby(t *testing.T) {
	t.Parallel()
	primary := start(t, Config{})
	defer stop(t, primary)
	exec1(t, primary.DSN("postgres"), `CREATE TABLE before_copy (n int)`)
	standby := start(t, Config{StandbyOf: primary.DSN("postgres")})
	defer stop(t, standby)
	if got := queryString(t, standby.DSN("postgres"), `SELECT pg_is_in_recovery()::text`); got != "true" {
		t.Fatalf("pg_is_in_recovery() on the standby = %s", got)
	}
	exec1(t, primary.DSN("postgres"), `INSERT INTO before_copy VALUES (7)`)
	deadline := time.Now().Add(30 * time.Second)
	for queryString(t, standby.DSN("postgres"), `SELECT count(*)::text FROM before_copy`) != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the standby did not replay the primary's insert within 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling replay, not waiting a fixed time
	}
	conn, err := pgx.Connect(t.Context(), standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	if _, err := conn.Exec(t.Context(), `INSERT INTO before_copy VALUES (8)`); err == nil || !strings.Contains(err.Error(), "25006") {
		t.Errorf("a write on the standby: err = %v, want read_only_sql_transaction (25006)", err)
	}
}
