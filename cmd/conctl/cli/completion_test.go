package cli

import (
	"strings"
	"testing"
)

// TestCompletion: the shell completion of kinds and names comes from the
// server, through cobra's __complete (what the bash, zsh and fish scripts
// call); without a server it offers nothing and says nothing.
func TestCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	b.seed(t, "res", "["+resourceVPC+`, {"kind": "vpc", "kind_version": 1, "name": "other"}]`)
	b.seed(t, "ep", "name: net\ntarget: {type: https, url: 'https://x/converge'}\nkinds: [{kind: vpc, kind_version: 1}]\n")

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"Kinds", []string{"get", "resource", ""}, "statussink/\nvpc/\n:6\n"},
		{"KindPrefix", []string{"describe", "res", "v"}, "vpc/\n:6\n"},
		{"Names", []string{"get", "resource", "vpc/"}, "vpc/other\nvpc/sample-vpc\n:4\n"},
		{"NamePrefix", []string{"delete", "resource", "vpc/sa"}, "vpc/sample-vpc\n:4\n"},
		{"NamesWithKindFlag", []string{"get", "resource", "--kind", "vpc", "o"}, "other\n:4\n"},
		{"KindFlag", []string{"list", "res", "--kind", ""}, "statussink\nvpc\n:4\n"},
		{"KindArg", []string{"get", "manifest", "s"}, "statussink\n:4\n"},
		{"EndpointNames", []string{"describe", "endpoint", ""}, "net\n:4\n"},
		{"OneArgOnly", []string{"get", "resource", "vpc/other", ""}, ":4\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := b.run(t, "", append([]string{"__complete"}, tt.args...)...)
			wantCode(t, r, ExitOK)
			wantOutput(t, r.stdout, tt.want)
		})
	}

	t.Run("ServerDownIsSilent", func(t *testing.T) {
		b := setupNoAPI(t)
		b.env[EnvServer] = deadServer(t)
		r := b.run(t, "", "__complete", "get", "resource", "")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, ":6\n")
		if strings.Contains(r.stderr, "Error") {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("Contexts", func(t *testing.T) {
		b := setupNoAPI(t)
		b.env[EnvConfig] = b.file(t, "config.yaml", "contexts:\n- name: prod\n- name: local\n")
		r := b.run(t, "", "__complete", "config", "use-context", "p")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "prod\n:4\n")
	})

	t.Run("Scripts", func(t *testing.T) {
		for _, shell := range []string{"bash", "zsh", "fish"} {
			r := b.run(t, "", "completion", shell)
			wantCode(t, r, ExitOK)
			if !strings.Contains(r.stdout, "__complete") {
				t.Errorf("completion %s: the script does not call conctl __complete", shell)
			}
		}
	})
}
