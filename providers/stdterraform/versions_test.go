package stdterraform

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-version"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// fakeCLI installs <dir>/<name>/<installed>/<name>: a script answering version -json
// with reports, and otherwise recording "<installed> <command>" in log and running the
// real terraform.
func fakeCLI(t *testing.T, dir, name, installed, reports, log string) {
	t.Helper()
	real, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name, installed, name)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = version ]; then echo '{"terraform_version":"%s","platform":"linux_amd64"}'; exit 0; fi
echo "%s $1" >> %s
exec %s "$@"
`, reports, installed, log, real)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestVersions applies modules through two fake terraform versions (and one fake tofu)
// in a versions directory, each recording that it ran: the spec's token, the module's
// version file and its required_version each pick theirs, and the status names it.
func TestVersions(t *testing.T) {
	needTerraform(t)
	versions := t.TempDir()
	log := filepath.Join(t.TempDir(), "ran")
	fakeCLI(t, versions, binTerraform, "1.11.4", "1.11.4", log)
	fakeCLI(t, versions, binTerraform, "1.12.0", "1.12.0", log)
	fakeCLI(t, versions, binTofu, "1.9.0", "1.9.0", log)
	fakeCLI(t, versions, binTofu, "1.10.0", "1.10.0", log)
	// Not a version directory, and a version without its binary: both passed over.
	if err := os.MkdirAll(filepath.Join(versions, binTerraform, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(versions, binTerraform, "1.13.0"), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		module  string
		token   string
		binary  string
		byOpt   bool
		want    string
		wantBin string
	}{
		{name: "latest-allowed by default", module: "versioned", want: "1.11.4"},
		{name: "latest-allowed token", module: "versioned", token: "latest-allowed", want: "1.11.4"},
		{name: "latest", module: "versioned", token: "latest", want: "1.12.0"},
		{name: "exact", module: "hello", token: "1.11.4", want: "1.11.4"},
		{name: "regex", module: "hello", token: `latest:^1\.11`, want: "1.11.4"},
		{name: "min-required", module: "hello", token: "min-required", want: "1.11.4"},
		{name: "version file", module: "versionfile", want: "1.12.0"},
		{name: "the spec over the version file", module: "versionfile", token: "1.11.4", want: "1.11.4"},
		{name: "versions dir by option", module: "versionfile", byOpt: true, want: "1.12.0"},
		{name: "tofu version file", module: "versionfile", binary: binTofu, want: "1.9.0"},
		{name: "tofu latest", module: "hello", binary: binTofu, want: "1.10.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(log, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			spec := map[string]any{"source": module(t, tc.module), "vars": map[string]any{"name": "v"}}
			if tc.token != "" {
				spec["tf_version"] = tc.token
			}
			cfg := map[string]any{"state_dir": t.TempDir(), "versions_dir": versions}
			p := New("stdterraform")
			if tc.byOpt {
				delete(cfg, "versions_dir")
				p = New("stdterraform", WithVersionsDir(versions))
			}
			if tc.binary != "" {
				cfg["binary"] = tc.binary
			}
			out, err := sdktest.Run(t, p, withConfig(t, request(t, reactionApply, "", spec), cfg))
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			var status struct {
				Terraform struct{ Binary, Version string } `json:"terraform"`
			}
			if err := json.Unmarshal(out.Status, &status); err != nil {
				t.Fatal(err)
			}
			bin := cmp.Or(tc.binary, binTerraform)
			if status.Terraform.Version != tc.want || status.Terraform.Binary != bin {
				t.Errorf("status = %s, want %s %s", out.Status, bin, tc.want)
			}
			data, _ := os.ReadFile(log)
			ran := strings.Fields(strings.ReplaceAll(string(data), "\n", " "))
			if len(ran) == 0 {
				t.Fatal("no fake version ran")
			}
			for i := 0; i < len(ran); i += 2 {
				if ran[i] != tc.want {
					t.Errorf("version %s ran %s, want only %s:\n%s", ran[i], ran[i+1], tc.want, data)
				}
			}
		})
	}
}

// TestVersionFailures: a version the directory cannot supply, a token that is none, a
// binary lying about its version and a pin with no versions directory are terminal and
// name their source; an empty versions directory is transient.
func TestVersionFailures(t *testing.T) {
	needTerraform(t)
	versions := t.TempDir()
	log := filepath.Join(t.TempDir(), "ran")
	fakeCLI(t, versions, binTerraform, "1.11.4", "1.11.4", log)
	fakeCLI(t, versions, binTerraform, "1.12.0", "1.12.1", log)
	for _, tc := range []struct {
		name     string
		module   string
		token    string
		dir      string
		terminal bool
		want     string
	}{
		{"not installed", "hello", "1.7.5", versions, true, `spec.tf_version: no installed version fits "1.7.5" (installed: 1.11.4, 1.12.0)`},
		{"not a token", "hello", "newest", versions, true, `spec.tf_version: "newest" is not a version`},
		{"bad regex", "hello", "latest:(", versions, true, "spec.tf_version"},
		{"lying binary", "hello", "1.12.0", versions, true, "reports version 1.12.1, not the 1.12.0"},
		{"version file not installed", "versionfile", "", filepath.Join(t.TempDir(), "v"), false, "config.versions_dir: no terraform installed"},
		{"no versions dir", "hello", "1.11.4", "", true, "spec.tf_version: no versions directory is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"source": module(t, tc.module), "vars": map[string]any{"name": "v"}}
			if tc.token != "" {
				spec["tf_version"] = tc.token
			}
			cfg := map[string]any{"state_dir": t.TempDir()}
			if tc.dir != "" {
				cfg["versions_dir"] = tc.dir
			}
			_, err := sdktest.Run(t, New("stdterraform"), withConfig(t, request(t, reactionApply, "", spec), cfg))
			if err == nil || webhooksdk.IsTerminal(err) != tc.terminal || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v (terminal %v), want terminal %v naming %q", err, webhooksdk.IsTerminal(err), tc.terminal, tc.want)
			}
		})
	}
}

// TestPickVersion resolves each token against an installed set, required_version read
// from both a .tf and a .tf.json file (all constraints hold).
func TestPickVersion(t *testing.T) {
	var installed []*version.Version
	for _, s := range []string{"1.5.7", "1.7.5", "1.8.0-beta1", "1.10.5", "1.11.4", "1.12.0"} {
		installed = append(installed, version.Must(version.NewSemver(s)))
	}
	bare := t.TempDir()
	ranged := t.TempDir()
	files := map[string]string{
		"main.tf":          "terraform {\n  required_version = \">= 1.6\"\n}\n",
		"versions.tf.json": `{"terraform": {"required_version": "< 1.11.0"}}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(ranged, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		token, module, want string
	}{
		{"1.7.5", bare, "1.7.5"},
		{"1.8.0-beta1", bare, "1.8.0-beta1"},
		{"latest", bare, "1.12.0"},
		{`latest:^1\.7`, bare, "1.7.5"},
		{"latest:^1.1", bare, "1.12.0"},
		{"min-required", bare, "1.5.7"},
		{"latest-allowed", bare, "1.12.0"},
		{"min-required", ranged, "1.7.5"},
		{"latest-allowed", ranged, "1.10.5"},
		{"latest:^1\\.8", bare, ""},
		{"1.9.0", bare, ""},
	} {
		v, err := pickVersion(tc.token, installed, tc.module)
		got := ""
		if err == nil {
			got = v.Original()
		}
		if got != tc.want {
			t.Errorf("pickVersion(%q, %s) = %q (%v), want %q", tc.token, filepath.Base(tc.module), got, err, tc.want)
		}
	}
}
