package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	conctl "github.com/convergeplane/converge/cmd/conctl/cli"
	"github.com/convergeplane/converge/internal/testkit/logbuf"
)

// demoRun is `converge dev --demo` running in this test, as `make demo`
// runs it, but on ports of its own: its API's base URL, its data dir, and
// what it printed.
type demoRun struct {
	base, dataDir string
	out, errs     *logbuf.Buffer
	getenv        func(string) string
	stop          func() int // Ctrl+C; the exit status
}

// startDemo builds the example providers into a directory on the demo's
// PATH (make build puts them next to converge; this test binary is not
// converge), runs `converge dev` with args until it prints "press Ctrl+C
// to stop", and stops it when the test ends. It skips the test where this
// machine has no PostgreSQL server binaries.
func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	bin := t.TempDir()
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin+string(filepath.Separator),
		"./examples/quickstart/cmd/quickstart-provider", "./examples/classic/cmd/classic-provider",
		"./examples/datadriven/cmd/datadriven-demo", "./cmd/stdprovider")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the example providers: %v\n%s", err, out)
	}
	// A data dir every user can walk down to, so that as root the cluster
	// stays in it (see embeddedpg.Config.ClusterDir) and goes with the test.
	top, err := os.MkdirTemp("", "converge-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &demoRun{dataDir: filepath.Join(top, "data"), out: &logbuf.Buffer{}, errs: &logbuf.Buffer{}}
	if err := os.Mkdir(r.dataDir, 0o755); err != nil { // converge dev --reset would make it 0700
		t.Fatal(err)
	}
	vars := map[string]string{"CONVERGE_DATA_DIR": r.dataDir, "LISTEN_ADDR": "127.0.0.1:0", "HEALTH_ADDR": "127.0.0.1:0",
		"PATH": bin + string(filepath.ListSeparator) + os.Getenv("PATH")}
	r.getenv = func(k string) string { return vars[k] }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Run(ctx, append([]string{"dev"}, args...), r.out, r.errs, r.getenv) }()
	var code *int
	r.stop = func() int {
		if code == nil {
			cancel()
			select {
			case c := <-done:
				code = &c
			case <-time.After(time.Minute):
				t.Fatal("converge dev did not stop within a minute of Ctrl+C")
			}
		}
		return *code
	}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("converge dev printed:\n%s\nstderr:\n%s", r.out, r.errs)
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(r.out.String(), "press Ctrl+C to stop\n") {
		select {
		case c := <-done:
			code = &c
			if strings.Contains(r.errs.String(), "embedded postgres") && !strings.Contains(r.out.String(), "converge is up") {
				t.Skipf("converge dev could not start its Postgres (exit %d); no PostgreSQL server binaries?\n%s", c, r.errs)
			}
			t.Fatalf("converge dev exited %d before its demo converged", c)
		case <-time.After(50 * time.Millisecond): // polling toward the deadline
		}
		if time.Now().After(deadline) {
			t.Fatal("the demo did not converge within three minutes")
		}
	}
	api := regexp.MustCompile(`(?m)^  API: +(http://\S+)/api/v1$`).FindStringSubmatch(r.out.String())
	if api == nil {
		t.Fatalf("converge dev printed no API address")
	}
	r.base = api[1]
	return r
}

// hints are the commands the demo printed under "try next:", without
// their comments.
func (r *demoRun) hints(t *testing.T) []string {
	t.Helper()
	_, rest, ok := strings.Cut(r.out.String(), "\ntry next:\n")
	if !ok {
		t.Fatal("the demo printed no \"try next:\"")
	}
	var cmds []string
	for _, l := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		cmd, _, _ := strings.Cut(l, "  # ")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	if len(cmds) == 0 {
		t.Fatal("the demo printed no hints")
	}
	return cmds
}

// conctl runs conctl's command line with args against the demo, as the
// binary would, and returns what it printed and its exit status.
func (r *demoRun) conctl(ctx context.Context, stdin string, args ...string) (stdout, stderr string, code int) {
	var out, errs bytes.Buffer
	code = conctl.Run(ctx, args, strings.NewReader(stdin), &out, &errs, func(k string) string {
		if k == "CONVERGE_SERVER" {
			return r.base
		}
		return ""
	})
	return out.String(), errs.String(), code
}

