package embeddedpg

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// testRootBase is the RootBaseDir the tests' clusters use, so a run as root
// keeps its relocated clusters in a directory of its own and removes them.
var testRootBase string

// TestMain fails the package if a test leaks a goroutine.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "embeddedpg-rootbase-")
	if err == nil {
		err = os.Chmod(dir, 0o755) // the unprivileged user must get through
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testRootBase = filepath.Join(dir, "base")
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}
