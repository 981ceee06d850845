package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/nodetest"
	"github.com/convergeplane/converge/sdk/typescript/sdkbuild"
)

// TestNodeProviderConverges runs examples/node-provider — the classic account and
// vpc kinds v1 on the TypeScript SDK (sdk/typescript) — as a real process behind the
// API: its resources converge with the status the Node code computes (one of them
// through the asynchronous path: 202, heartbeats, callback), a spec it refuses pins
// Failed, an operator verb runs with the effective provider config and returns its
// output, and a DELETE tears one down through its teardown reaction (the finalizer).
func TestNodeProviderConverges(t *testing.T) {
	sdkbuild.Ensure(t)
	node := nodetest.LookPath(t, "node")
	t.Parallel()
	dir, err := filepath.Abs(filepath.Join("..", "examples", "node-provider"))
	must(t, err)
	nodetest.NPMCI(t, dir)
	// The example's own tests first: its kinds over HTTP, without the server.
	nodetest.Run(t, 2*time.Minute, dir, node, "--test", "--test-timeout=60000", "provider.test.mjs")

	s := startAll(t)
	for _, kind := range []string{"account", "vpc"} {
		manifest, err := os.ReadFile(filepath.Join(dir, kind+".kind.json"))
		must(t, err)
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", json.RawMessage(manifest)); code != 201 && code != 200 {
			t.Fatalf("%s manifest = %d %s", kind, code, body)
		}
	}
	if code, body := s.call("POST", "/providerconfigs", map[string]any{"name": "vpc-v1-default", "kind": "vpc", "kind_version": 1,
		"is_default": true, "spec": map[string]any{"flow_logs_bucket": "s3://flow-logs"}}); code != 201 {
		t.Fatalf("provider config = %d %s", code, body)
	}

	cmd := exec.Command(node, "provider.mjs")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SYNC_BUDGET_MS=500"}
	_, output := s.startProviderProcess("node", cmd, []map[string]any{{"kind": "account", "kind_version": 1}, {"kind": "vpc", "kind_version": 1}})

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

	s.waitFailed("account/team-bad", "not a DNS label")

	// The operator verb: enable_flow_logs reads the default provider config.
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "vpc", "kind_version": 1, "name": "net-blue",
		"spec": map[string]any{"account_id": "123456789012", "cidr": "10.0.0.0/24"}}); code != 201 {
		t.Fatalf("apply net-blue = %d %s", code, body)
	}
	s.waitReady("vpc/net-blue")
	code, body := s.call("POST", "/resources/vpc/net-blue/ops", map[string]any{"verb": "enable_flow_logs", "input": map[string]any{}})
	var op struct {
		ID     string          `json:"id"`
		State  string          `json:"state"`
		Output json.RawMessage `json:"operation_output"`
	}
	if code != 202 || json.Unmarshal(body, &op) != nil || op.ID == "" {
		t.Fatalf("invoke enable_flow_logs = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "enable_flow_logs to succeed", func() bool {
		_, body := s.call("GET", "/resources/vpc/net-blue/ops/"+op.ID, nil)
		return json.Unmarshal(body, &op) == nil && op.State == "succeeded"
	})
	var out map[string]any
	if err := json.Unmarshal(op.Output, &out); err != nil || out["bucket"] != "s3://flow-logs" || out["flow_logs"] != true || out["operation_id"] != op.ID {
		t.Errorf("enable_flow_logs output = %s, want the config's bucket and the operation id %s", op.Output, op.ID)
	}

	// DELETE goes through the teardown reaction (the finalizer) and the resource goes.
	if code, body := s.call("DELETE", "/resources/account/team-red", nil); code != 202 && code != 200 && code != 204 {
		t.Fatalf("DELETE team-red = %d %s", code, body)
	}
	s.waitGone("account/team-red")
	if !strings.Contains(output.String(), `"msg":"teardown","kind":"account","name":"team-red"`) {
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