// runHint runs one printed hint: a conctl command line, or a curl -X POST
// of a URL (posted here as curl would). A watch with --follow runs until
// Ctrl+C: it is given a few seconds to draw its view.
func (r *demoRun) runHint(t *testing.T, hint string) string {
	t.Helper()
	args := strings.Fields(hint)
	if len(args) == 4 && args[0] == "curl" && args[1] == "-X" && args[2] == "POST" {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, args[3], nil)
		if err != nil {
			t.Fatalf("hint %q: %v", hint, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("hint %q: %v", hint, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("hint %q: %s %s", hint, resp.Status, body)
		}
		return string(body)
	}
	if filepath.Base(args[0]) != "conctl" {
		t.Fatalf("hint %q: want a conctl command (a make hint is printed only beside the Makefile)", hint)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	follow := strings.Contains(hint, " --follow")
	if follow {
		ctx, cancel = context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
	}
	out, errs, code := r.conctl(ctx, "", args[1:]...)
	stopped := follow && ctx.Err() != nil // Ctrl+C, as a person ends it
	if code != 0 && !stopped {
		t.Errorf("hint %q exited %d:\n%s%s", hint, code, out, errs)
	}
	return out
}

// TestDemoQuickstart runs `converge dev --demo=quickstart` as `make
// demo-quickstart` does: the terminal shows what the demo does and the
// live view, never a log line (they go to converge.log, whose tail is
// shown on exit), and every command it says to try next works as printed.
func TestDemoQuickstart(t *testing.T) {
	t.Parallel()
	r := startDemo(t, "--demo=quickstart")
	out := r.out.String()
	// stdout and stderr share the terminal.
	if logged := regexp.MustCompile(`(?m)^.*(level=|"level":).*$`).FindAllString(out+r.errs.String(), -1); logged != nil {
		t.Errorf("the terminal shows log lines:\n%s", strings.Join(logged, "\n"))
	}
	logPath := filepath.Join(r.dataDir, "converge.log")
	if !strings.Contains(out, "logs: "+logPath+" ") {
		t.Errorf("the demo does not say where its log is (%s)", logPath)
	}
	if b, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(b), `msg="serving the API"`) {
		t.Errorf("%s holds no \"serving the API\" line: %v\n%s", logPath, err, b)
	}
	if !regexp.MustCompile(`(?m)^site/shop converged in \d+\.\ds: it and its 4 children are Ready$`).MatchString(out) {
		t.Error(`the demo does not say "site/shop converged in ...: it and its 4 children are Ready"`)
	}
	hints := r.hints(t)
	if want := "conctl --server " + r.base + " get resource site/shop"; hints[0] != want {
		t.Errorf("first hint %q, want %q", hints[0], want)
	}
	for _, h := range hints {
		r.runHint(t, h)
	}
	if code := r.stop(); code != 0 {
		t.Errorf("converge dev exited %d after Ctrl+C, want 0", code)
	}
	if !regexp.MustCompile(`\nthe last \d+ lines of ` + regexp.QuoteMeta(logPath) + `:\n.*level=INFO`).MatchString(r.out.String()) {
		t.Errorf("on exit the demo does not show its log's last lines:\n%s", r.out)
	}
}

// TestDemoClassicUpdated runs `make demo BOM=updated`: the small BOM
// converges, then the updated one is applied onto it, and the demo lists
// the team it removed and the one it added. Every hint works as printed.
func TestDemoClassicUpdated(t *testing.T) {
	t.Parallel()
	r := startDemo(t, "--demo=classic", "--bom=updated")
	out := r.out.String()
	for _, want := range []string{
		"\nnext, the updated BOM, applied onto the small one (classic-provider objects --bom updated)\n",
		"\n  removed: account/classic-payments-fraud, route/classic-payments-fraud, vpc/classic-payments-fraud\n" +
			"  added:   account/classic-payments-refunds, route/classic-payments-refunds, vpc/classic-payments-refunds\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo did not print %q", want)
		}
	}
	if n := strings.Count(out, "classicbom/classic converged in "); n != 2 {
		t.Errorf("the root converged %d times, want 2 (the small BOM, then the updated one)", n)
	}
	for _, h := range r.hints(t) {
		shown := r.runHint(t, h)
		if strings.Contains(h, " watch ") && !strings.Contains(shown, "classicbom/classic Ready") {
			t.Errorf("hint %q showed %q, want the root Ready", h, shown)
		}
	}
}

// TestDemoUnhealthy runs `make demo-unhealthy`: the quickstart site with
// its cdn kind reporting not ready. The cdn parks, the demo showing the
// reason the API gives, while the buckets converge; once the demo switches
// cdn ready the site converges. The hints switch it unready and ready again
// and each works as printed.
func TestDemoUnhealthy(t *testing.T) {
	t.Parallel()
	r := startDemo(t, "--demo=unhealthy", "--ready-after=1s")
	out := r.out.String()
	parked := "\ncdn reports not ready, so its resources park while the rest converges:\n" +
		"  cdn/shop-cdn parked: no ready endpoint for cdn/1: endpoint unhealthy: it reports cdn/1 not ready\n" +
		"  Ready: bucket/shop-bucket-0, bucket/shop-bucket-1, bucket/shop-bucket-2\n" +
		"making cdn ready in 1s (curl -X POST http://127.0.0.1:"
	converged := regexp.MustCompile(`\ncdn reports ready: its parked resources run \(from the next health probe\)\n(?s:.*)\nsite/shop converged in \d+\.\ds: it and its 4 children are Ready\n`)
	if i := strings.Index(out, parked); i < 0 {
		t.Errorf("the demo did not show the cdn parked with its reason, the buckets Ready:\nwant %q", parked)
	} else if !converged.MatchString(out[i:]) {
		t.Error("after the cdn parked the demo did not make it ready and converge the site")
	}
	hints := r.hints(t)
	if want := "curl -X POST http://127.0.0.1:"; !strings.HasPrefix(hints[0], want) || !strings.HasSuffix(hints[0], "/unready/cdn") {
		t.Errorf("first hint %q, want %s…/unready/cdn", hints[0], want)
	}
	for _, h := range hints {
		shown := r.runHint(t, h)
		if strings.Contains(h, " watch ") && !strings.Contains(shown, "site/shop Ready") {
			t.Errorf("hint %q showed %q, want the root Ready", h, shown)
		}
	}
}

