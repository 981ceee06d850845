// Package sdkbuild prepares the TypeScript provider SDK (sdk/typescript) for the Go
// tests that run it: its own suite and the end-to-end tests of providers built on it.
// Several test binaries may do so at once under `go test ./...`, so the build runs
// under a file lock (dist.lock) and only when the output is older than the sources.
package sdkbuild

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/nodetest"
)

// Dir returns the SDK's directory, sdk/typescript.
func Dir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("sdkbuild: cannot locate the SDK's directory")
	}
	return filepath.Dir(filepath.Dir(file))
}

// Ensure installs the SDK's locked dependencies when they are missing and builds it
// (the strict type check, then the ESM and CommonJS builds) when dist is older than
// its sources, and returns the SDK's directory. It fails the test naming node or
// npm when either is missing.
func Ensure(t testing.TB) string {
	t.Helper()
	nodetest.LookPath(t, "node")
	dir := Dir(t)
	nodetest.NPMCI(t, dir)
	unlock := nodetest.Lock(t, filepath.Join(dir, "dist.lock"))
	defer unlock()
	if stale(t, dir) {
		nodetest.Run(t, 3*time.Minute, dir, nodetest.LookPath(t, "npm"), "run", "--silent", "build")
	}
	return dir
}

// stale reports whether dist is missing or older than a source of the build.
func stale(t testing.TB, dir string) bool {
	t.Helper()
	built, err := os.Stat(filepath.Join(dir, "dist", "cjs", "package.json")) // the build's last step
	if err != nil {
		return true
	}
	newest := time.Time{}
	for _, src := range []string{"src", "scripts", "package.json", "package-lock.json", "tsconfig.json", "tsconfig.cjs.json"} {
		err := filepath.WalkDir(filepath.Join(dir, src), func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if info, err := d.Info(); err == nil && info.ModTime().After(newest) {
				newest = info.ModTime()
			}
			return nil
		})
		if err != nil {
			t.Fatalf("sdkbuild: %v", err)
		}
	}
	return newest.After(built.ModTime())
}
