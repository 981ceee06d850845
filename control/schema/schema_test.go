package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustCompile(t testing.TB, raw string) *Schema {
	t.Helper()
	s, err := Compile(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("Compile(%s): %v", raw, err)
	}
	return s
}

func TestCompileUntyped(t *testing.T) {
	t.Parallel()

	for _, raw := range []string{"", "  ", "null", " null\n"} {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("Compile(%q): %v", raw, err)
		}
		if s != nil {
			t.Fatalf("Compile(%q) = %v, want nil (untyped)", raw, s)
		}
		if err := s.Validate(json.RawMessage(`{"anything": [1, "goes"]}`)); err != nil {
			t.Errorf("nil Schema rejected a document: %v", err)
		}
		if s.Raw() != nil {
			t.Errorf("nil Schema Raw() = %s, want nil", s.Raw())
		}
	}
	if s := mustCompile(t, `{}`); s == nil {
		t.Error(`Compile("{}") = nil, want an accept-all schema`)
	}
}

func TestCompileRaw(t *testing.T) {
	t.Parallel()

	raw := json.RawMessage(`{"type": "object"}`)
	s := mustCompile(t, string(raw))
	raw[1] = 'X' // the caller's buffer may be reused
	if diff := cmp.Diff(`{"type": "object"}`, string(s.Raw())); diff != "" {
		t.Errorf("Raw() mismatch (-want +got):\n%s", diff)
	}
}

// TestCompileRefusesExternal checks the loader: every URL outside the
// document is refused at compile time, so a schema can neither make the
// control plane call the network (SSRF) nor read local files.
func TestCompileRefusesExternal(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		schema string
		want   string
	}{
		{
			name:   "metadata endpoint",
			schema: `{"$ref": "http://169.254.169.254/latest/meta-data"}`,
			want:   `schema: external $ref "http://169.254.169.254/latest/meta-data" is not allowed; inline it under $defs: external reference`,
		},
		{
			name:   "https",
			schema: `{"properties": {"a": {"$ref": "https://example.com/s.json#/$defs/x"}}}`,
			want:   `schema: external $ref "https://example.com/s.json" is not allowed; inline it under $defs: external reference`,
		},
		{
			name:   "local file",
			schema: `{"$ref": "file:///etc/passwd"}`,
			want:   `schema: external $ref "file:///etc/passwd" is not allowed; inline it under $defs: external reference`,
		},
		{
			name:   "relative ref resolves outside the document",
			schema: `{"$ref": "other.json"}`,
			want:   `schema: external $ref "mem:///other.json" is not allowed; inline it under $defs: external reference`,
		},
		{
			name:   "relative ref against an $id",
			schema: `{"$id": "https://converge.example/kinds/vpc", "$ref": "subnet"}`,
			want:   `schema: external $ref "https://converge.example/kinds/subnet" is not allowed; inline it under $defs: external reference`,
		},
		{
			name:   "custom metaschema",
			schema: `{"$schema": "http://169.254.169.254/meta"}`,
			want:   `schema: $schema "http://169.254.169.254/meta" is not supported; kind schemas are draft 2020-12: external reference`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Compile(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatal("Compile succeeded, want an error")
			}
			if !errors.Is(err, ErrExternalRef) {
				t.Errorf("error %v does not wrap ErrExternalRef", err)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompileInternalRefs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		schema  string
		valid   string
		invalid string
	}{
		{
			name:    "$defs",
			schema:  `{"properties": {"port": {"$ref": "#/$defs/port"}}, "$defs": {"port": {"type": "integer", "maximum": 65535}}}`,
			valid:   `{"port": 443}`,
			invalid: `{"port": 70000}`,
		},
		{
			name:    "anchor",
			schema:  `{"items": {"$ref": "#name"}, "$defs": {"n": {"$anchor": "name", "type": "string"}}}`,
			valid:   `["a"]`,
			invalid: `[1]`,
		},
		{
			name:    "own $id",
			schema:  `{"$id": "https://converge.example/kinds/vpc", "$ref": "#/$defs/x", "$defs": {"x": {"type": "object"}}}`,
			valid:   `{}`,
			invalid: `[]`,
		},
		{
			name:    "embedded 2020-12 metaschema",
			schema:  `{"$ref": "https://json-schema.org/draft/2020-12/schema"}`,
			valid:   `{"type": "string"}`,
			invalid: `{"type": 5}`,
		},
		{
			name:    "$schema naming 2020-12 is accepted",
			schema:  `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"}`,
			valid:   `"a"`,
			invalid: `1`,
		},
		{
			name:    "format is an annotation",
			schema:  `{"type": "string", "format": "ipv4"}`,
			valid:   `"not an address"`,
			invalid: `7`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustCompile(t, tt.schema)
			if err := s.Validate(json.RawMessage(tt.valid)); err != nil {
				t.Errorf("Validate(%s): %v", tt.valid, err)
			}
			if err := s.Validate(json.RawMessage(tt.invalid)); err == nil {
				t.Errorf("Validate(%s) = nil, want an error", tt.invalid)
			}
		})
	}
}

