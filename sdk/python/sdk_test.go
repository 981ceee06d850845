// Package python_test runs the Python provider SDK's own checks inside go test: mypy
// --strict over the package and its tests, then its pytest suite, both with Debian's
// /usr/bin/python3 (make test installs python3-mypy and python3-pytest when missing).
package python_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// python is Debian's interpreter: the SDK supports 3.11+, and the Debian packages
// install mypy and pytest for it alone.
const python = "/usr/bin/python3"

// requireModule fails the test, naming the Debian package to install, when python3
// cannot import module.
func requireModule(t *testing.T, module, debianPackage string) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import "+module).CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import %s (%v: %s): install the Debian package %s "+
			"(make test does, as root: apt-get install %s)", python, module, err, strings.TrimSpace(string(out)),
			debianPackage, debianPackage)
	}
}

// run runs python3 with args in this directory, failing the test with its output.
func run(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(python, args...)
	// No bytecode or caches left in the source tree.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("python3 %s:\n%s", strings.Join(args, " "), out)
}

// TestTypes type-checks the SDK, its tests, its bench server and the example provider
// (examples/python-provider) and its Lambda function (functions/python-provider) with
// mypy --strict.
func TestTypes(t *testing.T) {
	requireModule(t, "mypy", "python3-mypy")
	t.Parallel()
	run(t, "-m", "mypy", "--strict", "--cache-dir", t.TempDir(), "converge_provider", "tests", "bench",
		"../../examples/python-provider/provider.py", "../../functions/python-provider/handler.py")
}

// TestPytest runs the SDK's pytest suite: every test over real HTTP on 127.0.0.1.
func TestPytest(t *testing.T) {
	requireModule(t, "pytest", "python3-pytest")
	t.Parallel()
	run(t, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
}
