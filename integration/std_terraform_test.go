package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/providers/stdterraform"
)

// TestStdTerraform serves the stdterraform provider over real HTTP and drives it through
// the REST API with its shipped manifest: a resource converges with the module's outputs
// in its status; applying the same spec again, and reconciling it (terraform runs, plans
// no changes), changes neither its generation nor its status nor its state; DELETE runs
// terraform destroy and removes the resource. A bad spec or config is refused naming its
// field, and a source that does not exist fails terminally naming spec.source.
func TestStdTerraform(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skipf("no terraform binary in PATH (%v): stdterraform runs a real one", err)
	}
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/stdterraform/manifest", json.RawMessage(stdterraform.Manifest())); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	s.serveProvider("stdterraform", stdterraform.New("stdterraform"))

	states := t.TempDir()
	if code, body := s.call("POST", "/providerconfigs", map[string]any{"name": "stdterraform-default", "kind": "stdterraform",
		"kind_version": 1, "is_default": true, "spec": map[string]any{"state_dir": "relative/state"}}); code != 400 || !strings.Contains(string(body), "state_dir") {
		t.Errorf("a relative state_dir = %d %s, want a problem naming state_dir", code, body)
	}
	if code, body := s.call("POST", "/providerconfigs", map[string]any{"name": "stdterraform-default", "kind": "stdterraform",
		"kind_version": 1, "is_default": true, "spec": map[string]any{"state_dir": states}}); code != 201 {
		t.Fatalf("providerconfig = %d %s", code, body)
	}

	source, err := filepath.Abs("../providers/stdterraform/testdata/hello")
	must(t, err)
	marker := filepath.Join(t.TempDir(), "destroyed")
	res := map[string]any{"kind": "stdterraform", "kind_version": 1, "name": "hello",
		"spec": map[string]any{"source": source, "vars": map[string]any{"name": "converge", "marker": marker}}}
	if code, body := s.call("POST", "/resources", res); code != 201 {
		t.Fatalf("apply = %d %s", code, body)
	}
	waitFor(t, 60*time.Second, "stdterraform/hello Ready", func() bool {
		d, _ := s.detail("stdterraform/hello")
		return d.PhaseOf() == model.PhaseReady
	})
	d, _ := s.detail("stdterraform/hello")
	var st struct {
		Outputs map[string]any `json:"outputs"`
	}
	if json.Unmarshal(d.Status, &st) != nil || st.Outputs["greeting"] != "hello converge" || st.Outputs["id"] == nil {
		t.Fatalf("status = %s, want the module's outputs", d.Status)
	}
	state := filepath.Join(states, d.ID, "terraform.tfstate")
	before, err := os.ReadFile(state)
	must(t, err)

	// The same spec again is unchanged; a reconcile runs terraform, which plans no
	// changes.
	if code, body := s.call("POST", "/resources", res); code != 200 {
		t.Errorf("re-apply = %d %s, want 200 unchanged", code, body)
	}
	if code, body := s.call("POST", "/resources/stdterraform/hello/reconcile", nil); code != 202 {
		t.Fatalf("reconcile = %d %s", code, body)
	}
	waitFor(t, 60*time.Second, "the reconcile to succeed", func() bool {
		again, _ := s.detail("stdterraform/hello")
		return again.LastTask != nil && d.LastTask != nil && again.LastTask.TaskID != d.LastTask.TaskID
	})
	again, _ := s.detail("stdterraform/hello")
	if again.Generation != d.Generation || string(again.Status) != string(d.Status) || again.PhaseOf() != model.PhaseReady {
		t.Errorf("after re-apply: generation %d status %s phase %s, want %d %s Ready",
			again.Generation, again.Status, again.Phase, d.Generation, d.Status)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Error("a re-apply with no changes rewrote the state")
	}

	// DELETE: terraform destroy runs, then the resource is gone.
	if code, body := s.call("DELETE", "/resources/stdterraform/hello", nil); code != 202 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	s.waitGone("stdterraform/hello")
	if data, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(data)) != "destroyed" {
		t.Errorf("destroy-time provisioner: %q, %v", data, err)
	}
	var left struct {
		Resources []json.RawMessage `json:"resources"`
	}
	data, err := os.ReadFile(state)
	must(t, err)
	if json.Unmarshal(data, &left) != nil || len(left.Resources) != 0 {
		t.Errorf("state after destroy holds %d resources", len(left.Resources))
	}

	// A bad spec: refused at apply naming the field, or failed terminally naming it.
	for field, spec := range map[string]map[string]any{"/spec/source": {"source": "modules/hello"}, "module": {"module": source}} {
		code, body := s.call("POST", "/resources", map[string]any{"kind": "stdterraform", "kind_version": 1, "name": "bad", "spec": spec})
		if code != 400 || !strings.Contains(string(body), field) {
			t.Errorf("spec %v = %d %s, want a problem naming %s", spec, code, body, field)
		}
	}
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "stdterraform", "kind_version": 1, "name": "missing",
		"spec": map[string]any{"source": "/no/such/module"}}); code != 201 {
		t.Fatalf("apply missing = %d %s", code, body)
	}
	waitFor(t, 60*time.Second, "stdterraform/missing Failed terminally", func() bool {
		d, _ := s.detail("stdterraform/missing")
		return d.PhaseOf() == model.PhaseFailed && d.Task == nil && strings.Contains(d.LastError, "spec.source")
	})
	s.checkInvariants()
}
