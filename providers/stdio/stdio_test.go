package stdio_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/providers/stdio"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "handler.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func cfg(t *testing.T, command string, extra map[string]any) json.RawMessage {
	t.Helper()
	m := map[string]any{"command": command}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(reaction string, config json.RawMessage) webhooksdk.Request {
	return webhooksdk.Request{TaskID: "t1", Attempt: 1, Reaction: reaction, Trigger: webhooksdk.TriggerSpecChange,
		TaskType: webhooksdk.TaskReconcile, Config: config,
		Resource: webhooksdk.Resource{ID: "id-1", Kind: "backups", KindVersion: 1, Name: "nightly", Spec: json.RawMessage(`{"n":3}`)}}
}

func TestLeafGetsOneRequestAndReturnsItsStatus(t *testing.T) {
	h := script(t, `in=$(cat); printf '{"status":{"req":%s},"conditions":[{"type":"Ready","status":"True"}]}' "$in"`)
	out, err := sdktest.Run(t, stdio.New("backups"), request("work", cfg(t, h, map[string]any{"settings": map[string]any{"region": "eu"}})))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Req stdio.Request `json:"req"`
	}
	if err := json.Unmarshal(out.Status, &st); err != nil {
		t.Fatalf("status %s: %v", out.Status, err)
	}
	if st.Req.Reaction != "work" || st.Req.Resource.Name != "nightly" || string(st.Req.Resource.Spec) != `{"n":3}` ||
		string(st.Req.Config) != `{"region":"eu"}` || st.Req.Attempt != 1 {
		t.Errorf("the program saw %+v", st.Req)
	}
	if len(out.Conditions) != 1 || out.Conditions[0].Type != "Ready" {
		t.Errorf("conditions = %+v", out.Conditions)
	}
}

