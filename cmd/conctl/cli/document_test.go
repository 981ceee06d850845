package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDocuments(t *testing.T) {
	t.Parallel()

	// Each document renders as its canonical JSON, or "error: <text>".
	render := func(docs []document) (sources, bodies []string) {
		for _, d := range docs {
			sources = append(sources, d.source)
			if d.err != nil {
				bodies = append(bodies, "error: "+d.err.Error())
				continue
			}
			b, _ := json.Marshal(d.fields)
			bodies = append(bodies, string(b))
		}
		return sources, bodies
	}

	for _, tc := range []struct {
		name   string
		reason string
		input  string
		want   []string // bodies; an "error: " entry matches by prefix
	}{
		{name: "JSONObject", reason: "the common case",
			input: `{"a": 1, "b": {"c": [1, 2.5, "x"]}}`, want: []string{`{"a":1,"b":{"c":[1,2.5,"x"]}}`}},
		{name: "JSONArray", reason: "an array is a list of documents",
			input: `[{"a": 1}, {"a": 2}]`, want: []string{`{"a":1}`, `{"a":2}`}},
		{name: "JSONStream", reason: "concatenated objects are several documents",
			input: "{\"a\": 1}\n{\"a\": 2}\n", want: []string{`{"a":1}`, `{"a":2}`}},
		{name: "JSONBigNumberKept", reason: "numbers pass through untouched",
			input: `{"n": 12345678901234567890}`, want: []string{`{"n":12345678901234567890}`}},
		{name: "JSONArrayOfNonObjects", reason: "every document must be an object",
			input: `[{"a": 1}, 2]`, want: []string{`{"a":1}`, "error: document is not an object"}},
		{name: "YAMLSingle", reason: "plain YAML",
			input: "a: 1\nb: [x, z]\n", want: []string{`{"a":1,"b":["x","z"]}`}},
		{name: "YAML11Booleans", reason: "sigs.k8s.io/yaml reads YAML 1.1: yes/no/on/off/y/n are booleans (quote them)",
			input: "a: yes\nb: off\nc: \"yes\"\n", want: []string{`{"a":true,"b":false,"c":"yes"}`}},
		{name: "YAMLFlowMapping", reason: "starts like JSON but is YAML",
			input: "{a: 1, b: two}", want: []string{`{"a":1,"b":"two"}`}},
		{name: "YAMLMultiWithEmptyAndComments", reason: "empty and comment-only documents are skipped",
			input: "---\n# head\na: 1\n---\n\n---\n# nothing\n---\na: 2\n...\n", want: []string{`{"a":1}`, `{"a":2}`}},
		{name: "YAMLInlineAfterMarker", reason: "text after '--- ' starts the document",
			input: "--- {a: 1}\n--- {a: 2}\n", want: []string{`{"a":1}`, `{"a":2}`}},
		{name: "YAMLList", reason: "a YAML list is a list of documents",
			input: "- a: 1\n- a: 2\n", want: []string{`{"a":1}`, `{"a":2}`}},
		{name: "YAMLCRLFAndBOM", reason: "Windows files work",
			input: "\xef\xbb\xbfa: 1\r\n---\r\na: 2\r\n", want: []string{`{"a":1}`, `{"a":2}`}},
		{name: "YAMLBlockScalarWithDashes", reason: "an indented --- inside a block scalar is content",
			input: "script: |\n  echo a\n  ---\n  echo b\n", want: []string{`{"script":"echo a\n---\necho b\n"}`}},
		{name: "YAMLBrokenMiddleDocument", reason: "one bad document does not hide the others",
			input: "a: 1\n---\na: [\n---\na: 3\n", want: []string{`{"a":1}`, "error: cannot parse YAML", `{"a":3}`}},
		{name: "YAMLDuplicateKey", reason: "a duplicated key is a mistake, not a silent overwrite",
			input: "a: 1\na: 2\n", want: []string{"error: cannot parse YAML"}},
		{name: "YAMLScalar", reason: "a scalar is not an object",
			input: "just text\n", want: []string{"error: document is not an object"}},
		{name: "Empty", reason: "an empty file is an error, not a silent no-op",
			input: " \n\t\n", want: []string{"error: no documents found"}},
		{name: "OnlyComments", reason: "likewise a file of comments",
			input: "# nothing here\n---\n", want: []string{"error: no documents found"}},
		{name: "BrokenJSON", reason: "JSON that is not YAML either is reported as a JSON error",
			input: `{"a": 1`, want: []string{"error: cannot parse JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, got := render(parseDocuments("f", []byte(tc.input)))
			if len(got) == len(tc.want) {
				for i, w := range tc.want {
					if strings.HasPrefix(w, "error: ") && strings.HasPrefix(got[i], w) {
						got[i] = w
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: documents (-want +got):\n%s", tc.reason, diff)
			}
		})
	}

	t.Run("SourcesNumberedOnlyWhenSeveral", func(t *testing.T) {
		t.Parallel()
		one, _ := render(parseDocuments("one.yaml", []byte("a: 1\n")))
		two, _ := render(parseDocuments("two.yaml", []byte("a: 1\n---\na: 2\n")))
		if diff := cmp.Diff([]string{"one.yaml"}, one); diff != "" {
			t.Error(diff)
		}
		if diff := cmp.Diff([]string{"two.yaml (document 1)", "two.yaml (document 2)"}, two); diff != "" {
			t.Error(diff)
		}
	})
}

func TestAge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		ago  string
		want string
	}{
		{"0s", "0s"}, {"119s", "119s"}, {"2m", "2m"}, {"119m", "119m"}, {"2h", "2h"},
		{"47h", "47h"}, {"48h", "2d"}, {"-5s", "0s"},
	} {
		d, err := time.ParseDuration(tc.ago)
		if err != nil {
			t.Fatal(err)
		}
		if got := age(now.Add(-d).Format("2006-01-02T15:04:05Z07:00"), now); got != tc.want {
			t.Errorf("age(%s ago) = %q, want %q", tc.ago, got, tc.want)
		}
	}
	if got := age("not a time", now); got != "" {
		t.Errorf("age(garbage) = %q", got)
	}
}
