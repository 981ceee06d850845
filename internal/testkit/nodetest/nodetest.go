// Package nodetest gives a Go test the Node.js tools it runs: node and npm found
// or the test failed naming them, a folder's locked packages installed, and a
// command run with a time limit. The TypeScript SDK's suite, its providers'
// end-to-end tests, gen-types' type check and the signature interop test use it.
package nodetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// LookPath finds a program the test needs (node, npm), failing with a clear
// message when it is missing.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: this test needs Node.js 20+ and npm: %v", name, err)
	}
	return p
}

// NPMCI installs dir's locked packages (npm ci) unless node_modules holds what
// package-lock.json locks: npm's own record of the install, node_modules/.package-lock.json,
// is there and no older than the lock file. A checkout that changed the lock
// file (a pull, a branch switch) is installed again rather than run against the
// packages of the old one.
func NPMCI(t testing.TB, dir string) {
	t.Helper()
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	if installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !installed.ModTime().Before(lock.ModTime()) {
		return
	}
	Run(t, 5*time.Minute, dir, LookPath(t, "npm"), "ci", "--no-audit", "--no-fund")
}

// Run runs prog in dir within timeout and fails the test with its output if it
// fails; it returns the output otherwise.
func Run(t testing.TB, timeout time.Duration, dir, prog string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", filepath.Base(prog), args, dir, err, out)
	}
	return out
}

// Lock takes an exclusive lock on path (created if missing), waiting while
// another test or test binary holds it, and returns its release.
func Lock(t testing.TB, path string) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("nodetest: lock %s: %v", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}
}
