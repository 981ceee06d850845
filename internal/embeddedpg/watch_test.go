package embeddedpg

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kill9 kills the postmaster the way the OOM killer or a stray kill -9
// would, and waits until it has gone.
func kill9(t *testing.T, s *Server) int {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if err := signalProcess(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("postmaster still running 30s after SIGKILL")
	}
	return p.cmd.Process.Pid
}

// TestWatchRestartsAKilledServer: a postmaster that dies under a watched
// Server comes back on the same DSN.
func TestWatchRestartsAKilledServer(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	defer stop(t, s)
	died := s.Watch(t.Context(), WatchConfig{Attempts: 20, Backoff: 100 * time.Millisecond})

	old := kill9(t, s)
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := ping(t.Context(), s.DSN("postgres"))
		if err == nil {
			break
		}
		select {
		case err := <-died:
			t.Fatalf("Watch gave up: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not back 90s after it was killed: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling toward the deadline
	}
	s.mu.Lock()
	pid := s.proc.cmd.Process.Pid
	s.mu.Unlock()
	if pid == old {
		t.Fatalf("still pid %d: the server answering is the killed one", pid)
	}
	if got := queryString(t, s.DSN("postgres"), "SELECT 1::text"); got != "1" {
		t.Errorf("SELECT 1 = %q after the restart", got)
	}
}

// TestWatchGivesUpLoudly: when the server cannot be started again, Watch
// reports it after its bounded attempts instead of retrying forever.
func TestWatchGivesUpLoudly(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	died := s.Watch(t.Context(), WatchConfig{Attempts: 2, Backoff: 50 * time.Millisecond})
	// Without its configuration file the postmaster refuses to start.
	if err := os.Remove(filepath.Join(s.DataDir(), "postgresql.conf")); err != nil {
		t.Fatal(err)
	}
	kill9(t, s)
	select {
	case err, ok := <-died:
		if !ok || err == nil || !strings.Contains(err.Error(), "2 restarts failed") {
			t.Errorf("Watch reported %v (ok=%v), want the restarts' failure", err, ok)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("Watch did not give up")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	defer cancel()
	if err := s.Stop(ctx); err == nil || !strings.Contains(err.Error(), "already exited") {
		t.Errorf("Stop after Watch gave up = %v, want it to say the server had exited", err)
	}
}
