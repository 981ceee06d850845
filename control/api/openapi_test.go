package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/store"
)

func TestComponentName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind    string
		version int
		axis    string
		want    string
	}{
		{"account", 1, "Spec", "AccountSpec"},
		{"vpc", 1, "Config", "VpcConfig"},
		{"vpc", 2, "Spec", "VpcV2Spec"},
		{"s3-bucket", 1, "Status", "S3BucketStatus"},
		{"a-b-c", 12, "Spec", "ABCV12Spec"},
	} {
		if got := api.ComponentName(tc.kind, tc.version, tc.axis); got != tc.want {
			t.Errorf("ComponentName(%q, %d, %q) = %q, want %q", tc.kind, tc.version, tc.axis, got, tc.want)
		}
	}
}

// TestStaticOpenAPI: ui/openapi.json, which the console's TypeScript types
// are generated from (ui/src/api-types.ts, see ui/README.md), is the
// document this code builds with no kinds and the endpoint routes on, as
// the console uses them. A changed operation, field or doc string fails
// here until `make ui-types` rewrites both files (this test with
// UPDATE_OPENAPI=1 writes ui/openapi.json). It needs no database: the store
// and the kind cache are never read.
func TestStaticOpenAPI(t *testing.T) {
	t.Parallel()
	const golden = "../../ui/openapi.json"
	st := store.New(nil, store.Config{})
	srv, err := api.New(api.Config{Endpoints: endpointsConfig(t)}, st, store.NewKindCache(st, store.KindCacheConfig{}, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := srv.StaticOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_OPENAPI") == "1" {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", golden, len(got))
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v: run make ui-types", err)
	}
	if !bytes.Equal(got, want) {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of file)"
		}
		t.Fatalf("ui/openapi.json is not the API's document: run make ui-types (it regenerates the console's types too)\n"+
			"line %d: the API's %s\nline %d: the file's %s", i+1, strings.TrimSpace(line(g)), i+1, strings.TrimSpace(line(w)))
	}
}

