package cli

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
)

// TestVersionUnderMakeBuild: the binary make build links reports the
// version the Makefile stamps. It takes the go build line from make -n
// (with VERSION set, and no console build), builds conctl with its
// -ldflags and runs it.
func TestVersionUnderMakeBuild(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds conctl")
	}
	const want = "v9.8.7-stamped"
	root := filepath.Join("..", "..", "..")
	mk := exec.Command("make", "-n", "--no-print-directory", "build", "NPM=", "VERSION="+want)
	mk.Dir = root
	plan, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, plan)
	}
	m := regexp.MustCompile(`build -ldflags "([^"]*)" .*\./cmd/conctl`).FindSubmatch(plan)
	if m == nil {
		t.Fatalf("make -n build builds no ./cmd/conctl with -ldflags:\n%s", plan)
	}
	bin := filepath.Join(t.TempDir(), "conctl")
	build := exec.Command("go", "build", "-ldflags", string(m[1]), "-o", bin, "./cmd/conctl")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--client").CombinedOutput()
	if err != nil {
		t.Fatalf("conctl version: %v\n%s", err, out)
	}
	wantOutput(t, string(out), "Client Version: "+want+" ("+runtime.Version()+")\n")
}
