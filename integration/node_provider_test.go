package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
)

// TestNodeProviderConverges runs examples/node-provider — the classic account kind v1
// written in Node from docs/protocol.md alone — as a real process behind the API: its
// resources converge with the status the Node code computes (one of them through the
// asynchronous path: 202, heartbeats, callback), a spec it refuses pins Failed, and a
// DELETE tears one down through its teardown reaction.
func TestNodeProviderConverges(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the Node provider example needs Node.js 20+ (and npm to install its packages)")
	}
	t.Parallel()
	dir, err := filepath.Abs(filepath.Join("..", "examples", "node-provider"))
	must(t, err)
	npmCI(t, dir)

	s := startAll(t)
	manifest, err := os.ReadFile(filepath.Join(dir, "account.kind.json"))
	must(t, err)
	if code, body := s.call("PUT", "/kinds/account/manifest", json.RawMessage(manifest)); code != 201 && code != 200 {
		t.Fatalf("manifest = %d %s", code, body)
	}

	cmd := exec.Command(node, "provider.mjs")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SYNC_BUDGET_MS=500"}
	_, output := s.startProviderProcess("node", cmd, []map[string]any{{"kind": "account", "kind_version": 1}})

	apply := func(name string, labels map[string]string, spec map[string]any) {
		t.Helper()
		r := map[string]any{"kind": "account", "kind_version": 1, "name": name, "spec": spec}
		if labels != nil {
			r["labels"] = labels
		}
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s = %d %s", name, code, body)
		}
	}
	apply("team-blue", nil, map[string]any{"team": "blue", "domain": "payments"})
	apply("team-red", nil, map[string]any{"team": "red"})
	// Slower than the provider's sync budget: answered 202, completed by callback.
	apply("team-slow", map[string]string{"node-provider.converge.dev/work-delay-ms": "1500"}, map[string]any{"team": "slow"})
	// Not a DNS label: the Node code fails it terminally.
	apply("team-bad", nil, map[string]any{"team": "Not A Label"})

	want := func(name string) string {
		sum := sha256.Sum256([]byte(name))
		return "acct-" + hex.EncodeToString(sum[:])[:12]
	}
	for name, st := range map[string]map[string]string{
		"team-blue": {"team": "blue", "domain": "payments"},
		"team-red":  {"team": "red"},
		"team-slow": {"team": "slow"},
	} {
		s.waitReady("account/" + name)
		d, _ := s.detail("account/" + name)
		var got map[string]string
		if err := json.Unmarshal(d.Status, &got); err != nil {
			t.Fatalf("%s status %s: %v", name, d.Status, err)
		}
		st["account_id"] = want(name)
		if len(got) != len(st) {
			t.Errorf("%s status = %v, want %v", name, got, st)
		}
		for k, v := range st {
			if got[k] != v {
				t.Errorf("%s status.%s = %q, want %q (status %s)", name, k, got[k], v, d.Status)
			}
		}
	}

	waitFor(t, 30*time.Second, "team-bad Failed", func() bool {
		d, ok := s.detail("account/team-bad")
		return ok && d.PhaseOf() == model.PhaseFailed
	})
	if _, body := s.call("GET", "/resources/account/team-bad", nil); !strings.Contains(string(body), "not a DNS label") {
		t.Errorf("team-bad detail lacks the Node provider's message: %s", body)
	}

	// DELETE goes through the teardown reaction (the finalizer) and the resource goes.
	if code, body := s.call("DELETE", "/resources/account/team-red", nil); code != 202 && code != 200 && code != 204 {
		t.Fatalf("DELETE team-red = %d %s", code, body)
	}
	s.waitGone("account/team-red")
	if !strings.Contains(output.String(), `"msg":"teardown","name":"team-red"`) {
		t.Errorf("the node provider logged no teardown of team-red")
	}
	if !strings.Contains(output.String(), `"msg":"callback delivered"`) {
		t.Errorf("team-slow did not go through the callback")
	}
	if code, _ := s.call("GET", "/resources/account/team-red", nil); code != 404 {
		t.Errorf("GET team-red after delete = %d, want 404", code)
	}
	s.checkInvariants()
}

// npmCI installs a Node package's locked dependencies (npm ci) unless they are there.
func npmCI(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks", "package.json")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("%s/node_modules is missing and npm is not on PATH: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}
