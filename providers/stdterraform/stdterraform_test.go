package stdterraform

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

const resourceID = "0b7c3c1e-6a4f-4d7e-9a57-3f1c2d9e8b10"

// needTerraform skips the test where no terraform binary exists.
func needTerraform(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skipf("no terraform binary in PATH (%v): the stdterraform tests run a real one", err)
	}
}

// module is the absolute path of a testdata module.
func module(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// request is a task of reaction on the test resource with spec, its state under stateDir.
func request(t *testing.T, reaction, stateDir string, spec any) webhooksdk.Request {
	t.Helper()
	env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "stdterraform", Version: 1})
	req := webhooksdk.NewRequest(&env)
	req.Reaction = reaction
	if reaction == reactionDestroy {
		req.TaskType, req.Trigger = webhooksdk.TaskDelete, webhooksdk.TriggerDeleteRequested
	}
	req.Resource.ID = resourceID
	var err error
	if req.Resource.Spec, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if req.Config, err = json.Marshal(map[string]string{"state_dir": stateDir}); err != nil {
		t.Fatal(err)
	}
	return req
}

// stateResources counts the resources in a state file.
func stateResources(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Resources []json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("state %s: %v", path, err)
	}
	return len(st.Resources)
}

func condition(out webhooksdk.Outcome, typ string) webhooksdk.Condition {
	for _, c := range out.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return webhooksdk.Condition{}
}

// TestApplyReapplyDestroy applies a module (outputs in status, sensitive ones left out),
// re-applies it unchanged (no changes, same status, untouched state), applies a variable
// change, and destroys it (the state empty, the destroy-time provisioner run; a repeat
// and a never-applied resource succeed).
func TestApplyReapplyDestroy(t *testing.T) {
	needTerraform(t)
	states := t.TempDir()
	marker := filepath.Join(t.TempDir(), "destroyed")
	p := New("stdterraform")
	spec := map[string]any{"source": module(t, "hello"), "vars": map[string]any{"name": "world", "marker": marker}}
	state := filepath.Join(states, resourceID, stateFile)

	out, err := sdktest.Run(t, p, request(t, reactionApply, states, spec))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	var st struct {
		Outputs map[string]any `json:"outputs"`
	}
	if err := json.Unmarshal(out.Status, &st); err != nil || st.Outputs["greeting"] != "hello world" || st.Outputs["id"] == nil {
		t.Fatalf("status = %s (%v), want greeting and id outputs", out.Status, err)
	}
	if _, ok := st.Outputs["secret"]; ok {
		t.Errorf("status carries a sensitive output: %s", out.Status)
	}
	if c := condition(out, "Ready"); c.Reason != "Applied" || !strings.Contains(c.Message, "Apply complete! Resources: 2 added") {
		t.Errorf("Ready = %+v, want the apply's output", c)
	}
	if c := condition(out, "Planned"); c.Reason != "Changes" || !strings.Contains(c.Message, "Plan: 2 to add") {
		t.Errorf("Planned = %+v, want the plan's output", c)
	}
	if n := stateResources(t, state); n != 2 {
		t.Fatalf("state holds %d resources, want 2", n)
	}
	before, _ := os.ReadFile(state)

	again, err := sdktest.Run(t, p, request(t, reactionApply, states, spec))
	if err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	if string(again.Status) != string(out.Status) {
		t.Errorf("re-apply status = %s, want %s", again.Status, out.Status)
	}
	if c := condition(again, "Planned"); c.Reason != "NoChanges" || !strings.Contains(c.Message, "No changes") {
		t.Errorf("re-apply Planned = %+v, want no changes", c)
	}
	if c := condition(again, "Ready"); c.Reason != "UpToDate" {
		t.Errorf("re-apply Ready = %+v, want UpToDate", c)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Error("a re-apply with no changes rewrote the state")
	}

	spec["vars"] = map[string]any{"name": "again", "marker": marker}
	changed, err := sdktest.Run(t, p, request(t, reactionApply, states, spec))
	if err != nil || !strings.Contains(string(changed.Status), `"hello again"`) {
		t.Fatalf("changed apply = %s, %v", changed.Status, err)
	}

	if _, err := sdktest.Run(t, p, request(t, reactionDestroy, states, spec)); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if n := stateResources(t, state); n != 0 {
		t.Errorf("state holds %d resources after destroy", n)
	}
	if data, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(data)) != "destroyed" {
		t.Errorf("destroy-time provisioner: %q, %v", data, err)
	}
	entries, _ := os.ReadDir(filepath.Join(states, resourceID))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "run-") {
			t.Errorf("run directory %s left behind", e.Name())
		}
	}
	if _, err := sdktest.Run(t, p, request(t, reactionDestroy, states, spec)); err != nil {
		t.Errorf("second destroy: %v", err)
	}
	if _, err := sdktest.Run(t, p, request(t, reactionDestroy, t.TempDir(), map[string]any{"source": "nowhere"})); err != nil {
		t.Errorf("destroy of a resource never applied: %v", err)
	}
}

