package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/convergeplane/converge/control/store"
)

// The fuzz targets of the API's decoders of outside input: request bodies
// (decodeBody, checkJSON, the batch splitter) and query parameters
// (checkParam, parseSelector). Each asserts what the decoder promises, not
// only that it does not panic. `make fuzz` runs them; see
// docs/operations.md, "Fuzzing and mutation".

// applySeeds are apply documents, good and bad, shared by the body targets.
var applySeeds = []string{
	`{"kind":"vpc","kind_version":1,"name":"v","spec":{"cidr":"10.0.0.0/16"}}`,
	`{"kind":"vpc","kind_version":1,"name":"v","labels":{"team":"net","tier":"a=b"},"spec":{},"provider_config_ref":"p"}`,
	`{"kind":"vpc","kind_version":32767,"name":"v","id":"x","status":{"a":1},"phase":"Ready"}`,
	`{"kind":"vpc","kind_version":1e10,"name":"v"}`,
	`{"kind":"vpc","kind_version":"1","name":"v"}`,
	`{"kind":"vpc","kind_version":1,"name":"v","labels":{"team":7}}`,
	`{"kind":"vpc","kind":"vpc","kind_version":1,"name":"v"}`,
	`{"kind":"vpc\u0000","kind_version":1,"name":"v"}`,
	`{"kind":"vpc","kind_version":1,"name":"\ud800"}`,
	`{"kind":"vpc","kind_version":1,"name":"\ud83d\ude00"}`,
	"{\"kind\":\"vpc\xff\",\"kind_version\":1,\"name\":\"v\"}",
	`{"kind":"vpc","kind_version":1,"name":"v","extra":true}`,
	`{"kind":"vpc","kind_version":1,"name":"v"} {}`,
	`{"kind":"vpc","kind_version":1,"name":"v","spec":[[[[[[[[[[]]]]]]]]]]}`,
	`[]`, `"vpc"`, `null`, ``, `{`,
}

// FuzzResourceApply: an apply body parseResourceApply accepts is valid
// UTF-8 JSON whose strings can all be stored, with a version in range, and
// encoding what it read gives a body that parses to the same thing; one it
// refuses is a 400 or 422 naming a field under body.
func FuzzResourceApply(f *testing.F) {
	for _, s := range applySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		pr, p := parseResourceApply(raw)
		if p != nil {
			checkRefusal(t, p, "body")
			return
		}
		if !utf8.Valid(raw) || !json.Valid(raw) {
			t.Fatalf("accepted a body that is not valid UTF-8 JSON: %q", raw)
		}
		if pr.KindVersion < 1 || pr.KindVersion > 32767 {
			t.Fatalf("accepted kind_version %d", pr.KindVersion)
		}
		for _, s := range append([]string{pr.Kind, pr.Name, pr.ProviderConfigRef}, slices.Concat(slices.Collect(maps.Keys(pr.Labels)), slices.Collect(maps.Values(pr.Labels)))...) {
			if !storable(s) {
				t.Fatalf("accepted the string %q, which cannot be stored", s)
			}
		}
		doc := map[string]any{"kind": pr.Kind, "kind_version": pr.KindVersion, "name": pr.Name,
			"labels": pr.Labels, "provider_config_ref": pr.ProviderConfigRef}
		if pr.Spec != nil {
			doc["spec"] = pr.Spec
		}
		again, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("cannot encode what was accepted: %v", err)
		}
		pr2, p := parseResourceApply(again)
		if p != nil {
			t.Fatalf("accepted %q but refused its re-encoding %q: %s", raw, again, p.Detail)
		}
		if pr2.Kind != pr.Kind || pr2.Name != pr.Name || pr2.KindVersion != pr.KindVersion ||
			pr2.ProviderConfigRef != pr.ProviderConfigRef || !maps.Equal(pr2.Labels, pr.Labels) && len(pr.Labels)+len(pr2.Labels) > 0 ||
			!jsonEqual(pr2.Spec, pr.Spec) {
			t.Fatalf("round trip changed the apply:\n%+v\n%+v", pr, pr2)
		}
	})
}

