package stdshell_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/convergeplane/converge/providers/stdshell"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

func run(t *testing.T, spec, config string) (webhooksdk.Outcome, error) {
	t.Helper()
	req := webhooksdk.Request{TaskID: "t1", Attempt: 1, Reaction: "work", Config: json.RawMessage(config),
		Resource: webhooksdk.Resource{ID: "id-1", Kind: "stdshell", KindVersion: 1, Name: "job", Spec: json.RawMessage(spec)}}
	return sdktest.Run(t, stdshell.New("stdshell"), req)
}

func TestOutputIsRecordedInStatus(t *testing.T) {
	t.Setenv("STDSHELL_TEST_SERVER_SECRET", "leak")
	out, err := run(t, `{"script":"echo hello $WHO from $TEAM; echo warn >&2; env","env":{"WHO":"spec"}}`,
		`{"env":{"WHO":"config","TEAM":"ops"}}`)
	if err != nil {
		t.Fatal(err)
	}
	var st stdshell.Status
	if err := json.Unmarshal(out.Status, &st); err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 0 || !strings.HasPrefix(st.Stdout, "hello spec from ops\n") || st.Stderr != "warn\n" {
		t.Errorf("status = %+v", st)
	}
	if strings.Contains(st.Stdout, "STDSHELL_TEST_SERVER_SECRET") {
		t.Error("the script saw the server's environment")
	}
	if len(out.Conditions) != 1 || out.Conditions[0].Type != "Ready" || out.Conditions[0].Status != "True" {
		t.Errorf("conditions = %+v", out.Conditions)
	}
}

func TestStdoutTailIsBounded(t *testing.T) {
	out, err := run(t, `{"script":"head -c 50000 /dev/zero | tr '\\0' a; echo END"}`, ``)
	if err != nil {
		t.Fatal(err)
	}
	var st stdshell.Status
	if err := json.Unmarshal(out.Status, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Stdout) != 4096 || !strings.HasSuffix(st.Stdout, "aEND\n") {
		t.Errorf("stdout tail: %d bytes, ends %q", len(st.Stdout), st.Stdout[len(st.Stdout)-10:])
	}
}

func TestInterpreterAndArgs(t *testing.T) {
	out, err := run(t, `{"script":"echo \"$0 flags=$-\"","args":["-e"]}`, `{"interpreter":"bash","args":["-u"]}`)
	if err != nil {
		t.Fatal(err)
	}
	var st stdshell.Status
	_ = json.Unmarshal(out.Status, &st)
	script, flags, _ := strings.Cut(strings.TrimSpace(st.Stdout), " flags=")
	if !strings.HasSuffix(script, "/script") || !strings.Contains(flags, "e") || strings.Contains(flags, "u") {
		t.Errorf("bash with the spec's args: %q", st.Stdout)
	}
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name, spec, config string
		terminal           bool
		want               string
	}{
		{"exit 2", `{"script":"echo nope >&2; exit 2"}`, ``, true, "exit 2 (terminal): stderr: nope"},
		{"exit 1", `{"script":"echo flaky >&2; exit 1"}`, ``, false, "exit 1: stderr: flaky"},
		{"timeout", `{"script":"sleep 1000 & wait","timeout_seconds":1}`, ``, false, "no exit within 1s"},
		{"no script", `{}`, ``, true, "spec.script"},
		{"bad spec field", `{"script":"true","timeout":3}`, ``, true, "spec:"},
		{"bad spec timeout", `{"script":"true","timeout_seconds":-1}`, ``, true, "spec.timeout_seconds"},
		{"bad config env", `{"script":"true"}`, `{"env":{"1X":"y"}}`, true, "config.env"},
		{"bad config field", `{"script":"true"}`, `{"shell":"zsh"}`, true, "config:"},
		{"missing interpreter", `{"script":"true","interpreter":"no-such-shell"}`, ``, true, "spec.interpreter"},
	} {
		_, err := run(t, tc.spec, tc.config)
		if err == nil || webhooksdk.IsTerminal(err) != tc.terminal || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want terminal=%v containing %q", tc.name, err, tc.terminal, tc.want)
		}
	}
}

func TestManifest(t *testing.T) {
	var m struct {
		Kind       string `json:"kind"`
		SpecSchema struct {
			Required []string `json:"required"`
		} `json:"spec_schema"`
	}
	if err := json.Unmarshal(stdshell.Manifest(), &m); err != nil || m.Kind != "stdshell" || len(m.SpecSchema.Required) != 1 {
		t.Fatalf("manifest = %+v, %v", m, err)
	}
}
