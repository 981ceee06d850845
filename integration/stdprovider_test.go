package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
)

// startStdProvider builds cmd/stdprovider, applies the manifests it prints
// for env, and runs it with env as the endpoint "std" of those kinds. It
// returns the served kind names.
func (s *server) startStdProvider(env ...string) []string {
	t := s.t
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stdprovider")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/stdprovider").CombinedOutput(); err != nil {
		t.Fatalf("build stdprovider: %v\n%s", err, out)
	}
	env = append(env, "PATH="+os.Getenv("PATH"))

	mcmd := exec.Command(bin, "manifests")
	mcmd.Env = env
	manifests, err := mcmd.Output()
	must(t, err)
	var kinds []map[string]any
	for dec := json.NewDecoder(bytes.NewReader(manifests)); ; {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("stdprovider manifests: %v\n%s", err, manifests)
		}
		if code, body := s.call("PUT", "/kinds/"+m["kind"].(string)+"/manifest", m); code != 201 && code != 200 {
			t.Fatalf("manifest %s = %d %s", m["kind"], code, body)
		}
		kinds = append(kinds, map[string]any{"kind": m["kind"], "kind_version": m["kind_version"]})
	}

	cmd := exec.Command(bin)
	cmd.Env = env
	s.startProviderProcess("std", cmd, kinds)
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k["kind"].(string)
	}
	return names
}

// stdResource is the part of a resource detail these tests read.
type stdResource struct {
	Phase      string          `json:"phase"`
	Status     json.RawMessage `json:"status"`
	LastError  json.RawMessage `json:"last_error"`
	Conditions []struct {
		Type, Status, Reason string
	} `json:"conditions"`
	Task *struct {
		Attempts  int             `json:"attempts"`
		LastError json.RawMessage `json:"last_error"`
	} `json:"task"`
}

func (s *server) stdResource(kind, name string) (stdResource, string) {
	s.t.Helper()
	var r stdResource
	code, body := s.call("GET", "/resources/"+kind+"/"+name, nil)
	if code != 200 || json.Unmarshal(body, &r) != nil {
		return stdResource{}, string(body)
	}
	return r, string(body)
}

func (s *server) stdPost(path string, body any, want int) {
	s.t.Helper()
	if code, resp := s.call("POST", path, body); code != want {
		s.t.Fatalf("POST %s = %d %s, want %d", path, code, resp, want)
	}
}

func (s *server) waitStdReady(kind, name string) stdResource {
	s.t.Helper()
	var r stdResource
	var body string
	waitFor(s.t, 60*time.Second, kind+"/"+name+" Ready", func() bool {
		r, body = s.stdResource(kind, name)
		return r.Phase == "Ready"
	})
	s.t.Logf("%s/%s: %s", kind, name, body)
	return r
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "handler.sh")
	must(t, os.WriteFile(p, []byte(body), 0o755))
	return p
}

// jqHandler is a bash+jq stdio program serving both reactions: a leaf greets its spec's
// name, a composer fans spec.count leaves out.
const jqHandler = `#!/usr/bin/env bash
set -euo pipefail
req=$(cat)
case $(jq -r .reaction <<<"$req") in
work)
  jq -c '{status: {greeting: ("hello " + .resource.spec.name), region: .config.region},
          conditions: [{type: "Ready", status: "True", reason: "Greeted"}]}' <<<"$req" ;;
compose)
  jq -c '.resource as $r | {children: [range($r.spec.count) | {kind: "stdio", kind_version: 1,
          name: "\($r.name)-\(.)", spec: {name: "child \(.)"}}],
          status: {observed: (.observed // [] | length)}}' <<<"$req" ;;
*) echo "unknown reaction" >&2; exit 2 ;;
esac
`