// FuzzCheckJSON: for a syntactically valid UTF-8 document with no \u
// escape, checkJSON refuses exactly the documents with a key repeated in
// one object (a reference walk with encoding/json finds those); any
// document it passes is valid UTF-8.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range applySeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"a":{"b":1,"b":2}}`))
	f.Add([]byte(`[{"a":1},{"a":1}]`))
	f.Add([]byte(`{"a\/b":1,"a/b":2}`))
	// Valid JSON beyond float64's range: the fuzzer's find (CI, 2026-12-02).
	f.Add([]byte(`{"n":1e1000}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := checkJSON("body", raw)
		if p != nil {
			checkRefusal(t, p, "body")
		}
		if !json.Valid(raw) {
			return
		}
		if p == nil && !utf8.Valid(raw) {
			t.Fatalf("passed invalid UTF-8: %q", raw)
		}
		if !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\u`)) {
			return
		}
		if dup := hasDuplicateKey(t, raw); dup != (p != nil) {
			t.Fatalf("duplicate key: reference says %v, checkJSON says %v for %q", dup, p, raw)
		}
	})
}

// hasDuplicateKey walks raw with encoding/json's tokenizer.
func hasDuplicateKey(t *testing.T, raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a valid number beyond float64 (1e1000) is not an error
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			t.Fatalf("reference walk of a valid document: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.key {
			if top.keys[s] {
				return true
			}
			top.keys[s] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			} else {
				top = nil
			}
		}
		if top != nil && top.object {
			top.key = true // a value ended: a key comes next
		}
	}
}

// FuzzQueryParam: a query parameter checkParam passes is valid UTF-8
// without NUL or (outside label_selector's whitespace) control bytes and
// within its byte limit, and a cursor it passes decodes as unpadded
// base64url; a refusal is a 400 naming the query.
func FuzzQueryParam(f *testing.F) {
	for _, s := range [][2]string{
		{"limit", "10"}, {"label_selector", "team=net,tier=a"}, {"label_selector", "a=b\tc"},
		{"cursor", base64.RawURLEncoding.EncodeToString([]byte("1700000000000000.00000000-0000-0000-0000-000000000001"))},
		{"cursor", "not a cursor"}, {"cursor", "AA"}, {"phase", "Ready\x00"}, {"owner", "\xff"}, {"x\x01", "y"},
		{"label_selector", strings.Repeat("a=b,", 1100)},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		p := checkParam(name, value)
		if p != nil {
			checkRefusal(t, p, "query")
			if p.Status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", p.Status)
			}
			return
		}
		limit := MaxQueryValueBytes
		if name == "label_selector" {
			limit = MaxSelectorBytes
		}
		if !storable(name) || !storable(value) || len(value) > limit {
			t.Fatalf("passed %q=%q", name, value)
		}
		control := func(s string, space bool) bool {
			return strings.ContainsFunc(s, func(r rune) bool {
				return (r < 0x20 || r == 0x7f) && (!space || !strings.ContainsRune("\t\r\n", r))
			})
		}
		if control(name, false) || control(value, name == "label_selector") {
			t.Fatalf("passed a control character in %q=%q", name, value)
		}
		if name == "cursor" && value != "" {
			if b, err := base64.RawURLEncoding.DecodeString(value); err != nil || !storable(string(b)) {
				t.Fatalf("passed the cursor %q", value)
			}
		}
	})
}

// FuzzLabelSelector: a selector parseSelector accepts, written back in its
// canonical form, parses to the same requirements, each with a non-empty
// key free of the grammar's characters and the values its operator takes;
// a refusal is a 400 at query.label_selector.
func FuzzLabelSelector(f *testing.F) {
	for _, s := range []string{"", " ", "team=net", "team=net,tier=a=b", " a = b ,c=", "a", "=b", "a=b,,c=d", "a=b,a=c", "ü=ö",
		"a!=b", "a==b", "a in (b, c)", "a notin (b)", "!a", "a in (b", "a in ()", "a in b", "!a=b", "a in (b,c),d!=e,!f,g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		reqs, p := parseSelector(sel)
		if p != nil {
			checkRefusal(t, p, "query.label_selector")
			if p.Status != http.StatusBadRequest {
				t.Fatalf("refused %q with %d, want 400", sel, p.Status)
			}
			return
		}
		var parts []string
		for _, r := range reqs {
			if r.Key == "" || r.Key != strings.TrimSpace(r.Key) || strings.ContainsAny(r.Key, ",=()") || strings.HasPrefix(r.Key, "!") || strings.HasSuffix(r.Key, "!") {
				t.Fatalf("parsed %q into the key %q", sel, r.Key)
			}
			switch r.Op {
			case store.SelectorEquals, store.SelectorNotEquals:
				if len(r.Values) != 1 || strings.Contains(r.Values[0], ",") {
					t.Fatalf("parsed %q into %+v", sel, r)
				}
				op := "!="
				if r.Op == store.SelectorEquals {
					op = "==" // a value may start with '='
				}
				parts = append(parts, r.Key+op+r.Values[0])
			case store.SelectorIn, store.SelectorNotIn:
				for _, v := range r.Values {
					if v == "" || v != strings.TrimSpace(v) || strings.ContainsAny(v, ",()") {
						t.Fatalf("parsed %q into %+v", sel, r)
					}
				}
				parts = append(parts, r.Key+" "+string(r.Op)+" ("+strings.Join(r.Values, ",")+")")
			case store.SelectorExists:
				parts = append(parts, r.Key)
			case store.SelectorDoesNotExist:
				parts = append(parts, "!"+r.Key)
			default:
				t.Fatalf("parsed %q into the operator %q", sel, r.Op)
			}
		}
		again := strings.Join(parts, ",")
		reqs2, p := parseSelector(again)
		if p != nil || !reflect.DeepEqual(reqs, reqs2) {
			t.Fatalf("%q parsed to %+v, its re-encoding %q to %+v (%v)", sel, reqs, again, reqs2, p)
		}
	})
}

