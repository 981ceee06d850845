// Package typescript_test runs the TypeScript provider SDK's own checks inside
// `go test`, so that `make test` covers the SDK: the strict type check and both
// builds (npm run build), then its node:test suite over real HTTP.
package typescript_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/nodetest"
	"github.com/convergeplane/converge/sdk/typescript/sdkbuild"
)

// TestTypeScriptSDK builds the package (tsc, ESM and CommonJS) and runs every
// test/*.test.mjs with node's test runner, each test bounded so that a broken
// feature fails rather than hangs. It needs node 20+ and npm on PATH, and runs
// `npm ci` when node_modules is missing.
func TestTypeScriptSDK(t *testing.T) {
	dir := sdkbuild.Ensure(t)
	tests, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no test/*.test.mjs files: %v", err)
	}
	out := nodetest.Run(t, 5*time.Minute, dir, nodetest.LookPath(t, "node"), append([]string{"--test", "--test-timeout=60000", "--test-reporter=spec"}, tests...)...)
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}
