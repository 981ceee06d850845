package classic

import (
	"encoding/json"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// doc is the union of the identifying fields of every fixture document.
type doc struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
	Name        string `json:"name"`
	IsDefault   bool   `json:"is_default"`
	WatchKind   string `json:"watch_kind"`
	Transition  string `json:"transition"`
	Reactor     string `json:"reactor"`
	Spec        struct {
		Domains []struct {
			Name  string   `json:"name"`
			Teams []string `json:"teams"`
		} `json:"domains"`
	} `json:"spec"`
}

func decode(t *testing.T, what string, raw json.RawMessage) doc {
	t.Helper()
	var d doc
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not a JSON object: %v\n%s", what, err, raw)
	}
	return d
}

func TestObjectsFor(t *testing.T) {
	t.Parallel()
	// The manifests' apply order: a kind before the configs and the binding
	// that name it, so it must not change by accident.
	wantManifests := []string{"account/1", "vpc/1", "vpc/2", "tgw/1", "route/1", "statussink/1", "classicbom/1"}
	wantConfigs := []string{"vpc/1 vpc-v1-default", "vpc/2 vpc-v2-default", "statussink/1 statussink-default"}
	// teams per BOM, from the fixtures' documented shapes (README).
	wantTeams := map[string]int{"small": 8, "updated": 8, "large": 1777}
	wantDomains := map[string]int{"small": 3, "updated": 3, "large": 58}

	if got := slices.Sorted(slices.Values(BOMs)); !slices.Equal(got, []string{"large", "small", "updated"}) {
		t.Fatalf("BOMs = %v, want large, small and updated", BOMs)
	}
	for _, bom := range BOMs {
		t.Run(bom, func(t *testing.T) {
			t.Parallel()
			o, err := ObjectsFor(bom)
			if err != nil {
				t.Fatalf("ObjectsFor(%q): %v", bom, err)
			}
			if len(o.Manifests) != 7 || len(o.ProviderConfigs) != 3 || len(o.Bindings) != 1 || len(o.Resources) != 1 {
				t.Fatalf("ObjectsFor(%q) has %d manifests, %d configs, %d bindings, %d resources; want 7, 3, 1, 1",
					bom, len(o.Manifests), len(o.ProviderConfigs), len(o.Bindings), len(o.Resources))
			}
			var manifests []string
			for i, m := range o.Manifests {
				d := decode(t, "manifest", m)
				manifests = append(manifests, d.Kind+"/"+strconv.Itoa(d.KindVersion))
				if d.Kind == "" || d.KindVersion < 1 {
					t.Errorf("manifest %d has kind %q version %d", i, d.Kind, d.KindVersion)
				}
			}
			if !slices.Equal(manifests, wantManifests) {
				t.Errorf("manifests = %v, want %v", manifests, wantManifests)
			}
			var configs []string
			for _, c := range o.ProviderConfigs {
				d := decode(t, "provider config", c)
				configs = append(configs, d.Kind+"/"+strconv.Itoa(d.KindVersion)+" "+d.Name)
				if !d.IsDefault {
					t.Errorf("provider config %s is not a default", d.Name)
				}
			}
			if !slices.Equal(configs, wantConfigs) {
				t.Errorf("provider configs = %v, want %v", configs, wantConfigs)
			}
			b := decode(t, "binding", o.Bindings[0])
			if b.WatchKind != "classicbom" || b.Transition != "synced" || b.Reactor != "statussink" || b.Name == "" {
				t.Errorf("binding = %+v, want a named classicbom synced → statussink", b)
			}
			r := decode(t, "resource", o.Resources[0])
			if r.Kind != "classicbom" || r.KindVersion != 1 || r.Name != "classic" {
				t.Errorf("resource is %s/%d %q, want classicbom/1 \"classic\"", r.Kind, r.KindVersion, r.Name)
			}
			teams := 0
			for _, d := range r.Spec.Domains {
				teams += len(d.Teams)
			}
			if len(r.Spec.Domains) != wantDomains[bom] || teams != wantTeams[bom] {
				t.Errorf("BOM %s has %d domains and %d teams, want %d and %d",
					bom, len(r.Spec.Domains), teams, wantDomains[bom], wantTeams[bom])
			}
			// The whole document marshals as the `objects` command prints it.
			out, err := json.Marshal(o)
			if err != nil {
				t.Fatalf("marshal objects: %v", err)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(out, &keys); err != nil {
				t.Fatalf("objects do not round-trip: %v", err)
			}
			for _, k := range []string{"manifests", "providerconfigs", "bindings", "resources"} {
				if _, ok := keys[k]; !ok {
					t.Errorf("objects JSON has no %q key: %s", k, strings.Join(slices.Sorted(maps.Keys(keys)), ", "))
				}
			}
		})
	}
}

// TestObjectsForBOMsDiffer checks each name selects its own fixture: the
// three resources are not the same document.
func TestObjectsForBOMsDiffer(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, bom := range BOMs {
		o, err := ObjectsFor(bom)
		if err != nil {
			t.Fatalf("ObjectsFor(%q): %v", bom, err)
		}
		r := string(o.Resources[0])
		if other, ok := seen[r]; ok {
			t.Errorf("BOMs %s and %s return the same resource", other, bom)
		}
		seen[r] = bom
	}
}

func TestObjectsForUnknownBOM(t *testing.T) {
	t.Parallel()
	for _, bom := range []string{"", "medium", "Small", "resource-classicbom.json"} {
		o, err := ObjectsFor(bom)
		if err == nil {
			t.Errorf("ObjectsFor(%q) = %d manifests, no error; want an error", bom, len(o.Manifests))
			continue
		}
		for _, want := range append([]string{`"` + bom + `"`}, BOMs...) {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ObjectsFor(%q) error %q does not name %s", bom, err, want)
			}
		}
		if o.Manifests != nil || o.Resources != nil {
			t.Errorf("ObjectsFor(%q) returned objects with its error", bom)
		}
	}
}

