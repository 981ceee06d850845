//go:build unix

package embeddedpg

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRootChangesNoPermissionsOutsideItsDirs starts a persistent cluster as
// root with its data dir under a fresh 0700 folder (a home folder, say): the
// postgres user cannot get through it, and embeddedpg must not open it up.
// The cluster lives in a directory of its own under RootBaseDir instead.
func TestRootChangesNoPermissionsOutsideItsDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the cluster to an unprivileged user")
	}
	t.Parallel()
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(home, ".cache", "converge", "pg")
	modes := map[string]fs.FileMode{}
	for p := home; p != filepath.Dir(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		modes[p] = fi.Mode()
	}
	cfg := Config{DataDir: dataDir, Persistent: true, RootBaseDir: testRootBase}
	want, err := cfg.ClusterDir()
	if err != nil {
		t.Fatal(err)
	}

	s := start(t, cfg)
	t.Cleanup(func() { _ = os.RemoveAll(s.DataDir()) })
	exec1(t, s.DSN("postgres"), "CREATE TABLE kept (v text)")
	stop(t, s)

	for p, before := range modes {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != before {
			t.Errorf("%s: mode %v after Start as root, was %v", p, fi.Mode(), before)
		}
	}
	if s.DataDir() != want || filepath.Dir(s.DataDir()) != testRootBase {
		t.Errorf("cluster in %s; ClusterDir said %s, want a directory under %s", s.DataDir(), want, testRootBase)
	}
	fi, err := os.Stat(s.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o700 || st.Uid != s.runAs.uid {
		t.Errorf("cluster dir mode %v uid %d, want 0700 owned by %s", fi.Mode().Perm(), st.Uid, s.runAs.name)
	}

	// The next start finds the same cluster.
	s = start(t, cfg)
	defer stop(t, s)
	if got := queryString(t, s.DSN("postgres"), "SELECT count(*)::text FROM kept"); got != "0" {
		t.Errorf("restarted cluster: count(kept) = %q", got)
	}

	t.Run("ReachableDataDirStaysInPlace", func(t *testing.T) {
		open := filepath.Join(filepath.Dir(testRootBase), "open")
		if err := os.MkdirAll(open, 0o755); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(open, "pg")
		if got, err := (Config{DataDir: dir, RootBaseDir: testRootBase}).ClusterDir(); err != nil || got != dir {
			t.Errorf("ClusterDir(%s) = %q, %v; want the data dir itself", dir, got, err)
		}
	})
	t.Run("UnreachableExistingClusterIsAnError", func(t *testing.T) {
		dir := filepath.Join(home, "old")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := (Config{DataDir: dir, RootBaseDir: testRootBase}).ClusterDir()
		if err == nil || !strings.Contains(err.Error(), "cannot be reached") {
			t.Errorf("ClusterDir of an unreachable initialised cluster = %v, want an error", err)
		}
	})
}
