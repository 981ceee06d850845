package integration

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/providers/stdstarlark"
	"github.com/convergeplane/converge/webhooksdk"
)

// starLeaf is the child kind the Starlark program composes: its status is an id and the
// net_id that flowed into its spec.
type starLeaf struct{}

func (starLeaf) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "starleaf", Version: 1}
}
func (starLeaf) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec struct {
		NetID string `json:"net_id"`
	}
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	st, err := json.Marshal(map[string]string{"id": "id-" + req.Resource.Name, "net_id": spec.NetID})
	return webhooksdk.Outcome{Status: st}, err
}

// starProgram composes a net and `config.apps` apps wired to it, and rolls their
// readiness up.
const starProgram = `
def compose(spec, config):
    net = spec["name"] + "-net"
    children = [struct(kind = "starleaf", kind_version = 1, name = net, spec = {})]
    edges = []
    for i in range(config["apps"]):
        app = "%s-app-%d" % (spec["name"], i)
        children.append(struct(kind = "starleaf", kind_version = 1, name = app, spec = {}))
        edges.append(struct(
            dependent = struct(kind = "starleaf", name = app),
            dependency = struct(kind = "starleaf", name = net),
            values = [struct(dependent = "/net_id", source = "/id")],
        ))
    return struct(children = children, edges = edges, status = {"composed": len(children)})

def status(descendants):
    ready = len([d for d in descendants if d["phase"] == "Ready"])
    return struct(
        status = {"ready": ready, "total": len(descendants)},
        conditions = [struct(type = "AllReady", status = "True" if ready == len(descendants) else "False")],
    )
`

// TestStdStarlark runs stdstarlark through the real server: the shipped manifest and a
// provider config carrying the program are applied over the REST API, the provider is
// served over HTTP beside a leaf for the child kind; the root composes children that
// converge (a value flows from the net into each app) and its status rolls up. A program
// that never ends fails its resource at the step limit.
func TestStdStarlark(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.putStarlarkKinds()
	for _, c := range []map[string]any{
		{"name": "star-default", "kind": "stdstarlark", "kind_version": 1, "is_default": true,
			"spec": map[string]any{"apps": 2}, "data": []byte(starProgram)},
		{"name": "star-spin", "kind": "stdstarlark", "kind_version": 1,
			"data": []byte("def compose(spec, config):\n    while True:\n        pass\n")},
	} {
		if code, body := s.call("POST", "/providerconfigs", c); code != 201 {
			t.Fatalf("providerconfig %s = %d %s", c["name"], code, body)
		}
	}
	s.serveProvider("std", stdstarlark.New("stdstarlark"), starLeaf{})
	for _, r := range []map[string]any{
		{"kind": "stdstarlark", "kind_version": 1, "name": "shop", "spec": map[string]any{"name": "shop"}},
		{"kind": "stdstarlark", "kind_version": 1, "name": "spin", "spec": map[string]any{"name": "spin"}, "provider_config_ref": "star-spin"},
	} {
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s = %d %s", r["name"], code, body)
		}
	}

	// The composition converges and the rollup reports it.
	var root struct {
		model.Resource
		Conditions []model.StoredCondition `json:"conditions"`
	}
	waitFor(t, 60*time.Second, "shop Ready with its rollup", func() bool {
		_, body := s.call("GET", "/resources/stdstarlark/shop", nil)
		return json.Unmarshal(body, &root) == nil && root.PhaseOf() == model.PhaseReady &&
			strings.Contains(string(root.Status), `"ready":3`)
	})
	var st struct{ Ready, Total int }
	if err := json.Unmarshal(root.Status, &st); err != nil || st.Total != 3 {
		t.Errorf("shop status = %s; want 3 of 3 ready", root.Status)
	}
	if len(root.Conditions) == 0 || root.Conditions[0].Type != "AllReady" || root.Conditions[0].Status != "True" {
		t.Errorf("shop conditions = %+v; want AllReady True", root.Conditions)
	}
	for i := range 2 {
		d, ok := s.detail(fmt.Sprintf("starleaf/shop-app-%d", i))
		if !ok || d.PhaseOf() != model.PhaseReady || !strings.Contains(string(d.Status), `"net_id":"id-shop-net"`) {
			t.Errorf("shop-app-%d = %s %s; want Ready with the net's id flowed in", i, d.Phase, d.Status)
		}
	}

	// The endless program fails its resource, naming the step limit.
	var spin model.Resource
	waitFor(t, 60*time.Second, "spin Failed", func() bool {
		_, body := s.call("GET", "/resources/stdstarlark/spin", nil)
		return json.Unmarshal(body, &spin) == nil && spin.PhaseOf() == model.PhaseFailed
	})
	if want := fmt.Sprintf("step limit of %d exceeded", stdstarlark.MaxSteps); !strings.Contains(spin.LastError, want) ||
		!strings.Contains(spin.LastError, "compose.star:") {
		t.Errorf("spin last_error = %q; want the program position and %q", spin.LastError, want)
	}
	s.checkInvariants()
}