func TestCompileInvalid(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		schema string
		want   string
		// wantViolations, when set, are the metaschema violations, with
		// pointers into the schema document.
		wantViolations []Violation
	}{
		{
			name:   "type is a number",
			schema: `{"type": 5}`,
			want:   `schema: not a valid draft 2020-12 schema: /type: enum: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'; /type: type: must be array, got number`,
			wantViolations: []Violation{
				{Pointer: "/type", Keyword: "enum", Message: "value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'"},
				{Pointer: "/type", Keyword: "type", Message: "must be array, got number"},
			},
		},
		{
			name:   "negative minLength",
			schema: `{"properties": {"name": {"minLength": -1}}}`,
			want:   `schema: not a valid draft 2020-12 schema: /properties/name/minLength: minimum: must be >= 0`,
			wantViolations: []Violation{
				{Pointer: "/properties/name/minLength", Keyword: "minimum", Message: "must be >= 0"},
			},
		},
		{
			name:   "bad regex",
			schema: `{"pattern": "("}`,
			want:   "schema: not a valid draft 2020-12 schema: /pattern: format: '(' is not valid regex: error parsing regexp: missing closing ): `(`",
		},
		{
			name:   "dangling $ref",
			schema: `{"$ref": "#/$defs/missing"}`,
			want:   `schema: json-pointer in "#/$defs/missing" not found`,
		},
		{
			name:   "older draft",
			schema: `{"$schema": "http://json-schema.org/draft-07/schema#"}`,
			want:   `schema: $schema "http://json-schema.org/draft-07/schema#" is not supported; kind schemas are draft 2020-12`,
		},
		{
			name:   "not JSON",
			schema: `{"type": `,
			want:   `schema: decode: unexpected EOF`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Compile(json.RawMessage(tt.schema))
			if err == nil {
				t.Fatal("Compile succeeded, want an error")
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if tt.wantViolations == nil {
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %v does not wrap *ValidationError", err)
			}
			if diff := cmp.Diff(tt.wantViolations, verr.Violations); diff != "" {
				t.Errorf("violations mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

const widgetSchema = `{
  "type": "object",
  "required": ["name", "replicas"],
  "additionalProperties": false,
  "properties": {
    "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "maxLength": 63},
    "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
    "ratio": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.25},
    "tier": {"enum": ["free", "pro"]},
    "labels": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "string"}},
    "ports": {"type": "array", "maxItems": 2, "uniqueItems": true, "items": {"$ref": "#/$defs/port"}},
    "a/b~c": {"type": "string"},
    "owner": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    "resources": {
      "type": "object",
      "required": ["cpu", "memory"],
      "properties": {"cpu": {"type": "string"}, "memory": {"type": "string"}}
    }
  },
  "$defs": {"port": {"type": "object", "required": ["port"], "properties": {"port": {"type": "integer", "maximum": 65535}}}}
}`

func TestValidate(t *testing.T) {
	t.Parallel()

	s := mustCompile(t, widgetSchema)
	tests := []struct {
		name string
		doc  string
		want []Violation
	}{
		{
			name: "valid",
			doc:  `{"name": "web", "replicas": 3, "ratio": 0.75, "tier": "pro", "labels": {"app": "web"}, "ports": [{"port": 443}], "resources": {"cpu": "1", "memory": "1Gi"}}`,
		},
		{
			name: "big integers keep their precision",
			doc:  `{"name": "web", "replicas": 10.0}`,
		},
		{
			name: "maximum",
			doc:  `{"name": "web", "replicas": 11}`,
			want: []Violation{{Pointer: "/replicas", Keyword: "maximum", Message: "must be <= 10"}},
		},
		{
			name: "missing required properties, one violation each",
			doc:  `{}`,
			want: []Violation{
				{Pointer: "", Keyword: "required", Message: `missing required property "name"`},
				{Pointer: "", Keyword: "required", Message: `missing required property "replicas"`},
			},
		},
		{
			name: "type",
			doc:  `{"name": 5, "replicas": "3"}`,
			want: []Violation{
				{Pointer: "/name", Keyword: "type", Message: "must be string, got number"},
				{Pointer: "/replicas", Keyword: "type", Message: "must be integer, got string"},
			},
		},
		{
			name: "additional properties point at the property",
			doc:  `{"name": "web", "replicas": 1, "replica": 1, "secret": "x"}`,
			want: []Violation{
				{Pointer: "/replica", Keyword: "additionalProperties", Message: "property is not allowed"},
				{Pointer: "/secret", Keyword: "additionalProperties", Message: "property is not allowed"},
			},
		},
		{
			name: "nested and through $ref",
			doc:  `{"name": "web", "replicas": 1, "ports": [{"port": 1}, {"port": 70000}, {}], "resources": {"cpu": "1"}}`,
			want: []Violation{
				{Pointer: "/ports", Keyword: "maxItems", Message: "must have at most 2 items, got 3"},
				{Pointer: "/ports/1/port", Keyword: "maximum", Message: "must be <= 65535"},
				{Pointer: "/ports/2", Keyword: "required", Message: `missing required property "port"`},
				{Pointer: "/resources", Keyword: "required", Message: `missing required property "memory"`},
			},
		},
		{
			name: "pointer tokens are escaped",
			doc:  `{"name": "web", "replicas": 1, "a/b~c": 1}`,
			want: []Violation{{Pointer: "/a~1b~0c", Keyword: "type", Message: "must be string, got number"}},
		},
		{
			name: "pattern, maxLength, enum, exclusiveMinimum, multipleOf, uniqueItems",
			doc:  `{"name": "Web_` + strings.Repeat("x", 60) + `", "replicas": 0, "ratio": 0.3, "tier": "gold", "ports": [{"port": 1}, {"port": 1}]}`,
			want: []Violation{
				{Pointer: "/name", Keyword: "maxLength", Message: "must be at most 63 characters long, got 64"},
				{Pointer: "/name", Keyword: "pattern", Message: "'Web_" + strings.Repeat("x", 60) + "' does not match pattern '^[a-z][a-z0-9-]*$'"},
				{Pointer: "/ports", Keyword: "uniqueItems", Message: "items 0 and 1 are equal"},
				{Pointer: "/ratio", Keyword: "multipleOf", Message: "must be a multiple of 0.25"},
				{Pointer: "/replicas", Keyword: "minimum", Message: "must be >= 1"},
				{Pointer: "/tier", Keyword: "enum", Message: "value must be one of 'free', 'pro'"},
			},
		},
		{
			name: "anyOf type alternatives merge",
			doc:  `{"name": "web", "replicas": 1, "owner": true}`,
			want: []Violation{{Pointer: "/owner", Keyword: "type", Message: "must be string or integer, got boolean"}},
		},
		{
			name: "root type",
			doc:  `[]`,
			want: []Violation{{Pointer: "", Keyword: "type", Message: "must be object, got array"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := s.Validate(json.RawMessage(tt.doc))
			var got []Violation
			if err != nil {
				var verr *ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("Validate: %v, want a *ValidationError", err)
				}
				got = verr.Violations
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("violations mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidationErrorString(t *testing.T) {
	t.Parallel()

	s := mustCompile(t, widgetSchema)
	err := s.Validate(json.RawMessage(`{"replicas": 11}`))
	want := `(root): required: missing required property "name"; /replicas: maximum: must be <= 10`
	if err == nil {
		t.Fatal("Validate = nil, want an error")
	}
	if diff := cmp.Diff(want, err.Error()); diff != "" {
		t.Errorf("Error() mismatch (-want +got):\n%s", diff)
	}
}

func TestValidateNotJSON(t *testing.T) {
	t.Parallel()

	s := mustCompile(t, `{"type": "object"}`)
	for _, doc := range []string{``, `{`, `{} {}`, `nul`} {
		err := s.Validate(json.RawMessage(doc))
		if err == nil {
			t.Errorf("Validate(%q) = nil, want a decode error", doc)
			continue
		}
		var verr *ValidationError
		if errors.As(err, &verr) {
			t.Errorf("Validate(%q) = %v, a *ValidationError; want a decode error", doc, err)
		}
	}
}

// TestValidatePropertyNamesPointer covers upstream issue #258: the library
// stores a shared location slice for propertyNames errors, so later siblings
// overwrite it. Map order is random, so the bug shows up only in some runs.
func TestValidatePropertyNamesPointer(t *testing.T) {
	t.Parallel()

	s := mustCompile(t, `{
	  "properties": {
	    "spec": {"properties": {
	      "labels": {"propertyNames": {"pattern": "^[a-z]+$"}},
	      "image": {"type": "string"}, "zone": {"type": "string"}, "size": {"type": "string"}
	    }},
	    "items": {"items": {"propertyNames": {"maxLength": 3}}},
	    "meta/data ~x": {"propertyNames": {"maxLength": 2}},
	    "ref": {"$ref": "#/$defs/names"},
	    "other": {"type": "string"}
	  },
	  "$defs": {"names": {"propertyNames": {"maxLength": 2}}}
	}`)
	doc := json.RawMessage(`{
	  "spec": {"image": "x", "labels": {"Bad": "1", "ok": "2"}, "zone": "a", "size": "b"},
	  "items": [{"long-name": 1}, {"ok": 1}, {"long-name": 2}],
	  "meta/data ~x": {"abc": 1},
	  "ref": {"xyz": 1},
	  "other": "x"
	}`)
	want := []Violation{
		{Pointer: "/items/0", Keyword: "propertyNames", Message: `invalid property name "long-name": maxLength: must be at most 3 characters long, got 9`},
		{Pointer: "/items/2", Keyword: "propertyNames", Message: `invalid property name "long-name": maxLength: must be at most 3 characters long, got 9`},
		{Pointer: "/meta~1data ~0x", Keyword: "propertyNames", Message: `invalid property name "abc": maxLength: must be at most 2 characters long, got 3`},
		{Pointer: "/ref", Keyword: "propertyNames", Message: `invalid property name "xyz": maxLength: must be at most 2 characters long, got 3`},
		{Pointer: "/spec/labels", Keyword: "propertyNames", Message: `invalid property name "Bad": pattern: 'Bad' does not match pattern '^[a-z]+$'`},
	}
	for range 50 {
		var verr *ValidationError
		if err := s.Validate(doc); !errors.As(err, &verr) {
			t.Fatalf("Validate: %v, want a *ValidationError", err)
		}
		if diff := cmp.Diff(want, verr.Violations); diff != "" {
			t.Fatalf("violations mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestValidateConcurrent(t *testing.T) {
	t.Parallel()

	s := mustCompile(t, widgetSchema)
	valid := json.RawMessage(`{"name": "web", "replicas": 3}`)
	invalid := json.RawMessage(`{"name": "web", "replicas": 30}`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if err := s.Validate(valid); err != nil {
					t.Errorf("Validate(valid): %v", err)
					return
				}
				if err := s.Validate(invalid); err == nil {
					t.Error("Validate(invalid) = nil")
					return
				}
			}
		})
	}
	wg.Wait()
}