// TestFailures: a module terraform cannot parse and a bad spec or config are terminal
// and name the cause; a module that fails at plan is transient; both carry terraform's
// output.
func TestFailures(t *testing.T) {
	needTerraform(t)
	p := New("stdterraform")
	for _, tc := range []struct {
		name     string
		req      webhooksdk.Request
		terminal bool
		want     string
	}{
		{"unparsable module", request(t, reactionApply, t.TempDir(), map[string]any{"source": module(t, "broken")}), true, "Invalid expression"},
		{"failing precondition", request(t, reactionApply, t.TempDir(), map[string]any{"source": module(t, "failing")}), false, "n must be positive."},
		{"missing variable", request(t, reactionApply, t.TempDir(), map[string]any{"source": module(t, "hello")}), false, `No value for required variable`},
		{"relative source", request(t, reactionApply, t.TempDir(), map[string]any{"source": "modules/hello"}), true, "spec.source"},
		{"missing source", request(t, reactionApply, t.TempDir(), map[string]any{"source": "/no/such/module"}), true, "spec.source"},
		{"relative state_dir", request(t, reactionApply, "state", map[string]any{"source": module(t, "hello")}), true, "config.state_dir"},
		{"unknown reaction", request(t, "resync", t.TempDir(), map[string]any{"source": module(t, "hello")}), true, "unknown reaction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sdktest.Run(t, p, tc.req)
			if err == nil {
				t.Fatal("no error")
			}
			if webhooksdk.IsTerminal(err) != tc.terminal || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error (terminal %v) = %v; want terminal %v mentioning %q", webhooksdk.IsTerminal(err), err, tc.terminal, tc.want)
			}
			if len(err.Error()) > 2*tailBytes {
				t.Errorf("error is %d bytes, want the output bounded", len(err.Error()))
			}
		})
	}
}

// TestConcurrentApplies holds one state with a slow apply: a second apply in the same
// process is refused at once, one from another provider (terraform's own lock) too, both
// transiently; at the deadline the first stops and its provisioner's program is killed.
func TestConcurrentApplies(t *testing.T) {
	needTerraform(t)
	states := t.TempDir()
	pidfile := filepath.Join(t.TempDir(), "pid")
	spec := map[string]any{"source": module(t, "slow"), "vars": map[string]any{"pidfile": pidfile}}
	p := New("stdterraform", WithGrace(time.Second))

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	first := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := p.Work(ctx, request(t, reactionApply, states, spec))
		first <- err
	}()
	var pid int
	deadline := time.Now().Add(6 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		data, _ := os.ReadFile(pidfile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		time.Sleep(50 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatalf("the slow apply never started: %v", <-first)
	}

	_, err := sdktest.Run(t, p, request(t, reactionApply, states, spec))
	if !errors.Is(err, errBusy) || webhooksdk.IsTerminal(err) {
		t.Errorf("second apply in process = %v, want a transient %q", err, errBusy)
	}
	_, err = sdktest.Run(t, New("stdterraform"), request(t, reactionApply, states, spec))
	if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "Error acquiring the state lock") {
		t.Errorf("apply from another provider = %v, want terraform's state lock refusal", err)
	}

	select {
	case err := <-first:
		if err == nil || !strings.Contains(err.Error(), "task deadline") {
			t.Errorf("first apply = %v, want stopped at the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first apply outlived its deadline by 22s")
	}
	t.Logf("the first apply stopped after %v", time.Since(start))
	// SIGKILL is delivered asynchronously: on a loaded machine the program
	// may still be seen running for a moment after Work returned.
	for gone := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(gone) {
			t.Errorf("the provisioner's program (pid %d) survived the deadline by 5s", pid)
			break
		}
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || !strings.HasPrefix(string(data[i:]), ") Z")
}

// TestManifest checks the shipped manifest names this provider's reactions and the
// destroy's finalizer.
func TestManifest(t *testing.T) {
	var m struct {
		Kind        string `json:"kind"`
		KindVersion int    `json:"kind_version"`
		Reactions   []struct {
			Name      string   `json:"name"`
			Trigger   string   `json:"trigger"`
			Emits     []string `json:"emits"`
			Finalizer string   `json:"finalizer"`
		} `json:"reactions"`
		Deadline int `json:"task_deadline_secs"`
	}
	if err := json.Unmarshal(Manifest(), &m); err != nil {
		t.Fatal(err)
	}
	if kv := New(m.Kind).Kind(); kv.Kind != "stdterraform" || kv.Version != m.KindVersion || m.Deadline <= 0 {
		t.Errorf("manifest %s/v%d (deadline %d), provider %s", m.Kind, m.KindVersion, m.Deadline, kv)
	}
	got := map[string]string{}
	for _, r := range m.Reactions {
		got[r.Trigger] = r.Name
		if r.Trigger == "deleteRequested" && (r.Finalizer == "" || !slices.Equal(r.Emits, []string{"finalizer"})) {
			t.Errorf("destroy reaction %+v, want a finalizer", r)
		}
	}
	if got["specChange"] != reactionApply || got["deleteRequested"] != reactionDestroy || len(got) != 2 {
		t.Errorf("reactions = %v", got)
	}
}
