// Package typescript_test runs the TypeScript provider SDK's own checks inside
// `go test`, so that `make test` covers the SDK: the strict type check and both
// builds (npm run build), then its node:test suite over real HTTP.
package typescript_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTypeScriptSDK builds the package (tsc, ESM and CommonJS) and runs every
// test/*.test.mjs with node's test runner. It needs node 20+ and npm on PATH,
// and runs `npm ci` when node_modules is missing.
func TestTypeScriptSDK(t *testing.T) {
	node := lookPath(t, "node")
	npmCI(t, ".")
	run(t, 3*time.Minute, ".", lookPath(t, "npm"), "run", "--silent", "build")
	tests, err := filepath.Glob(filepath.Join("test", "*.test.mjs"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no test/*.test.mjs files: %v", err)
	}
	run(t, 5*time.Minute, ".", node, append([]string{"--test", "--test-timeout=60000", "--test-reporter=spec"}, tests...)...)
}

// lookPath finds a program the TypeScript checks need, failing with a clear
// message when it is missing.
func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: the TypeScript SDK's tests need Node.js 20+ and npm: %v", name, err)
	}
	return p
}

// npmCI installs dir's locked dependencies (npm ci) unless node_modules holds
// them already.
func npmCI(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		return
	}
	run(t, 5*time.Minute, dir, lookPath(t, "npm"), "ci", "--no-audit", "--no-fund")
}

func run(t *testing.T, timeout time.Duration, dir, prog string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", filepath.Base(prog), args, dir, err, out)
	}
	if testing.Verbose() {
		t.Logf("%s %v:\n%s", filepath.Base(prog), args, out)
	}
}
