package datadriven

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/convergeplane/converge/providers/stdcel"
	"github.com/convergeplane/converge/providers/stdstarlark"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// TestBuild: the objects name the std kinds in the order they apply, the
// graph compiles (stdcel.Validate) with its module sources pointing at the
// modules written under dir, state goes under dir, and the two specs of the
// root differ as the demo says.
func TestBuild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := Build(dir, State{}, false)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range o.Manifests {
		var k struct{ Kind string }
		if err := json.Unmarshal(m, &k); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k.Kind)
	}
	if got := strings.Join(kinds, ","); got != "stdterraform,stdshell,stdstarlark,stdcel" {
		t.Errorf("manifests %s", got)
	}
	type providerConfig struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
		Data []byte          `json:"data"`
	}
	configs := map[string]providerConfig{}
	for _, raw := range o.ProviderConfigs {
		var pc providerConfig
		if err := json.Unmarshal(raw, &pc); err != nil {
			t.Fatal(err)
		}
		configs[pc.Kind] = pc
	}
	graph := configs["stdcel"].Spec
	if err := stdcel.Validate(graph); err != nil {
		t.Errorf("the graph does not compile: %v", err)
	}
	for _, m := range []string{"network", "cache"} {
		src := filepath.Join(dir, "modules", m)
		if !strings.Contains(string(graph), `"`+src+`"`) {
			t.Errorf("the graph does not name the module %s", src)
		}
		if _, err := os.Stat(filepath.Join(src, "main.tf")); err != nil {
			t.Errorf("module %s not written: %v", m, err)
		}
	}
	if want := `{"state_dir":"` + filepath.Join(dir, "tfstate") + `"}`; string(configs["stdterraform"].Spec) != want {
		t.Errorf("stdterraform config %s, want %s", configs["stdterraform"].Spec, want)
	}
	zr, err := zip.NewReader(bytes.NewReader(configs["stdstarlark"].Data), int64(len(configs["stdstarlark"].Data)))
	if err != nil {
		t.Fatalf("the stdstarlark config's data is no zip bundle: %v", err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	if slices.Sort(names); !slices.Equal(names, []string{"compose.star", "lib/services.star"}) {
		t.Errorf("the bundle holds %q", names)
	}
	spec := func(o Objects) string {
		var r struct{ Spec json.RawMessage }
		if err := json.Unmarshal(o.Resources[0], &r); err != nil {
			t.Fatal(err)
		}
		return string(r.Spec)
	}
	next, err := Build(dir, State{Endpoint: "http://127.0.0.1:9", Bucket: "b"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var s3 struct {
		Spec struct {
			Backend struct {
				StatePrefix string `json:"state_prefix"`
				S3          struct {
					Bucket, Endpoint string
					UsePathStyle     bool `json:"use_path_style"`
				} `json:"s3"`
			} `json:"backend"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(next.ProviderConfigs[0], &s3); err != nil {
		t.Fatal(err)
	}
	if b := s3.Spec.Backend; b.StatePrefix != StatePrefix || b.S3.Bucket != "b" || b.S3.Endpoint != "http://127.0.0.1:9" || !b.S3.UsePathStyle {
		t.Errorf("with an S3 store the stdterraform config is %s", next.ProviderConfigs[0])
	}
	if a, b := spec(o), spec(next); !strings.Contains(a, `"worker"`) || !strings.Contains(b, `"billing"`) || strings.Contains(b, `"worker"`) {
		t.Errorf("specs %s then %s: want worker replaced by billing", a, b)
	}
}

// TestBundleComposes runs the Starlark bundle the demo applies through
// stdstarlark: compose.star, with what it loads from lib/services.star,
// makes one stdshell leaf per service carrying the network id.
func TestBundleComposes(t *testing.T) {
	t.Parallel()
	program, err := bundle()
	if err != nil {
		t.Fatal(err)
	}
	req := webhooksdk.Request{Reaction: "compose", Config: json.RawMessage(`{"greeting":"hi"}`), Bundle: program,
		Resource: webhooksdk.Resource{Kind: "stdstarlark", KindVersion: 1, Name: "shop-services",
			Spec: json.RawMessage(`{"app":"shop","services":["api","web"],"network_id":"net-1"}`)}}
	out, err := sdktest.Run(t, stdstarlark.New("stdstarlark"), req)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range out.Children {
		names = append(names, c.Kind+"/"+c.Name)
		if !strings.Contains(string(c.Spec), `"NETWORK":"net-1"`) || !strings.Contains(string(c.Spec), `"GREETING":"hi"`) {
			t.Errorf("%s's spec %s lacks the network id or the greeting", c.Name, c.Spec)
		}
	}
	if !slices.Equal(names, []string{"stdshell/shop-api", "stdshell/shop-web"}) {
		t.Errorf("children %q", names)
	}
}