// starBundle is a zip bundle of two files: compose.star loads the apps and their edges
// from lib/apps.star.
var starBundle = map[string]string{
	"compose.star": `
load("lib/apps.star", "apps")

def compose(spec, config):
    net = spec["name"] + "-net"
    children, edges = apps(spec["name"], net, config["apps"])
    return struct(children = [struct(kind = "starleaf", kind_version = 1, name = net, spec = {})] + children, edges = edges)
`,
	"lib/apps.star": `
def apps(name, net, n):
    children, edges = [], []
    for i in range(n):
        app = "%s-app-%d" % (name, i)
        children.append(struct(kind = "starleaf", kind_version = 1, name = app, spec = {}))
        edges.append(struct(
            dependent = struct(kind = "starleaf", name = app),
            dependency = struct(kind = "starleaf", name = net),
            values = [struct(dependent = "/net_id", source = "/id")],
        ))
    return children, edges
`,
}

// zipBundle returns a zip of files, by path, as `zip -r` makes one.
func zipBundle(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for name, body := range files {
		fw, err := w.Create(name)
		must(t, err)
		_, err = fw.Write([]byte(body))
		must(t, err)
	}
	must(t, w.Close())
	return b.Bytes()
}

// TestStdStarlarkBundle runs stdstarlark through the real server with a zip bundle of
// two files as the provider config's data: compose.star loads lib/apps.star, and the
// composition converges with the net's id flowing into each app. A bundle whose
// compose.star loads a module it lacks fails its resource, naming the module.
func TestStdStarlarkBundle(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.putStarlarkKinds()
	for _, c := range []map[string]any{
		{"name": "star-default", "kind": "stdstarlark", "kind_version": 1, "is_default": true,
			"spec": map[string]any{"apps": 2}, "data": zipBundle(t, starBundle)},
		{"name": "star-broken", "kind": "stdstarlark", "kind_version": 1,
			"data": zipBundle(t, map[string]string{"compose.star": starBundle["compose.star"]})},
	} {
		if code, body := s.call("POST", "/providerconfigs", c); code != 201 {
			t.Fatalf("providerconfig %s = %d %s", c["name"], code, body)
		}
	}
	s.serveProvider("std", stdstarlark.New("stdstarlark"), starLeaf{})
	for _, r := range []map[string]any{
		{"kind": "stdstarlark", "kind_version": 1, "name": "shop", "spec": map[string]any{"name": "shop"}},
		{"kind": "stdstarlark", "kind_version": 1, "name": "broken", "spec": map[string]any{"name": "broken"}, "provider_config_ref": "star-broken"},
	} {
		if code, body := s.call("POST", "/resources", r); code != 201 {
			t.Fatalf("apply %s = %d %s", r["name"], code, body)
		}
	}

	s.waitReady("stdstarlark/shop")
	for i := range 2 {
		d, ok := s.detail(fmt.Sprintf("starleaf/shop-app-%d", i))
		if !ok || d.PhaseOf() != model.PhaseReady || !strings.Contains(string(d.Status), `"net_id":"id-shop-net"`) {
			t.Errorf("shop-app-%d = %s %s; want Ready with the net's id flowed in", i, d.Phase, d.Status)
		}
	}
	s.waitFailed("stdstarlark/broken", "no lib/apps.star in the bundle")
	s.checkInvariants()
}

// putStarlarkKinds applies stdstarlark's shipped manifest and starleaf, the
// leaf kind its test programs compose.
func (s *server) putStarlarkKinds() {
	s.t.Helper()
	for kind, m := range map[string]json.RawMessage{
		"stdstarlark": stdstarlark.Manifest(),
		"starleaf":    json.RawMessage(`{"kind":"starleaf","kind_version":1,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`),
	} {
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", m); code != 201 {
			s.t.Fatalf("manifest %s = %d %s", kind, code, body)
		}
	}
}