// FuzzBatchItems: the items batchItems splits a body into number 1 to
// BatchMaxItems; an NDJSON item is one non-blank line, a JSON body's item
// is valid JSON; a refusal is a 400, 413 or 422 naming the body.
func FuzzBatchItems(f *testing.F) {
	for _, s := range applySeeds {
		f.Add("application/json", []byte(`{"items":[`+s+`]}`))
		f.Add(ndjsonType, []byte(s+"\n\n"+s+"\n"))
	}
	f.Add("application/json", []byte(`{"items":[]}`))
	f.Add("application/json", []byte(`{"items":null}`))
	f.Add("application/json", []byte(`{}`))
	f.Add("application/json; charset=utf-8", []byte(`{"items":[1,2,3,4,5,6,7,8,9]}`))
	f.Add("application/x-ndjson; charset=utf-8", []byte("1\n2\n3\n4\n5\n6\n7\n8\n9"))
	f.Add("text/plain", []byte("\n \n"))
	const maxItems = 8
	s := &Server{cfg: Config{BatchMaxItems: maxItems}}
	f.Fuzz(func(t *testing.T, contentType string, raw []byte) {
		items, p := s.batchItems(contentType, raw)
		if p != nil {
			checkRefusal(t, p, "body")
			if p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge && p.Status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d", p.Status)
			}
			return
		}
		if len(items) < 1 || len(items) > maxItems {
			t.Fatalf("%d items passed", len(items))
		}
		for i, it := range items {
			switch {
			case len(bytes.TrimSpace(it)) == 0:
				t.Fatalf("item %d is blank", i)
			case bytes.Contains(it, []byte("\n")) && !json.Valid(it):
				t.Fatalf("item %d spans lines: %q", i, it)
			case !bytes.Contains(raw, it):
				t.Fatalf("item %d %q is not part of the body", i, it)
			}
		}
	})
}

// checkRefusal checks the shape every refusal shares: a 4xx problem with
// at least one error located under prefix.
func checkRefusal(t *testing.T, p *Problem, prefix string) {
	t.Helper()
	if p.Status < 400 || p.Status > 499 || p.Detail == "" || len(p.Errors) == 0 {
		t.Fatalf("refusal %+v", p)
	}
	for _, e := range p.Errors {
		if !strings.HasPrefix(e.Location, prefix) {
			t.Fatalf("refusal located at %q, want under %q", e.Location, prefix)
		}
	}
	if _, err := json.Marshal(p); err != nil {
		t.Fatalf("the problem cannot be encoded: %v", err)
	}
}

// storable reports whether Postgres can store s as text.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// jsonEqual reports whether a and b hold the same JSON value. Their bytes
// may differ: json.Marshal escapes <, > and & inside a RawMessage's strings
// ("&" becomes "\u0026"), which a byte comparison took for a changed spec.
// Numbers compare by their text (UseNumber), as the stored spec keeps it.
func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	decode := func(raw json.RawMessage) (any, error) {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		return v, d.Decode(&v)
	}
	x, errX := decode(a)
	y, errY := decode(b)
	return errX == nil && errY == nil && reflect.DeepEqual(x, y)
}