func TestOpenAPI(t *testing.T) {
	t.Parallel()

	schemas := func(t *testing.T, b *testBundle) map[string]json.RawMessage {
		t.Helper()
		var doc struct {
			OpenAPI    string `json:"openapi"`
			Components struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		b.do(http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK).decode(t, &doc)
		if !strings.HasPrefix(doc.OpenAPI, "3.1") {
			t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
		}
		return doc.Components.Schemas
	}

	t.Run("KindComponentsAppearWithoutRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		if _, ok := schemas(t, b)["AccountSpec"]; ok {
			t.Fatal("AccountSpec published before the account manifest")
		}
		b.putManifest("account", fixture(t, "account.kind.json")).wantApply(t, "created")
		s := schemas(t, b)
		for _, name := range []string{"AccountSpec", "AccountStatus", "AccountConfig"} {
			if _, ok := s[name]; !ok {
				t.Fatalf("%s missing right after the account manifest was applied", name)
			}
		}
		if !strings.Contains(string(s["AccountSpec"]), "team_name") {
			t.Errorf("AccountSpec is not the manifest's spec_schema: %s", s["AccountSpec"])
		}
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		b.putManifest("vpc", fixture(t, "vpc-v2.kind.json")).wantApply(t, "created")
		s = schemas(t, b)
		for _, name := range []string{"VpcSpec", "VpcConfig", "VpcV2Spec", "VpcV2Config"} {
			if _, ok := s[name]; !ok {
				t.Errorf("%s missing", name)
			}
		}
		if !strings.Contains(string(s["VpcV2Spec"]), "region") || strings.Contains(string(s["VpcSpec"]), "region") {
			t.Errorf("versions mixed up: VpcSpec %s / VpcV2Spec %s", s["VpcSpec"], s["VpcV2Spec"])
		}
		// The static document, the console's, leaves every kind out.
		static, err := b.srv.StaticOpenAPI()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(static, []byte("AccountSpec")) || bytes.Contains(static, []byte("x-converge-kind")) {
			t.Error("StaticOpenAPI holds a published kind's schema")
		}
		// Every error is documented as a Problem.
		if _, ok := s["Problem"]; !ok {
			t.Error("the Problem schema is missing")
		}
		// A deleted kind version leaves the document.
		b.do(http.MethodDelete, "/api/v1/kinds/vpc/versions/2/manifest", nil).want(t, http.StatusNoContent)
		if _, ok := schemas(t, b)["VpcV2Spec"]; ok {
			t.Error("VpcV2Spec still published after its manifest was deleted")
		}
		// YAML is served too (the docs page: TestDocsServedFromTheBinary).
		y := b.do(http.MethodGet, "/openapi.yaml", nil).want(t, http.StatusOK)
		if !strings.Contains(string(y.body), "AccountSpec:") {
			t.Error("openapi.yaml lacks AccountSpec")
		}
	})

	t.Run("LocalRefsAreRerooted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("tree", `{"kind":"tree","kind_version":1,"reactions":[],
		  "spec_schema":{"type":"object","properties":{"root":{"$ref":"#/$defs/node"}},
		    "$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}}`).
			wantApply(t, "created")
		spec := string(schemas(t, b)["TreeSpec"])
		if !strings.Contains(spec, `"#/components/schemas/TreeSpec/$defs/node"`) || strings.Contains(spec, `"#/$defs/node"`) {
			t.Errorf("refs not re-rooted: %s", spec)
		}
		// The kind's own validation still uses its original refs.
		b.apply(`{"kind":"tree","kind_version":1,"name":"t","spec":{"root":{"children":[{"children":5}]}}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec.root.children[0].children")
	})

	t.Run("ComponentNameCollision", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		// vpc-v2/1 and vpc/2 both spell VpcV2Spec; the later one in
		// (kind, version) order says its version explicitly.
		b.putManifest("vpc", `{"kind":"vpc","kind_version":2,"reactions":[],"spec_schema":{"type":"object","title":"vpc2"}}`).wantApply(t, "created")
		b.putManifest("vpc-v2", `{"kind":"vpc-v2","kind_version":1,"reactions":[],"spec_schema":{"type":"object","title":"vpcv2"}}`).wantApply(t, "created")
		s := schemas(t, b)
		if !strings.Contains(string(s["VpcV2Spec"]), `"vpc2"`) || !strings.Contains(string(s["VpcV2V1Spec"]), `"vpcv2"`) {
			t.Errorf("collision not resolved: VpcV2Spec %s, VpcV2V1Spec %s", s["VpcV2Spec"], s["VpcV2V1Spec"])
		}
	})
}

func TestLaterRoutesShareTheProblemModel(t *testing.T) {
	t.Parallel()
	type in struct {
		Kind string `path:"kind"`
		Name string `path:"name"`
	}
	// The shape later issues register routes in (events, graph, ...), after
	// New and before serving.
	b := setupWith(t, api.Config{}, func(srv *api.Server, st *store.Store) {
		huma.Register(srv.API(), huma.Operation{OperationID: "get-test-events", Method: http.MethodGet,
			Path: api.Prefix + "/test/{kind}/{name}/events"},
			func(ctx context.Context, p *in) (*struct{}, error) {
				if p.Name == "huma" {
					return nil, huma.Error404NotFound("no events")
				}
				_, err := st.GetResource(ctx, "", p.Kind, p.Name)
				return nil, srv.ErrorFor(ctx, err, "path")
			})
	})
	b.do(http.MethodGet, "/api/v1/test/vpc/x/events", nil).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodGet, "/api/v1/test/vpc/huma/events", nil).wantProblem(t, http.StatusNotFound, "")
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	b.do(http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK).decode(t, &doc)
	if _, ok := doc.Paths["/api/v1/test/{kind}/{name}/events"]; !ok {
		t.Error("a route registered after New is missing from /openapi.json")
	}
}
