package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoExampleCode fails if the converge binary imports, directly or
// not, anything under examples/: the demo runs the example provider as its
// own binary and gets its kinds from it (see internal/demo).
func TestLinksNoExampleCode(t *testing.T) {
	t.Parallel()
	const module = "github.com/convergeplane/converge"
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test lists imports with the go command: %v", err)
	}
	for _, pkg := range []string{module + "/cmd/converge", module + "/cmd/conctl"} {
		out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", "-f", "{{.ImportPath}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 || !strings.Contains(string(out), module+"/cmd/") {
			t.Fatalf("go list -deps %s listed too little: %q", pkg, deps)
		}
		for _, d := range deps {
			if d == module+"/examples" || strings.HasPrefix(d, module+"/examples/") {
				t.Errorf("%s links %s: run examples as their own binaries", pkg, d)
			}
		}
	}
}
