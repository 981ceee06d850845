// Package datadriven is the data-driven composition demo (`make
// demo-datadriven`): a tree of resources composed with no provider code, by
// the std kinds cmd/stdprovider serves. The root is a stdcel resource whose
// graph (graph.json, the stdcel provider config) fans out into
//
//   - a stdterraform network (modules/network, Terraform's built-in
//     terraform_data: no provider download, no cloud),
//   - a stdstarlark services composer (starlark/, zipped into a bundle: the
//     stdstarlark provider config's data, compose.star loading
//     lib/services.star) whose spec gets the network's id by a value flow
//     and which composes one stdshell leaf per service,
//   - a stdterraform cache when spec.cache, a stdshell dns leaf when
//     spec.dns, both wired to the network's id.
//
// resources/shop.json is the root; resources/shop-updated.json is its next
// spec, which drops a service and the cache and adds another service and
// the dns leaf. Objects builds what `converge dev --demo=datadriven` applies;
// ./cmd/datadriven-demo prints it.
package datadriven

import (
	"archive/zip"
	"bytes"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/convergeplane/converge/providers/stdcel"
	"github.com/convergeplane/converge/providers/stdshell"
	"github.com/convergeplane/converge/providers/stdstarlark"
	"github.com/convergeplane/converge/providers/stdterraform"
)

// files holds the graph, the Starlark program's files, the Terraform modules
// and the root's two specs.
//
//go:embed graph.json starlark modules resources
var files embed.FS // read-only embedded data

// Objects are what the demo applies, in order: the std kinds' manifests,
// their provider configs, and the root.
type Objects struct {
	Manifests       []json.RawMessage `json:"manifests"`
	ProviderConfigs []json.RawMessage `json:"providerconfigs"`
	Resources       []json.RawMessage `json:"resources"`
}

// State is where the stdterraform resources keep their state: the S3
// backend with use_lockfile on an S3 API at Endpoint (path style), in
// Bucket; with no Endpoint, local files under the demo's directory.
type State struct {
	Endpoint, Bucket string
}

// StatePrefix is where in the bucket the demo's states go: one
// <StatePrefix>/<resource id>/terraform.tfstate each (the resource's id is
// its Terraform workspace), with its lock beside it while a run holds it.
const StatePrefix = "datadriven"

// Build writes the Terraform modules under dir/modules (stdterraform runs a
// module from a local path) and returns the objects that compose the root
// from them, its first spec or, with updated, its next one. The
// stdterraform runs go under dir/tfstate, and so do their states unless
// state names an S3 store.
func Build(dir string, state State, updated bool) (Objects, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Objects{}, err
	}
	modules := filepath.Join(dir, "modules")
	if err := writeModules(modules); err != nil {
		return Objects{}, err
	}
	graph, err := files.ReadFile("graph.json")
	if err != nil {
		return Objects{}, err
	}
	quoted, err := json.Marshal(modules)
	if err != nil {
		return Objects{}, err
	}
	graph = []byte(strings.ReplaceAll(string(graph), "@MODULES@", string(quoted[1:len(quoted)-1])))
	program, err := bundle()
	if err != nil {
		return Objects{}, err
	}
	root := "resources/shop.json"
	if updated {
		root = "resources/shop-updated.json"
	}
	res, err := files.ReadFile(root)
	if err != nil {
		return Objects{}, err
	}
	tf := map[string]any{"state_dir": filepath.Join(dir, "tfstate")}
	if state.Endpoint != "" {
		tf["backend"] = map[string]any{"state_prefix": StatePrefix, "s3": map[string]any{
			"bucket": state.Bucket, "endpoint": state.Endpoint, "use_path_style": true, "region": "us-east-1"}}
	}
	o := Objects{Resources: []json.RawMessage{res}}
	for _, m := range [][]byte{stdterraform.Manifest(), stdshell.Manifest(), stdstarlark.Manifest(), stdcel.Manifest()} {
		o.Manifests = append(o.Manifests, m)
	}
	for _, pc := range []map[string]any{
		config("stdterraform", tf, nil),
		config("stdshell", map[string]any{"timeout_seconds": 30}, nil),
		config("stdstarlark", map[string]any{"greeting": "hello from the provider config"}, program),
		config("stdcel", json.RawMessage(graph), nil),
	} {
		b, err := json.Marshal(pc)
		if err != nil {
			return Objects{}, err
		}
		o.ProviderConfigs = append(o.ProviderConfigs, b)
	}
	return o, nil
}

// config is the default provider config of kind with spec and, when set,
// data (base64 in the API).
func config(kind string, spec any, data []byte) map[string]any {
	pc := map[string]any{"name": kind + "-default", "kind": kind, "kind_version": 1, "is_default": true, "spec": spec}
	if data != nil {
		pc["data"] = base64.StdEncoding.EncodeToString(data)
	}
	return pc
}

// bundle zips the Starlark program, starlark/ with compose.star at its
// root, as stdstarlark takes it.
func bundle() ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := fs.WalkDir(files, "starlark", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		w, err := zw.Create(strings.TrimPrefix(path, "starlark/"))
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the Starlark bundle: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("the Starlark bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// writeModules writes the embedded modules under dir, replacing what an
// earlier run left there.
func writeModules(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return fs.WalkDir(files, "modules", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(dir, strings.TrimPrefix(path, "modules"))
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return fmt.Errorf("write the module file %s: %w", out, err)
		}
		return nil
	})
}
