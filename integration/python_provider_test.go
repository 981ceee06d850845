package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonProviderConverges runs examples/python-provider — the quickstart's bucket
// and cdn and the classic vpc, written on the Python SDK (sdk/python) — as a real
// process behind the API: resources converge with the status the Python code computes
// (one through the asynchronous path: 202, heartbeats, callback), a spec it refuses pins
// Failed, an operator verb returns the provider's output, and a DELETE tears resources
// down through their finalizers.
func TestPythonProviderConverges(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is missing: the Python provider needs Debian's python3 (apt-get install python3): %v", python, err)
	}
	t.Parallel()
	root, err := filepath.Abs("..")
	must(t, err)

	s := startAll(t)
	for _, m := range []struct{ kind, file string }{
		{"bucket", "examples/quickstart/manifests/bucket.json"},
		{"cdn", "examples/quickstart/manifests/cdn.json"},
		{"vpc", "examples/classic/testfixtures/vpc.kind.json"},
	} {
		manifest, err := os.ReadFile(filepath.Join(root, m.file))
		must(t, err)
		if code, body := s.call("PUT", "/kinds/"+m.kind+"/manifest", json.RawMessage(manifest)); code != 201 && code != 200 {
			t.Fatalf("manifest %s = %d %s", m.kind, code, body)
		}
	}

	cmd := exec.Command(python, "provider.py")
	cmd.Dir = filepath.Join(root, "examples", "python-provider")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + filepath.Join(root, "sdk", "python"),
		"PYTHONDONTWRITEBYTECODE=1", "SYNC_BUDGET_MS=500", "PROVIDER_LOG_LEVEL=DEBUG"}
	_, output := s.startProviderProcess("python", cmd, []map[string]any{
		{"kind": "bucket", "kind_version": 1}, {"kind": "cdn", "kind_version": 1}, {"kind": "vpc", "kind_version": 1}})

	apply := func(kind, name string, labels map[string]string, spec map[string]any) {
		t.Helper()
		r := map[string]any{"kind": kind, "kind_version": 1, "name": name, "spec": spec}
		if labels != nil {
			r["labels"] = labels
		}
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s/%s = %d %s", kind, name, code, body)
		}
	}
	apply("bucket", "assets", nil, map[string]any{"region": "eu-west-1"})
	// Slower than the provider's sync budget: answered 202, completed by callback.
	apply("bucket", "slow", map[string]string{"python-provider.converge.dev/work-delay-ms": "1500"},
		map[string]any{"region": "us-east-1"})
	apply("cdn", "front", nil, map[string]any{"origin": "bkt-assets", "ttl_secs": 60})
	// No origin: the Python code fails it terminally.
	apply("cdn", "broken", nil, map[string]any{})
	apply("vpc", "team-blue", nil, map[string]any{"account_id": "123456789012", "cidr": "10.0.0.0/16"})

	for path, want := range map[string]map[string]any{
		"bucket/assets": {"bucket_id": "bkt-assets", "region": "eu-west-1"},
		"bucket/slow":   {"bucket_id": "bkt-slow", "region": "us-east-1"},
		"cdn/front":     {"distribution_id": "dist-front", "origin": "bkt-assets", "ttl_secs": float64(60)},
		"vpc/team-blue": {"flow_logs": false},
	} {
		s.waitReady(path)
		d, _ := s.detail(path)
		var got map[string]any
		if err := json.Unmarshal(d.Status, &got); err != nil {
			t.Fatalf("%s status %s: %v", path, d.Status, err)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s status.%s = %v, want %v (status %s)", path, k, got[k], v, d.Status)
			}
		}
	}

	s.waitFailed("cdn/broken", "spec.origin is empty")

	// An operator verb: the op succeeds with the provider's output, and its status applies.
	code, body := s.call("POST", "/resources/vpc/team-blue/ops", map[string]any{"verb": "enable_flow_logs", "input": map[string]any{"retention_days": 7}})
	var op opView
	if code != 202 || json.Unmarshal(body, &op) != nil || op.ID == "" {
		t.Fatalf("invoke enable_flow_logs = %d %s", code, body)
	}
	waitFor(t, 30*time.Second, "op succeeded", func() bool {
		_, body := s.call("GET", "/resources/vpc/team-blue/ops/"+op.ID, nil)
		return json.Unmarshal(body, &op) == nil && op.State == "succeeded"
	})
	var out struct {
		VPCID string         `json:"vpc_id"`
		Input map[string]any `json:"input"`
	}
	if err := json.Unmarshal(op.Output, &out); err != nil || !strings.HasPrefix(out.VPCID, "vpc-") || out.Input["retention_days"] != float64(7) {
		t.Errorf("op output = %s (%v), want the vpc id and the input echoed", op.Output, err)
	}
	waitFor(t, 30*time.Second, "vpc flow_logs status", func() bool {
		d, _ := s.detail("vpc/team-blue")
		return strings.Contains(string(d.Status), `"flow_logs":true`)
	})

	// DELETE goes through each kind's teardown reaction (its finalizer), then the resource goes.
	for _, path := range []string{"bucket/assets", "cdn/front", "vpc/team-blue"} {
		if code, body := s.call("DELETE", "/resources/"+path, nil); code != 202 && code != 200 && code != 204 {
			t.Fatalf("DELETE %s = %d %s", path, code, body)
		}
	}
	s.waitGone("bucket/assets", "cdn/front", "vpc/team-blue")
	for _, want := range []string{"teardown bucket/assets", "teardown cdn/front", "teardown vpc/team-blue"} {
		if !strings.Contains(output.String(), want) {
			t.Errorf("the python provider logged no %q", want)
		}
	}
	if !strings.Contains(output.String(), "callback delivered") {
		t.Errorf("bucket/slow did not go through the callback")
	}
	if code, _ := s.call("GET", "/resources/bucket/assets", nil); code != 404 {
		t.Errorf("GET bucket/assets after delete = %d, want 404", code)
	}
	s.checkInvariants()
}