func TestStdioLeafAndComposerWithJq(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed: the bash+jq stdio handler cannot run")
	}
	s := startAll(t)
	s.startStdProvider("STD_KINDS=stdio,stdio-composer")
	h := writeScript(t, jqHandler)
	s.stdPost("/providerconfigs", map[string]any{"name": "stdio-default", "kind": "stdio", "kind_version": 1, "is_default": true,
		"spec": map[string]any{"command": h, "settings": map[string]any{"region": "eu-west-1"}}}, 201)
	s.stdPost("/providerconfigs", map[string]any{"name": "stdio-composer-default", "kind": "stdio-composer", "kind_version": 1,
		"is_default": true, "spec": map[string]any{"command": h}}, 201)

	s.stdPost("/resources", map[string]any{"kind": "stdio", "kind_version": 1, "name": "solo", "spec": map[string]any{"name": "solo"}}, 201)
	r := s.waitStdReady("stdio", "solo")
	var st map[string]string
	if json.Unmarshal(r.Status, &st) != nil || st["greeting"] != "hello solo" || st["region"] != "eu-west-1" {
		t.Errorf("solo status = %s", r.Status)
	}

	s.stdPost("/resources", map[string]any{"kind": "stdio-composer", "kind_version": 1, "name": "bom", "spec": map[string]any{"count": 3}}, 201)
	s.waitStdReady("stdio-composer", "bom")
	for i := range 3 {
		r := s.waitStdReady("stdio", "bom-"+strconv.Itoa(i))
		var st map[string]string
		if json.Unmarshal(r.Status, &st) != nil || st["greeting"] != "hello child "+strconv.Itoa(i) {
			t.Errorf("bom-%d status = %s", i, r.Status)
		}
	}
	s.checkInvariants()
}

// failHandler fails as the resource's spec.mode says; it needs no jq.
const failHandler = `#!/usr/bin/env bash
req=$(cat)
case "$req" in
*'"mode":"terminal"'*) echo "spec is hopeless" >&2; exit 2 ;;
*'"mode":"transient"'*) echo "try again later" >&2; exit 1 ;;
*'"mode":"hang"'*) sleep 1000 & echo $! > "$PIDFILE"; wait ;;
esac
echo '{"status":{"ok":true}}'
`