// TestDemoDatadriven runs `make demo-datadriven`: stdprovider serves the std
// kinds, a stdcel root fans out into a stdterraform network (a real
// terraform apply), a stdstarlark composer of stdshell services wired to the
// network's id and a stdterraform cache; all converge. The updated spec then
// prunes a service and the cache and adds a service and the dns leaf. The
// value flow from Terraform's output reached a Starlark-composed leaf, and
// every hint works as printed (the last deletes the tree: terraform destroy).
func TestDemoDatadriven(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skipf("no terraform binary in PATH (%v): the demo's stdterraform resources run a real one", err)
	}
	r := startDemo(t, "--demo=datadriven")
	out := r.out.String()
	first := regexp.MustCompile(`(?m)^stdcel/shop converged in \d+\.\ds: it and its 6 children are Ready$`)
	if !first.MatchString(out) {
		t.Error(`the demo did not print "stdcel/shop converged in ...: it and its 6 children are Ready"`)
	}
	for _, want := range []string{
		"\nnext, the updated spec: a service and the cache out, a service and the dns leaf in (datadriven-demo objects --dir " +
			filepath.Join(r.dataDir, "datadriven") + " --s3 http://127.0.0.1:",
		"\n  removed: stdshell/shop-worker, stdterraform/shop-cache\n  added:   stdshell/shop-billing, stdshell/shop-dns\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo did not print %q", want)
		}
	}
	if n := strings.Count(out, "stdcel/shop converged in "); n != 2 {
		t.Errorf("the root converged %d times, want 2 (its spec, then the updated one)", n)
	}
	// The network's id came out of terraform and flowed, through the stdcel
	// graph and the Starlark program, into a leaf's script.
	net, _, code := r.conctl(t.Context(), "", "get", "resource", "stdterraform/shop-network", "-o", "json")
	id := regexp.MustCompile(`"network_id": *"(net-[0-9a-f]{8})"`).FindStringSubmatch(net)
	if code != 0 || id == nil {
		t.Fatalf("stdterraform/shop-network has no network_id output (exit %d):\n%s", code, net)
	}
	api, _, _ := r.conctl(t.Context(), "", "get", "resource", "stdshell/shop-billing", "-o", "json")
	if want := "billing is up on " + id[1]; !strings.Contains(api, want) {
		t.Errorf("stdshell/shop-billing's output lacks %q:\n%s", want, api)
	}
	// The states are in the demo's embedded S3 store, no lock left behind:
	// the network's, holding its terraform_data; the pruned cache's went
	// with its destroy.
	store := regexp.MustCompile(`(?m)^S3 store on (http://\S+), bucket (\S+)$`).FindStringSubmatch(out)
	if store == nil {
		t.Fatal("the demo did not say where its S3 store is")
	}
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, store[1]+"/"+store[2]+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// states are the names of the resources the stored states hold.
	states := func() (n int, names []string) {
		t.Helper()
		for _, m := range regexp.MustCompile(`<Key>([^<]+)</Key>`).FindAllStringSubmatch(get("?list-type=2&prefix=datadriven/"), -1) {
			if !strings.HasSuffix(m[1], "/terraform.tfstate") {
				t.Errorf("the S3 store holds %s, not a state", m[1])
				continue
			}
			n++
			var st struct{ Resources []struct{ Name string } }
			if err := json.Unmarshal([]byte(get("/"+m[1])), &st); err != nil {
				t.Fatalf("%s: %v", m[1], err)
			}
			for _, r := range st.Resources {
				names = append(names, r.Name)
			}
		}
		return n, names
	}
	if n, names := states(); n != 1 || !slices.Equal(names, []string{"network"}) {
		t.Errorf("the S3 store holds %d states of %q, want the network's alone, of [network]", n, names)
	}
	for _, h := range r.hints(t) {
		r.runHint(t, h)
	}
	if _, _, code := r.conctl(t.Context(), "", "wait", "resource", "stdcel/shop", "--for=deleted", "--timeout", "2m"); code != 0 {
		t.Errorf("stdcel/shop was not deleted after the delete hint (exit %d)", code)
	}
	if n, names := states(); n != 0 {
		t.Errorf("after the delete the S3 store holds %d states of %q, want none (terraform destroy ran, its workspace went)", n, names)
	}
}
