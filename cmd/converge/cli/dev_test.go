package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/embeddedpg"
)

// TestDevSurvivesItsPostgresDying runs `converge dev` on its embedded
// Postgres, kills the postmaster with SIGKILL and checks that dev mode
// notices and restarts it: meanwhile the API answers 503 with Retry-After
// (never 500), and then it serves again without a manual restart.
func TestDevSurvivesItsPostgresDying(t *testing.T) {
	t.Parallel()
	// A data dir every user can walk down to, so that as root the cluster
	// stays in it (see embeddedpg.Config.ClusterDir) and goes with the test.
	top, err := os.MkdirTemp("", "converge-dev-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(top, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"CONVERGE_DATA_DIR": dataDir, "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"dev"}, w, io.Discard, func(k string) string { return vars[k] })
		w.Close()
	}()
	base := ""
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if api, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), "API:"); ok {
			base = strings.TrimSuffix(strings.TrimSpace(api), "/api/v1")
			break
		}
	}
	if base == "" {
		t.Skipf("converge dev did not come up (exit %d); no PostgreSQL server binaries?", <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	get := func() (int, http.Header) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/resources", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET /api/v1/resources: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if code, _ := get(); code != http.StatusOK {
		t.Fatalf("GET /api/v1/resources = %d before the kill, want 200", code)
	}

	pgDir, err := (embeddedpg.Config{DataDir: filepath.Join(dataDir, "pg")}).ClusterDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(pgDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the killed postmaster %d is still there", pid)
		}
		time.Sleep(20 * time.Millisecond) // polling toward the deadline
	}
	// A new postmaster on the same data dir, or none.
	restarted := func() bool {
		b, err := os.ReadFile(filepath.Join(pgDir, "postmaster.pid"))
		if err != nil {
			return false
		}
		first, _, _ := strings.Cut(string(b), "\n")
		now, err := strconv.Atoi(strings.TrimSpace(first))
		return err == nil && now != pid && syscall.Kill(now, 0) == nil
	}

	deadline = time.Now().Add(2 * time.Minute)
	saw503 := false
	for {
		if time.Now().After(deadline) {
			t.Fatal("two minutes after Postgres was killed no new postmaster serves the API: dev mode did not restart it")
		}
		code, h := get()
		if code == http.StatusOK && restarted() {
			break
		}
		if code == http.StatusOK { // a backend the dead postmaster left, not yet gone
			time.Sleep(50 * time.Millisecond) // polling toward the deadline
			continue
		}
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Fatalf("GET /api/v1/resources = %d (Retry-After %q) while Postgres restarts, want 503 with Retry-After",
				code, h.Get("Retry-After"))
		}
		saw503 = true
		time.Sleep(50 * time.Millisecond) // polling toward the deadline
	}
	t.Logf("recovered on a new postmaster; saw 503 in between: %v", saw503)

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("converge dev exited %d after Ctrl+C, want 0", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("converge dev did not stop")
	}
}