func TestFixture(t *testing.T) {
	t.Parallel()
	b, err := Fixture("account.kind.json")
	if err != nil {
		t.Fatalf("Fixture(account.kind.json): %v", err)
	}
	if d := decode(t, "account.kind.json", b); d.Kind != "account" {
		t.Errorf("account.kind.json has kind %q", d.Kind)
	}
	// Subdirectories are reachable by relative path.
	if _, err := Fixture("versioning/resource-vpc-flip-to-v2.json"); err != nil {
		t.Errorf("Fixture(versioning/...): %v", err)
	}
	for _, name := range []string{"no-such.json", "versioning/no-such.json", "../classic.go"} {
		if _, err := Fixture(name); err == nil {
			t.Errorf("Fixture(%q) succeeded, want an error", name)
		} else if !strings.Contains(err.Error(), name) {
			t.Errorf("Fixture(%q) error %q does not name the fixture", name, err)
		}
	}
}

// TestEveryFixtureIsJSON walks the embedded tree: a fixture that is not valid
// JSON (or not an object with a kind or a name) breaks a demo or a test that
// applies it.
func TestEveryFixtureIsJSON(t *testing.T) {
	t.Parallel()
	n := 0
	err := fs.WalkDir(Files, "testfixtures", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		n++
		name := strings.TrimPrefix(p, "testfixtures/")
		if !strings.HasSuffix(name, ".json") {
			t.Errorf("%s: not a .json fixture", p)
			return nil
		}
		b, err := Fixture(name)
		if err != nil {
			t.Errorf("Fixture(%q): %v", name, err)
			return nil
		}
		if d := decode(t, p, b); d.Kind == "" && d.Name == "" {
			t.Errorf("%s has neither kind nor name", p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk fixtures: %v", err)
	}
	if n < 20 {
		t.Errorf("walked %d fixtures, want the whole tree (at least 20)", n)
	}
}
