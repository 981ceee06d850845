package gentypes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/internal/testkit/nodetest"
)

// The type checks: every example kind's output compiles (go vet), and
// type-checks (tsc --noEmit --strict, mypy --strict), and every example
// document the server accepts for that kind (a resource's spec, a provider
// config's spec) is a value of the generated type: Go decodes it with
// unknown fields refused, TypeScript and Python take it as a literal of the
// type, where a misspelt, missing or mistyped property is an error.

// sample is one example document of a manifest's axis.
type sample struct {
	m    int    // index of the manifest
	axis string // "Spec" or "Config"
	doc  json.RawMessage
}

// exampleSamples returns the resources' and provider configs' specs under
// examples/, each with every manifest of its kind version in the same
// example whose schema it validates against. (Across examples a document
// may carry properties an open object of another example's manifest does
// not name; the generated types name only the declared ones.)
func exampleSamples(t *testing.T, ms []*model.KindManifest, examples []string) []sample {
	t.Helper()
	var out []sample
	err := filepath.WalkDir(examplesDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".json" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		type document struct {
			Kind        string          `json:"kind"`
			KindVersion int             `json:"kind_version"`
			Spec        json.RawMessage `json:"spec"`
		}
		var docs []document
		if err := json.Unmarshal(data, &docs); err != nil {
			var one document
			if json.Unmarshal(data, &one) != nil {
				return nil // not a resource, config or list of them
			}
			docs = []document{one}
		}
		axis := "Spec"
		if strings.HasPrefix(d.Name(), "providerconfig") {
			axis = "Config"
		}
		for _, doc := range docs {
			for i, m := range ms {
				if m.Kind != doc.Kind || m.KindVersion != doc.KindVersion || examples[i] != exampleOf(path) || len(doc.Spec) == 0 {
					continue
				}
				raw := m.SpecSchema
				if axis == "Config" {
					raw = m.ConfigSchema
				}
				s, err := schema.Compile(raw)
				if err != nil {
					return err
				}
				if s.Validate(doc.Spec) == nil {
					out = append(out, sample{i, axis, doc.Spec})
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found %d example documents; the walk is broken", len(out))
	}
	return out
}

// moduleName is a file or package name for manifest i.
func moduleName(ms []*model.KindManifest, i int) string {
	return fmt.Sprintf("m%d_%s_v%d", i, strings.ReplaceAll(ms[i].Kind, "-", "_"), ms[i].KindVersion)
}

func run(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func generateAll(t *testing.T, ms []*model.KindManifest, lang string) [][]byte {
	t.Helper()
	out := make([][]byte, len(ms))
	for i, m := range ms {
		src, err := Generate(m, Options{Lang: lang})
		if err != nil {
			t.Fatalf("%s/%d: %v", m.Kind, m.KindVersion, err)
		}
		out[i] = src
	}
	return out
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExamplesGo(t *testing.T) {
	ms, examples := exampleManifests(t)
	samples := exampleSamples(t, ms, examples)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), []byte("module typecheck\n\ngo 1.22\n"))
	var main strings.Builder
	main.WriteString("package main\n\nimport (\n\t\"encoding/json\"\n\t\"strings\"\n")
	for i, src := range generateAll(t, ms, "go") {
		name := moduleName(ms, i)
		write(t, filepath.Join(dir, name, "types.go"), src)
		if slices.ContainsFunc(samples, func(s sample) bool { return s.m == i }) {
			fmt.Fprintf(&main, "\t%s \"typecheck/%s\"\n", name, name)
		}
	}
	main.WriteString(")\n\n// decode refuses a document that does not fit v.\nfunc decode(doc string, v any) {\n" +
		"\td := json.NewDecoder(strings.NewReader(doc))\n\td.DisallowUnknownFields()\n" +
		"\tif err := d.Decode(v); err != nil {\n\t\tpanic(err.Error() + \": \" + doc)\n\t}\n}\n\nfunc main() {\n")
	for i, s := range samples {
		fmt.Fprintf(&main, "\tvar v%d %s.%s\n\tdecode(%s, &v%d)\n", i, moduleName(ms, s.m), s.axis, strconv.Quote(string(s.doc)), i)
	}
	main.WriteString("}\n")
	write(t, filepath.Join(dir, "main.go"), []byte(main.String()))
	run(t, dir, "go", "vet", "./...")
	run(t, dir, "go", "run", ".")
}

// tscDir holds the pinned TypeScript compiler.
const tscDir = "testdata/tsc"

func TestExamplesTypeScript(t *testing.T) {
	ms, examples := exampleManifests(t)
	samples := exampleSamples(t, ms, examples)
	nodetest.LookPath(t, "node")
	nodetest.NPMCI(t, tscDir)
	tsc, err := filepath.Abs(filepath.Join(tscDir, "node_modules", "typescript", "bin", "tsc"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := []string{"check.ts"}
	for i, src := range generateAll(t, ms, "typescript") {
		name := moduleName(ms, i)
		write(t, filepath.Join(dir, name+".ts"), src)
		files = append(files, name+".ts")
	}
	var check strings.Builder
	for i, s := range samples {
		typ := pascal(ms[s.m].Kind) + s.axis
		fmt.Fprintf(&check, "import type { %s as T%d } from \"./%s\";\nexport const v%d: T%d = %s;\n", typ, i, moduleName(ms, s.m), i, i, s.doc)
	}
	write(t, filepath.Join(dir, "check.ts"), []byte(check.String()))
	run(t, dir, "node", append([]string{tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "es2022",
		"--moduleResolution", "bundler", "--verbatimModuleSyntax"}, files...)...)
}

// python is Debian's interpreter, the one whose python3-mypy package the
// Makefile installs.
const python = "/usr/bin/python3"

func TestExamplesPython(t *testing.T) {
	ms, examples := exampleManifests(t)
	samples := exampleSamples(t, ms, examples)
	if err := exec.Command(python, "-m", "mypy", "--version").Run(); err != nil {
		t.Fatalf("%s -m mypy does not run (%v): install Debian's python3-mypy (make test does, as root)", python, err)
	}
	dir := t.TempDir()
	for i, src := range generateAll(t, ms, "python") {
		write(t, filepath.Join(dir, moduleName(ms, i)+".py"), src)
	}
	var check strings.Builder
	check.WriteString("from __future__ import annotations\n\n")
	for i, s := range samples {
		typ := pascal(ms[s.m].Kind) + s.axis
		fmt.Fprintf(&check, "from %s import %s as T%d\n", moduleName(ms, s.m), typ, i)
	}
	for i, s := range samples {
		var v any
		if err := json.Unmarshal(s.doc, &v); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&check, "\nv%d: T%d = %s\n", i, i, pyValue(v))
	}
	write(t, filepath.Join(dir, "check.py"), []byte(check.String()))
	run(t, dir, python, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.DevNull, ".")
	// The modules also import: a forward reference evaluated at import
	// time would fail here, not under mypy.
	run(t, dir, python, "-B", "check.py")
}

// pyValue renders a decoded JSON value as a Python literal.
func pyValue(v any) string {
	switch v := v.(type) {
	case map[string]any:
		keys := slices.Sorted(mapKeys(v))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = literal(k) + ": " + pyValue(v[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = pyValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return pyLiteral(v)
}
