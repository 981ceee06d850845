package gentypes

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the generator")

// goldenKind is the kind that uses every construct the generator maps.
const goldenKind = "testdata/everything.kind.json"

// goldenFile is where each language's output of goldenKind is kept.
var goldenFile = map[string]string{
	"go":         "testdata/everything.go.golden",
	"typescript": "testdata/everything.ts.golden",
	"python":     "testdata/everything.py.golden",
}

func readManifest(t *testing.T, path string) *model.KindManifest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m model.KindManifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &m
}

func TestGolden(t *testing.T) {
	m := readManifest(t, goldenKind)
	for _, lang := range Languages {
		t.Run(lang, func(t *testing.T) {
			got, err := Generate(m, Options{Lang: lang})
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(goldenFile[lang], got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenFile[lang])
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("output differs from %s (-want +got); rerun with -update if the change is meant:\n%s", goldenFile[lang], diff)
			}
		})
	}
}

// TestGoldenConstructs pins what each construct becomes, so a golden file
// rewritten with -update cannot silently lose one.
func TestGoldenConstructs(t *testing.T) {
	m := readManifest(t, goldenKind)
	want := map[string][]string{
		"go": {
			"package everything",
			"Name     string      `json:\"name\"`",                     // required scalar
			"Count    *int64         `json:\"count,omitempty\"`",       // optional scalar
			"type SpecMode string",                                     // enum
			"SpecModeDryRun SpecMode = \"dry-run\"",                    // enum constant
			"Tags    map[string]string `json:\"tags,omitempty\"`",      // additionalProperties map
			"Rules   []SpecRulesItem   `json:\"rules,omitempty\"`",     // array of objects
			"type Subnet struct",                                       // $defs
			"Target  json.RawMessage   `json:\"target,omitempty\"`",    // oneOf fallback
			"Note     *string     `json:\"note,omitempty\"`",           // anyOf with null
			"Owner string  `json:\"owner\"`",                           // allOf merged
			"Parent   *Node  `json:\"parent,omitempty\"`",              // recursion
			"type RebootNowInput map[string]any",                       // verb without a schema
			"type SnapshotInput struct",                                // verb input
			"EndpointURL string `json:\"endpoint_url\"`",               // config
			"IDOrName json.RawMessage `json:\"id_or_name,omitempty\"`", // several types
			"Self *Spec `json:\"self,omitempty\"`",                     // $ref to the root
			"AB2 *string `json:\"a_b,omitempty\"`",                     // names that collide in Go
		},
		"typescript": {
			"export interface EveryThingSpec {",
			"  name: string;",
			"  count?: number;",
			`export type EveryThingSpecMode = "fast" | "safe" | "dry-run";`,
			"  tags?: Record<string, string>;",
			"  rules?: EveryThingSpecRulesItem[];",
			`  "to-port"?: number;`,
			"  target?: string | EveryThingSpecTargetOption2;",
			"  note?: string | null;",
			"  [key: string]: unknown;",
			"export type EveryThingRebootNowInput = Record<string, unknown>;",
			"  id_or_name?: number | string;",
			"  self?: EveryThingSpec;",
		},
		"python": {
			"class EveryThingSpec(TypedDict):",
			"    name: str\n",
			"    count: NotRequired[int]\n",
			`EveryThingSpecMode: TypeAlias = Literal["fast", "safe", "dry-run"]`,
			"    tags: NotRequired[dict[str, str]]\n",
			`        "to-port": NotRequired[int],`,
			"    target: NotRequired[str | EveryThingSpecTargetOption2]\n",
			"    note: NotRequired[str | None]\n",
			"EveryThingSpecScale: TypeAlias = float", // floats cannot be Literals
			"EveryThingRebootNowInput: TypeAlias = dict[str, Any]",
			"    id_or_name: NotRequired[int | str]\n",
			`EveryThingSpecMaybe: TypeAlias = Literal["yes", None]`,
		},
	}
	for lang, parts := range want {
		got, err := Generate(m, Options{Lang: lang})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			// gofmt's alignment is not the point: compare with each run of
			// spaces and tabs as one space.
			if !strings.Contains(squeeze(string(got)), squeeze(p)) {
				t.Errorf("%s output lacks %q", lang, p)
			}
		}
	}
}