func TestStdioExitCodesAndTimeout(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.startStdProvider("STD_KINDS=stdio")
	pidFile := filepath.Join(t.TempDir(), "pid")
	h := writeScript(t, failHandler)
	s.stdPost("/providerconfigs", map[string]any{"name": "stdio-default", "kind": "stdio", "kind_version": 1, "is_default": true,
		"spec": map[string]any{"command": h, "env": map[string]string{"PIDFILE": pidFile}}}, 201)
	s.stdPost("/providerconfigs", map[string]any{"name": "stdio-quick", "kind": "stdio", "kind_version": 1,
		"spec": map[string]any{"timeout_seconds": 1}}, 201)

	s.stdPost("/resources", map[string]any{"kind": "stdio", "kind_version": 1, "name": "hopeless", "spec": map[string]any{"mode": "terminal"}}, 201)
	s.stdPost("/resources", map[string]any{"kind": "stdio", "kind_version": 1, "name": "flaky", "spec": map[string]any{"mode": "transient"}}, 201)
	s.stdPost("/resources", map[string]any{"kind": "stdio", "kind_version": 1, "name": "hung", "spec": map[string]any{"mode": "hang"},
		"provider_config_ref": "stdio-quick"}, 201)

	// Exit 2 pins Failed: no task left to retry, the stderr in the error.
	waitFor(t, 60*time.Second, "hopeless to fail terminally", func() bool {
		r, body := s.stdResource("stdio", "hopeless")
		return r.Phase == "Failed" && r.Task == nil && strings.Contains(body, "TerminalError") && strings.Contains(body, "spec is hopeless")
	})
	// Exit 1 is retried: the task's attempts grow.
	waitFor(t, 60*time.Second, "flaky to be retried", func() bool {
		r, body := s.stdResource("stdio", "flaky")
		return r.Phase == "Failed" && r.Task != nil && r.Task.Attempts >= 2 && strings.Contains(body, "try again later")
	})
	// A hung program is killed at its timeout, with its children.
	waitFor(t, 60*time.Second, "hung to time out", func() bool {
		r, body := s.stdResource("stdio", "hung")
		return r.Phase == "Failed" && r.Task != nil && strings.Contains(body, "no exit within 1s")
	})
	b, err := os.ReadFile(pidFile)
	must(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	waitFor(t, 5*time.Second, "the hung program's child to be gone", func() bool { return !processAlive(pid) })
	if r, body := s.stdResource("stdio", "hopeless"); r.Phase != "Failed" || r.Task != nil {
		t.Errorf("hopeless is retried after exit 2: %s", body)
	}
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestStdshellOverTheAPI(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.startStdProvider("STD_KINDS=stdshell")
	s.stdPost("/providerconfigs", map[string]any{"name": "stdshell-default", "kind": "stdshell", "kind_version": 1, "is_default": true,
		"spec": map[string]any{"env": map[string]string{"TEAM": "ops"}, "timeout_seconds": 30}}, 201)

	s.stdPost("/resources", map[string]any{"kind": "stdshell", "kind_version": 1, "name": "hello",
		"spec": map[string]any{"script": "echo hello $TEAM $WHO\necho careful >&2\n", "env": map[string]string{"WHO": "spec"}}}, 201)
	r := s.waitStdReady("stdshell", "hello")
	var st struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	if json.Unmarshal(r.Status, &st) != nil || st.ExitCode != 0 || st.Stdout != "hello ops spec\n" || st.Stderr != "careful\n" {
		t.Errorf("status = %s", r.Status)
	}

	s.stdPost("/resources", map[string]any{"kind": "stdshell", "kind_version": 1, "name": "slow",
		"spec": map[string]any{"script": "sleep 1000 & wait\n", "timeout_seconds": 1}}, 201)
	waitFor(t, 60*time.Second, "slow to time out", func() bool {
		r, body := s.stdResource("stdshell", "slow")
		return r.Phase == "Failed" && r.Task != nil && strings.Contains(body, "no exit within 1s")
	})
}

// TestStdBadConfigsNameTheField: what the schemas can refuse is refused at apply with
// the field; what they cannot fails the task terminally, naming it.
func TestStdBadConfigsNameTheField(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.startStdProvider()
	for _, tc := range []struct {
		path  string
		body  map[string]any
		field string
	}{
		{"/providerconfigs", map[string]any{"name": "bad-timeout", "kind": "stdio", "kind_version": 1,
			"spec": map[string]any{"command": "x", "timeout_seconds": 0}}, "timeout_seconds"},
		{"/providerconfigs", map[string]any{"name": "bad-env", "kind": "stdio-composer", "kind_version": 1,
			"spec": map[string]any{"command": "x", "env": map[string]any{"A-B": "1"}}}, "env"},
		{"/providerconfigs", map[string]any{"name": "bad-field", "kind": "stdio", "kind_version": 1,
			"spec": map[string]any{"comand": "x"}}, "comand"},
		{"/providerconfigs", map[string]any{"name": "bad-shell", "kind": "stdshell", "kind_version": 1,
			"spec": map[string]any{"interpreter": ""}}, "interpreter"},
		{"/resources", map[string]any{"kind": "stdshell", "kind_version": 1, "name": "no-script", "spec": map[string]any{}}, "script"},
		{"/resources", map[string]any{"kind": "stdshell", "kind_version": 1, "name": "bad-timeout",
			"spec": map[string]any{"script": "true", "timeout_seconds": "soon"}}, "timeout_seconds"},
	} {
		code, body := s.call("POST", tc.path, tc.body)
		if code != 400 && code != 422 || !strings.Contains(string(body), tc.field) {
			t.Errorf("POST %s %v = %d %s, want a problem naming %s", tc.path, tc.body, code, body, tc.field)
		}
	}
	// No command anywhere: the schema allows it (an override need not repeat it), the
	// provider refuses it terminally.
	s.stdPost("/resources", map[string]any{"kind": "stdio", "kind_version": 1, "name": "unconfigured", "spec": map[string]any{}}, 201)
	waitFor(t, 60*time.Second, "unconfigured to fail terminally naming config.command", func() bool {
		r, body := s.stdResource("stdio", "unconfigured")
		return r.Phase == "Failed" && r.Task == nil && strings.Contains(body, "config.command")
	})
	s.stdPost("/resources", map[string]any{"kind": "stdshell", "kind_version": 1, "name": "no-shell",
		"spec": map[string]any{"script": "true", "interpreter": "no-such-shell"}}, 201)
	waitFor(t, 60*time.Second, "no-shell to fail terminally naming spec.interpreter", func() bool {
		r, body := s.stdResource("stdshell", "no-shell")
		return r.Phase == "Failed" && r.Task == nil && strings.Contains(body, "spec.interpreter")
	})
}

// TestStdProviderServesEveryKind runs one stdprovider process with its
// default selection and drives each data-backed kind through the API: a
// stdcel graph and a stdstarlark program, each composing a stdshell child
// the same process runs, and a stdterraform module (where a terraform
// binary exists).
func TestStdProviderServesEveryKind(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	kinds := s.startStdProvider()
	if want := []string{"stdio", "stdio-composer", "stdshell", "stdcel", "stdstarlark", "stdterraform"}; !sameSet(kinds, want) {
		t.Fatalf("served kinds = %q, want %q", kinds, want)
	}
	program := `
def compose(spec, config):
    return struct(children = [struct(kind = "stdshell", kind_version = 1, name = "star-run",
                                     spec = {"script": "echo " + spec["word"]})],
                  status = {"composed": 1})
`
	configs := []map[string]any{
		{"name": "cel", "kind": "stdcel", "kind_version": 1, "is_default": true, "spec": map[string]any{
			"resources": []map[string]any{{"id": "say", "template": map[string]any{
				"kind": "stdshell", "kind_version": 1, "name": "${schema.metadata.name}-say",
				"spec": map[string]any{"script": "echo ${schema.spec.word}"}}}}}},
		{"name": "star", "kind": "stdstarlark", "kind_version": 1, "is_default": true,
			"data": base64.StdEncoding.EncodeToString([]byte(program))},
		{"name": "tf", "kind": "stdterraform", "kind_version": 1, "is_default": true,
			"spec": map[string]any{"state_dir": t.TempDir()}},
	}
	for _, c := range configs {
		if code, body := s.call("POST", "/providerconfigs", c); code != 201 {
			t.Fatalf("providerconfig %s = %d %s", c["name"], code, body)
		}
	}
	for _, r := range []map[string]any{
		{"kind": "stdcel", "kind_version": 1, "name": "cel-1", "spec": map[string]any{"word": "hello"}},
		{"kind": "stdstarlark", "kind_version": 1, "name": "star-1", "spec": map[string]any{"word": "bye"}},
	} {
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s = %d %s", r["name"], code, body)
		}
	}
	for path, out := range map[string]string{"stdshell/cel-1-say": `hello\n`, "stdshell/star-run": `bye\n`} {
		s.waitReady(path)
		if d, _ := s.detail(path); !strings.Contains(string(d.Status), out) {
			t.Errorf("%s status = %s, want the script's output %s", path, d.Status, out)
		}
	}
	s.waitReady("stdcel/cel-1")
	s.waitReady("stdstarlark/star-1")

	if _, err := exec.LookPath("terraform"); err != nil {
		t.Log("no terraform binary: the stdterraform part is skipped")
		return
	}
	module, err := filepath.Abs("../providers/stdterraform/testdata/hello")
	must(t, err)
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "stdterraform", "kind_version": 1, "name": "tf-1",
		"spec": map[string]any{"source": module, "vars": map[string]any{"name": "converge"}}}); code != 201 {
		t.Fatalf("apply tf-1 = %d %s", code, body)
	}
	waitFor(t, 2*time.Minute, "tf-1 Ready", func() bool {
		d, _ := s.detail("stdterraform/tf-1")
		return d.PhaseOf() == model.PhaseReady
	})
	if d, _ := s.detail("stdterraform/tf-1"); !strings.Contains(string(d.Status), "hello converge") {
		t.Errorf("tf-1 status = %s, want the module's greeting output", d.Status)
	}
	s.checkInvariants()
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