func TestComposerReturnsChildrenAndEdges(t *testing.T) {
	h := script(t, `cat >/dev/null; cat <<'J'
{"children":[{"kind":"a","kind_version":1,"name":"x","spec":{}},{"kind":"b","kind_version":1,"name":"y"}],
 "edges":[{"dependent":{"kind":"b","name":"y"},"dependency":{"kind":"a","name":"x"},"values":[{"dependent_field":"/v","source_field":"/v"}]}],
 "status":{"children":2}}
J`)
	out, err := sdktest.Run(t, stdio.New("app-bom"), request("compose", cfg(t, h, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Children) != 2 || len(out.Edges) != 1 || string(out.Status) != `{"children":2}` {
		t.Errorf("outcome = %+v", out)
	}
}

func TestEnvironmentIsOnlyTheConfigs(t *testing.T) {
	t.Setenv("STDIO_TEST_SERVER_SECRET", "leak")
	h := script(t, `cat >/dev/null; printf '{"status":{"env":"%s"}}' "$(env | sort | tr '\n' ' ')"`)
	out, err := sdktest.Run(t, stdio.New("stdio"), request("work", cfg(t, h, map[string]any{"env": map[string]string{"GREETING": "hi"}})))
	if err != nil {
		t.Fatal(err)
	}
	env := string(out.Status)
	if strings.Contains(env, "STDIO_TEST_SERVER_SECRET") || !strings.Contains(env, "GREETING=hi") ||
		!strings.Contains(env, "PATH="+stdio.MinimalPath) {
		t.Errorf("the program's environment: %s", env)
	}
}

func TestExitCodesClassifyTheFailure(t *testing.T) {
	for _, tc := range []struct {
		exit     int
		terminal bool
	}{{2, true}, {1, false}, {3, false}} {
		h := script(t, "cat >/dev/null; echo 'bad thing' >&2; exit "+strconv.Itoa(tc.exit))
		_, err := sdktest.Run(t, stdio.New("stdio"), request("work", cfg(t, h, nil)))
		if err == nil || webhooksdk.IsTerminal(err) != tc.terminal || !strings.Contains(err.Error(), "bad thing") ||
			!strings.Contains(err.Error(), "exit "+strconv.Itoa(tc.exit)) {
			t.Errorf("exit %d: err = %v, want terminal=%v with the stderr", tc.exit, err, tc.terminal)
		}
	}
}

func TestStderrIsBoundedToItsTail(t *testing.T) {
	h := script(t, `cat >/dev/null; head -c 100000 /dev/zero | tr '\0' a >&2; echo THE-END >&2; exit 1`)
	_, err := sdktest.Run(t, stdio.New("stdio"), request("work", cfg(t, h, nil)))
	if err == nil || !strings.HasSuffix(err.Error(), "THE-END") || len(err.Error()) > stdio.TailBytes+200 {
		t.Fatalf("err (%d bytes) should end with the stderr tail and be bounded", len(err.Error()))
	}
}

func TestStdoutOverTheCapFails(t *testing.T) {
	h := script(t, `cat >/dev/null; head -c 2000000 /dev/zero`)
	_, err := sdktest.Run(t, stdio.New("stdio"), request("work", cfg(t, h, nil)))
	if err == nil || !webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "stdout over") {
		t.Fatalf("err = %v", err)
	}
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	h := script(t, "cat >/dev/null; sleep 1000 & echo $! > "+pidFile+"; wait")
	start := time.Now()
	_, err := sdktest.Run(t, stdio.New("stdio"), request("work", cfg(t, h, map[string]any{"timeout_seconds": 1})))
	if err == nil || webhooksdk.IsTerminal(err) || !strings.Contains(err.Error(), "no exit within 1s") {
		t.Fatalf("err = %v, want a transient timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the run took %s after a 1s timeout", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// SIGKILL lands asynchronously: a loaded machine may show the child
	// running for a moment after Work returned.
	for gone := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(gone) {
			t.Errorf("the program's child %d outlived the timeout by 5s", pid)
			break
		}
	}
}

// alive reports whether pid is a live process (a zombie is dead).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestBadConfigAndResponseAreTerminalNamingTheField(t *testing.T) {
	ok := script(t, "cat >/dev/null")
	for _, tc := range []struct {
		name   string
		config string
		body   string
		field  string
	}{
		{"no command", `{}`, "", "config.command"},
		{"missing program", `{"command":"no-such-program-xyz"}`, "", "config.command"},
		{"unknown field", `{"command":"` + ok + `","comand":"x"}`, "", "config"},
		{"timeout", `{"command":"` + ok + `","timeout_seconds":99999}`, "", "config.timeout_seconds"},
		{"env name", `{"command":"` + ok + `","env":{"A-B":"x"}}`, "", "config.env"},
		{"settings", `{"command":"` + ok + `","settings":[1]}`, "", "config.settings"},
		{"bad stdout", "", "cat >/dev/null; echo not-json", "stdout"},
		{"bad child", "", `cat >/dev/null; echo '{"children":[{"kind":"a","name":"x"}]}'`, "stdout"},
	} {
		config := json.RawMessage(tc.config)
		if tc.body != "" {
			config = cfg(t, script(t, tc.body), nil)
		}
		_, err := sdktest.Run(t, stdio.New("stdio"), request("work", config))
		if err == nil || !webhooksdk.IsTerminal(err) || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want a terminal error naming %s", tc.name, err, tc.field)
		}
	}
}

func TestEmptyStdoutIsAnEmptySuccess(t *testing.T) {
	silent := script(t, "cat >/dev/null")
	if out, err := sdktest.Run(t, stdio.New("stdio"), request("work", cfg(t, silent, nil))); err != nil || out.Status != nil {
		t.Fatalf("out = %+v, err = %v", out, err)
	}
}

func TestManifestRenamesTheKind(t *testing.T) {
	for _, tc := range []struct {
		composer bool
		reaction string
	}{{false, "work"}, {true, "compose"}} {
		var m struct {
			Kind        string `json:"kind"`
			KindVersion int    `json:"kind_version"`
			Reactions   []struct {
				Name  string   `json:"name"`
				Emits []string `json:"emits"`
			} `json:"reactions"`
		}
		if err := json.Unmarshal(stdio.Manifest("backups", tc.composer), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind != "backups" || m.KindVersion != 1 || len(m.Reactions) != 1 || m.Reactions[0].Name != tc.reaction {
			t.Errorf("composer=%v: manifest = %+v", tc.composer, m)
		}
	}
}