var blanks = regexp.MustCompile(`[ \t]+`)

func squeeze(s string) string { return blanks.ReplaceAllString(s, " ") }

func TestGenerateRefuses(t *testing.T) {
	m := readManifest(t, goldenKind)
	for _, tc := range []struct {
		name string
		edit func(m *model.KindManifest)
		opts Options
		want string
	}{
		{"UnknownLanguage", func(*model.KindManifest) {}, Options{Lang: "rust"}, `unknown language "rust"`},
		{"BadPackage", func(*model.KindManifest) {}, Options{Lang: "go", Package: "my-pkg"}, `package name "my-pkg" is not a Go identifier`},
		{"InvalidSchema", func(m *model.KindManifest) { m.SpecSchema = json.RawMessage(`{"type": 5}`) }, Options{Lang: "go"}, "spec_schema: schema: not a valid draft 2020-12 schema"},
		{"ExternalRef", func(m *model.KindManifest) {
			m.StatusSchema = json.RawMessage(`{"$ref": "https://example.com/s.json"}`)
		}, Options{Lang: "python"}, "status_schema: schema: external $ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *m
			tc.edit(&c)
			_, err := Generate(&c, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{
		"vpc_id": "VPCID", "to-port": "ToPort", "endpointUrl": "EndpointURL", "2fa": "X2fa",
		"tgw-host": "TgwHost", "": "X", "naïve": "NaVe",
	} {
		if got := pascal(in); got != want {
			t.Errorf("pascal(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"vpc": "vpc", "tgw-host": "tgwhost", "3d": "kind3d", "Box": "box"} {
		if got := DefaultPackage(in); got != want {
			t.Errorf("DefaultPackage(%q) = %q, want %q", in, got, want)
		}
	}
}

// exampleManifests returns every kind manifest under the repository's
// examples/ (a JSON file with kind, kind_version and reactions), and the
// golden and the docs' kinds. Several files may hold the same kind version (the versioning
// example's breaking and additive edits), so each is kept, with the example
// it belongs to (examples/<example>/...; "" for testdata's).
func exampleManifests(t *testing.T) (ms []*model.KindManifest, examples []string) {
	t.Helper()
	ms = []*model.KindManifest{readManifest(t, goldenKind), readManifest(t, "testdata/disk.kind.json")}
	examples = []string{"", ""}
	err := filepath.WalkDir(examplesDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".json" || strings.HasPrefix(d.Name(), "package") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var probe map[string]json.RawMessage
		if json.Unmarshal(data, &probe) != nil || probe["reactions"] == nil || probe["kind_version"] == nil {
			return nil
		}
		ms = append(ms, readManifest(t, path))
		examples = append(examples, exampleOf(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 10 {
		t.Fatalf("found %d manifests under examples/; the walk is broken", len(ms)-2)
	}
	return ms, examples
}

// examplesDir is the repository's examples/.
const examplesDir = "../../../examples"

// exampleOf is the example a file under examplesDir belongs to.
func exampleOf(path string) string {
	rel, _ := filepath.Rel(examplesDir, path)
	first, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	return first
}

// TestDocsExample keeps docs/conctl.md's gen-types example the generator's
// real output for testdata/disk.kind.json.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/conctl.md")
	if err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, "testdata/disk.kind.json")
	for lang, fence := range map[string]string{"go": "```go\n", "typescript": "```ts\n", "python": "```python\n"} {
		src, err := Generate(m, Options{Lang: lang})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, []byte(fence+string(src)+"```\n")) {
			t.Errorf("docs/conctl.md does not show the %s output of testdata/disk.kind.json; it is now:\n%s", lang, src)
		}
	}
}
