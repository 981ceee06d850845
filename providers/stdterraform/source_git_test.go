package stdterraform

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo makes a repository with modules/hello at tag v1 ("from" = v1) and at HEAD
// ("from" = head), and modules/linked holding a symlink out; it returns its path and
// v1's commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git binary in PATH (%v)", err)
	}
	dir := filepath.Join(t.TempDir(), "infra")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, body string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules/hello/main.tf", outputModule("v1"))
	write("README", "infra")
	if err := os.MkdirAll(filepath.Join(dir, "modules/linked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "modules/linked/passwd")); err != nil {
		t.Fatal(err)
	}
	run("init", "-q", ".")
	run("add", ".")
	run("commit", "-q", "-m", "v1")
	run("tag", "v1")
	v1 := run("rev-parse", "HEAD")
	write("modules/hello/main.tf", outputModule("head"))
	run("commit", "-q", "-am", "head")
	return dir, v1
}

// TestGitSource applies modules from a local repository, over git::file:// and over
// git::https:// (git http-backend behind a local TLS server the provider trusts through
// WithCAFile): the //subdir at a tag, at a commit and at HEAD. A missing ref or
// repository is transient; a missing //subdir, a symlink in the module and a ?checksum=
// are terminal.
func TestGitSource(t *testing.T) {
	needTerraform(t)
	repo, v1 := gitRepo(t)
	srv := httptest.NewTLSServer(&cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1"},
	})
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writeCA(t, srv, ca)
	p := New("stdterraform", WithCAFile(ca))

	file := "git::file://" + repo
	wantFrom(t, p, file+"//modules/hello?ref=v1", "v1")
	wantFrom(t, p, file+"//modules/hello?ref="+v1, "v1")
	wantFrom(t, p, file+"//modules/hello", "head")
	wantFrom(t, p, "git::"+srv.URL+"/infra//modules/hello?ref=v1", "v1")

	checkFailures(t, p, []failure{
		{"missing ref", file + "//modules/hello?ref=v9", nil, false, "couldn't find remote ref v9"},
		{"missing repository", "git::file://" + repo + "-gone//modules/hello", nil, false, "git fetch"},
		{"missing subdir", file + "//modules/nope?ref=v1", nil, true, "git archive FETCH_HEAD:modules/nope"},
		{"symlink", file + "//modules/linked?ref=v1", nil, true, "is a link (to /etc/passwd)"},
		{"checksum", file + "?checksum=sha256:" + strings.Repeat("0", 64), nil, true, "takes ?ref=, not ?checksum="},
		{"other query", file + "?depth=1", nil, true, "takes only ?ref="},
		{"ref option", file + "?ref=--upload-pack=touch", nil, true, "starts with -"},
		{"ssh", "git::ssh://host/repo", nil, true, "git::https:// or git::file://"},
	})
	checkFailures(t, New("stdterraform"), []failure{
		{"untrusted server", "git::" + srv.URL + "/infra//modules/hello?ref=v1", nil, false, "certificate"},
	})
}
