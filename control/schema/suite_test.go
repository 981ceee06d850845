package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// suiteWant is the number of tests in the required draft 2020-12 set of the
// vendored JSON-Schema-Test-Suite snapshot (see its SOURCE.md). It changes
// only when the snapshot does.
const suiteWant = 1299

// TestJSONSchemaTestSuite runs the official suite through compile, the same
// path Compile uses, with the suite's localhost remotes served from memory.
func TestJSONSchemaTestSuite(t *testing.T) {
	t.Parallel()

	root := findSuite(t)
	remotes := loadRemotes(t, filepath.Join(root, "remotes"))
	files, err := filepath.Glob(filepath.Join(root, "draft2020-12", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no test files in %s", filepath.Join(root, "draft2020-12"))
	}

	var total, passed int
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var groups []struct {
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Tests       []struct {
				Description string          `json:"description"`
				Data        json.RawMessage `json:"data"`
				Valid       bool            `json:"valid"`
			} `json:"tests"`
		}
		if err := json.Unmarshal(data, &groups); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		name := filepath.Base(file)
		for _, g := range groups {
			total += len(g.Tests)
			sch, err := compile(g.Schema, remotes)
			if err != nil {
				t.Errorf("%s / %s: compile: %v", name, g.Description, err)
				continue
			}
			for _, tc := range g.Tests {
				err := sch.Validate(tc.Data)
				var verr *ValidationError
				if err != nil && !errors.As(err, &verr) {
					t.Errorf("%s / %s / %s: %v", name, g.Description, tc.Description, err)
					continue
				}
				if got := err == nil; got != tc.Valid {
					t.Errorf("%s / %s / %s: valid = %v, want %v (%v)", name, g.Description, tc.Description, got, tc.Valid, err)
					continue
				}
				passed++
			}
		}
	}
	t.Logf("JSON-Schema-Test-Suite draft2020-12: %d of %d tests pass (%d files)", passed, total, len(files))
	if total != suiteWant || passed != suiteWant {
		t.Errorf("passed %d of %d, want %d of %d", passed, total, suiteWant, suiteWant)
	}
}

// findSuite returns the repository's vendored copy of the suite
// (testdata/json-schema-test-suite, see its SOURCE.md). go test runs in the
// package directory, so the path is fixed relative to it.
func findSuite(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "json-schema-test-suite")
	if _, err := os.Stat(filepath.Join(dir, "draft2020-12")); err != nil {
		t.Fatalf("vendored JSON-Schema-Test-Suite missing: %v", err)
	}
	return dir
}

// memLoader serves the suite's remotes at http://localhost:1234/ from memory
// and refuses every other URL, as production does.
type memLoader map[string]any

func (m memLoader) Load(url string) (any, error) {
	if doc, ok := m[url]; ok {
		return doc, nil
	}
	return nil, fmt.Errorf("test loader: %s is not a suite remote: %w", url, ErrExternalRef)
}

func loadRemotes(t *testing.T, dir string) memLoader {
	t.Helper()
	m := memLoader{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		m["http://localhost:1234/"+filepath.ToSlash(rel)] = doc
		return nil
	})
	if err != nil {
		t.Fatalf("load remotes: %v", err)
	}
	if len(m) == 0 {
		t.Fatalf("no remotes in %s", dir)
	}
	return m
}
