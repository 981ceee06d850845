package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// diffResult is Changes with each change as its string, for readable tables.
type diffResult struct {
	Identical bool
	Breaking  []string
	Additive  []string
}

func strs(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// openClosed builds an object schema with the given properties, closed by
// additionalProperties: false.
func closed(props string) string {
	return `{"type": "object", "additionalProperties": false, "properties": {` + props + `}}`
}

const openOnRefs = "; but the schema uses $ref inside not, if, oneOf or contains, where a wider subschema can reject documents, so this cannot be proven backward compatible"

func TestDiff(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		reason string
		old    string
		new    string
		want   diffResult
	}{
		// Identity and annotations.
		{
			name:   "identical but reformatted",
			reason: "key order, whitespace and number spelling do not matter; a re-apply is a no-op",
			old:    `{"type":"object","properties":{"replicas":{"maximum":10,"type":"integer"}},"required":["replicas"]}`,
			new:    "{\n  \"required\": [\"replicas\"],\n  \"properties\": {\"replicas\": {\"type\": \"integer\", \"maximum\": 10.0}},\n  \"type\": \"object\"\n}",
			want:   diffResult{Identical: true},
		},
		{
			name:   "untyped stays untyped",
			reason: "null and an empty document both mean untyped",
			old:    `null`,
			new:    ``,
			want:   diffResult{Identical: true},
		},
		{
			name:   "annotations only",
			reason: "annotations never change what validates",
			old:    `{"type": "object", "properties": {"a": {"type": "string", "description": "old"}}}`,
			new:    `{"$comment": "c", "title": "T", "type": "object", "properties": {"a": {"type": "string", "description": "new", "examples": ["x"], "default": "y", "deprecated": true, "readOnly": true, "writeOnly": false}}}`,
			want:   diffResult{},
		},
		{
			name:   "$schema naming 2020-12 added",
			reason: "2020-12 is the default dialect, so naming it changes nothing",
			old:    `{"type": "string"}`,
			new:    `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"}`,
			want:   diffResult{},
		},
		{
			name:   "property named like an annotation",
			reason: "under properties, title is a property name, not an annotation",
			old:    closed(`"title": {"type": "string"}`),
			new:    closed(`"title": {"type": "integer"}`),
			want:   diffResult{Breaking: []string{"properties.title: retyped from string to integer"}},
		},

		// Untyped axes.
		{
			name:   "untyped gains a schema",
			reason: "untyped accepted everything; any constraint narrows it",
			old:    `null`,
			new:    `{"type": "object"}`,
			want:   diffResult{Breaking: []string{"(root): type constraint added: must be object"}},
		},
		{
			name:   "schema dropped to untyped",
			reason: "untyped accepts everything the schema did",
			old:    `{"type": "object"}`,
			new:    `null`,
			want:   diffResult{Additive: []string{"(root): type constraint removed (was object)"}},
		},

		// Properties.
		{
			name:   "new optional property on a closed object",
			reason: "additionalProperties: false rejected the name before, so no existing document has it",
			old:    closed(`"name": {"type": "string"}`),
			new:    closed(`"name": {"type": "string"}, "zone": {"type": "string"}`),
			want:   diffResult{Additive: []string{"properties.zone: new optional property"}},
		},
		{
			name:   "new optional property on an open object",
			reason: "the publish contract: a new optional field is additive (the strict mode used by the soundness test refuses it)",
			old:    `{"type": "object", "properties": {"name": {"type": "string"}}}`,
			new:    `{"type": "object", "properties": {"name": {"type": "string"}, "zone": {"type": "string"}}}`,
			want:   diffResult{Additive: []string{"properties.zone: new optional property"}},
		},
		{
			name:   "new unconstrained property on an open object",
			reason: "a schema with only annotations accepts whatever was there",
			old:    `{"type": "object"}`,
			new:    `{"type": "object", "properties": {"notes": {"description": "free form"}}}`,
			want:   diffResult{Additive: []string{"properties.notes: new optional property"}},
		},
		{
			name:   "new property at least as wide as additionalProperties",
			reason: "its values had to satisfy additionalProperties, which the new schema contains",
			old:    `{"type": "object", "additionalProperties": {"type": "string", "maxLength": 10}}`,
			new:    `{"type": "object", "additionalProperties": {"type": "string", "maxLength": 10}, "properties": {"zone": {"type": ["string", "null"]}}}`,
			want:   diffResult{Additive: []string{"properties.zone: new optional property (at least as wide as additionalProperties)"}},
		},
		{
			name:   "new property narrower than additionalProperties",
			reason: "zone: \"abcdef\" satisfied additionalProperties but not the new maxLength",
			old:    `{"type": "object", "additionalProperties": {"type": "string"}}`,
			new:    `{"type": "object", "additionalProperties": {"type": "string"}, "properties": {"zone": {"type": "string", "maxLength": 3}}}`,
			want:   diffResult{Breaking: []string{"properties.zone: new property may reject values that additionalProperties allowed"}},
		},
		{
			name:   "new property covered by a wider patternProperties",
			reason: "the matching pattern constrained the name before, and still applies",
			old:    `{"type": "object", "additionalProperties": false, "patternProperties": {"^x-": {"type": "string", "maxLength": 5}}}`,
			new:    `{"type": "object", "additionalProperties": false, "patternProperties": {"^x-": {"type": "string", "maxLength": 5}}, "properties": {"x-team": {"type": "string"}}}`,
			want:   diffResult{Additive: []string{`properties.x-team: new optional property (at least as wide as patternProperties "^x-")`}},
		},
		{
			name:   "new property narrower than its patternProperties",
			reason: "additionalProperties: false does not apply to names a pattern matches",
			old:    `{"type": "object", "additionalProperties": false, "patternProperties": {"^x-": {"type": "string"}}}`,
			new:    `{"type": "object", "additionalProperties": false, "patternProperties": {"^x-": {"type": "string"}}, "properties": {"x-team": {"enum": ["a"]}}}`,
			want:   diffResult{Breaking: []string{`properties.x-team: new property may reject values that patternProperties "^x-" allowed`}},
		},
		{
			name:   "removed property",
			reason: "existing documents may set it; simplest sound rule",
			old:    `{"type": "object", "properties": {"name": {"type": "string"}, "zone": {"type": "string"}}}`,
			new:    `{"type": "object", "properties": {"name": {"type": "string"}}}`,
			want:   diffResult{Breaking: []string{"properties.zone: property removed; existing documents may still set it"}},
		},
		{
			name:   "newly required",
			reason: "documents without region were valid",
			old:    closed(`"region": {"type": "string"}`),
			new:    `{"type": "object", "additionalProperties": false, "required": ["region"], "properties": {"region": {"type": "string"}}}`,
			want:   diffResult{Breaking: []string{"properties.region: newly required"}},
		},
		{
			name:   "dropped requirement",
			reason: "fewer required properties accept more documents",
			old:    `{"required": ["region", "name"]}`,
			new:    `{"required": ["name"]}`,
			want:   diffResult{Additive: []string{"properties.region: no longer required"}},
		},
		{
			name:   "new required property on a closed object",
			reason: "the property is additive but requiring it is not",
			old:    closed(`"name": {"type": "string"}`),
			new:    `{"type": "object", "additionalProperties": false, "required": ["region"], "properties": {"name": {"type": "string"}, "region": {"type": "string"}}}`,
			want: diffResult{
				Breaking: []string{"properties.region: newly required"},
				Additive: []string{"properties.region: new optional property"},
			},
		},
		{
			name:   "property names with dots are quoted",
			reason: "paths must stay unambiguous",
			old:    `{"properties": {"a.b": {"type": "string"}}}`,
			new:    `{"properties": {"a.b": {"type": "integer"}}}`,
			want:   diffResult{Breaking: []string{`properties["a.b"]: retyped from string to integer`}},
		},
		{
			name:   "property schema becomes false",
			reason: "false rejects every value the property had",
			old:    `{"properties": {"legacy": {"type": "string"}}}`,
			new:    `{"properties": {"legacy": false}}`,
			want:   diffResult{Breaking: []string{"properties.legacy: now rejects every value"}},
		},
		{
			name:   "false property schema opened",
			reason: "false accepted nothing, so anything is wider",
			old:    `{"properties": {"legacy": false}}`,
			new:    `{"properties": {"legacy": {"type": "string"}}}`,
			want:   diffResult{Additive: []string{"properties.legacy: now accepts values (was false)"}},
		},

		// type.
		{
			name:   "retyped",
			reason: "no string is an integer",
			old:    `{"properties": {"replicas": {"type": "string"}}}`,
			new:    `{"properties": {"replicas": {"type": "integer"}}}`,
			want:   diffResult{Breaking: []string{"properties.replicas: retyped from string to integer"}},
		},
		{
			name:   "type widened to a list",
			reason: "the list still includes the old type",
			old:    `{"properties": {"replicas": {"type": "integer"}}}`,
			new:    `{"properties": {"replicas": {"type": ["integer", "string"]}}}`,
			want:   diffResult{Additive: []string{"properties.replicas: type widened from integer to [integer, string]"}},
		},
		{
			name:   "integer widened to number",
			reason: "number includes every integer",
			old:    `{"type": "integer"}`,
			new:    `{"type": "number"}`,
			want:   diffResult{Additive: []string{"(root): type widened from integer to number"}},
		},
		{
			name:   "number narrowed to integer",
			reason: "1.5 was valid",
			old:    `{"type": "number"}`,
			new:    `{"type": "integer"}`,
			want:   diffResult{Breaking: []string{"(root): retyped from number to integer"}},
		},
		{
			name:   "type spelled as a list",
			reason: `"string" and ["string"] are the same constraint`,
			old:    `{"type": "string"}`,
			new:    `{"type": ["string"]}`,
			want:   diffResult{},
		},
		{
			name:   "type list narrowed",
			reason: "null was valid",
			old:    `{"type": ["string", "null"]}`,
			new:    `{"type": ["string"]}`,
			want:   diffResult{Breaking: []string{"(root): type narrowed from [string, null] to string: null no longer allowed"}},
		},

		// enum and const.
		{
			name:   "enum superset",
			reason: "every old value is still allowed",
			old:    `{"enum": ["free", "pro"]}`,
			new:    `{"enum": ["free", "pro", "enterprise"]}`,
			want:   diffResult{Additive: []string{`(root): enum widened: "enterprise" added`}},
		},
		{
			name:   "enum narrowed",
			reason: "documents with pro become invalid",
			old:    `{"enum": ["free", "pro"]}`,
			new:    `{"enum": ["free", "team"]}`,
			want: diffResult{
				Breaking: []string{`(root): enum narrowed: "pro" no longer allowed`},
				Additive: []string{`(root): enum widened: "team" added`},
			},
		},
		{
			name:   "enum compares values, not spelling",
			reason: "1 and 1.0 are the same JSON Schema value",
			old:    `{"enum": [1, 2]}`,
			new:    `{"enum": [2.0, 1.0]}`,
			want:   diffResult{},
		},
		{
			name:   "enum added",
			reason: "any value was valid before",
			old:    `{"type": "string"}`,
			new:    `{"type": "string", "enum": ["a"]}`,
			want:   diffResult{Breaking: []string{`(root): enum added: only "a" allowed`}},
		},
		{
			name:   "enum removed",
			reason: "no value restriction is wider than any",
			old:    `{"type": "string", "enum": ["a"]}`,
			new:    `{"type": "string"}`,
			want:   diffResult{Additive: []string{"(root): enum removed"}},
		},
		{
			name:   "const added",
			reason: "only one value remains valid",
			old:    `{"properties": {"v": {}}}`,
			new:    `{"properties": {"v": {"const": "v1"}}}`,
			want:   diffResult{Breaking: []string{`properties.v: const added: only "v1" is allowed`}},
		},
		{
			name:   "const changed",
			reason: "the old value is rejected",
			old:    `{"const": "v1"}`,
			new:    `{"const": "v2"}`,
			want:   diffResult{Breaking: []string{`(root): const changed from "v1" to "v2"`}},
		},
		{
			name:   "const removed",
			reason: "no restriction is wider",
			old:    `{"const": "v1"}`,
			new:    `{}`,
			want:   diffResult{Additive: []string{`(root): const removed (was "v1")`}},
		},

		// Numeric and size bounds.
		{
			name:   "maximum raised",
			reason: "wider range",
			old:    `{"properties": {"replicas": {"maximum": 10}}}`,
			new:    `{"properties": {"replicas": {"maximum": 20}}}`,
			want:   diffResult{Additive: []string{"properties.replicas: maximum raised from 10 to 20"}},
		},
		{
			name:   "maximum lowered",
			reason: "replicas: 10 becomes invalid",
			old:    `{"properties": {"replicas": {"maximum": 10}}}`,
			new:    `{"properties": {"replicas": {"maximum": 5}}}`,
			want:   diffResult{Breaking: []string{"properties.replicas: maximum lowered from 10 to 5"}},
		},
		{
			name:   "minimum lowered",
			reason: "wider range",
			old:    `{"minimum": 1}`,
			new:    `{"minimum": 0}`,
			want:   diffResult{Additive: []string{"(root): minimum lowered from 1 to 0"}},
		},
		{
			name:   "minimum raised",
			reason: "1 becomes invalid",
			old:    `{"minimum": 1}`,
			new:    `{"minimum": 1.5}`,
			want:   diffResult{Breaking: []string{"(root): minimum raised from 1 to 1.5"}},
		},
		{
			name:   "exclusive bounds tightened",
			reason: "9.5 and 0.5 become invalid",
			old:    `{"exclusiveMaximum": 10, "exclusiveMinimum": 0}`,
			new:    `{"exclusiveMaximum": 9, "exclusiveMinimum": 1}`,
			want: diffResult{Breaking: []string{
				"(root): exclusiveMaximum lowered from 10 to 9",
				"(root): exclusiveMinimum raised from 0 to 1",
			}},
		},
		{
			name:   "exclusive bounds widened",
			reason: "wider range",
			old:    `{"exclusiveMaximum": 10, "exclusiveMinimum": 0}`,
			new:    `{"exclusiveMaximum": 11, "exclusiveMinimum": -1}`,
			want: diffResult{Additive: []string{
				"(root): exclusiveMaximum raised from 10 to 11",
				"(root): exclusiveMinimum lowered from 0 to -1",
			}},
		},
		{
			name:   "string length widened",
			reason: "longer and shorter strings are now accepted",
			old:    `{"type": "string", "minLength": 3, "maxLength": 10}`,
			new:    `{"type": "string", "minLength": 1, "maxLength": 63}`,
			want: diffResult{Additive: []string{
				"(root): maxLength raised from 10 to 63",
				"(root): minLength lowered from 3 to 1",
			}},
		},
		{
			name:   "string length narrowed",
			reason: "a 63-character name and a 1-character name become invalid",
			old:    `{"type": "string", "minLength": 1, "maxLength": 63}`,
			new:    `{"type": "string", "minLength": 3, "maxLength": 10}`,
			want: diffResult{Breaking: []string{
				"(root): maxLength lowered from 63 to 10",
				"(root): minLength raised from 1 to 3",
			}},
		},
		{
			name:   "bound removed",
			reason: "no limit is wider than any limit",
			old:    `{"maximum": 10, "maxItems": 3}`,
			new:    `{}`,
			want: diffResult{Additive: []string{
				"(root): maxItems removed (was 3)",
				"(root): maximum removed (was 10)",
			}},
		},
		{
			name:   "bound added",
			reason: "values above it were valid",
			old:    `{"type": "integer"}`,
			new:    `{"type": "integer", "maximum": 100}`,
			want:   diffResult{Breaking: []string{"(root): maximum added: 100"}},
		},
		{
			name:   "array sizes",
			reason: "maxItems raised is additive, minItems raised is breaking",
			old:    `{"type": "array", "minItems": 0, "maxItems": 3}`,
			new:    `{"type": "array", "minItems": 1, "maxItems": 5}`,
			want: diffResult{
				Breaking: []string{"(root): minItems raised from 0 to 1"},
				Additive: []string{"(root): maxItems raised from 3 to 5"},
			},
		},
		{
			name:   "object sizes",
			reason: "maxProperties lowered is breaking, minProperties lowered is additive",
			old:    `{"minProperties": 2, "maxProperties": 5}`,
			new:    `{"minProperties": 1, "maxProperties": 4}`,
			want: diffResult{
				Breaking: []string{"(root): maxProperties lowered from 5 to 4"},
				Additive: []string{"(root): minProperties lowered from 2 to 1"},
			},
		},
		{
			name:   "multipleOf added",
			reason: "odd numbers were valid",
			old:    `{"type": "integer"}`,
			new:    `{"type": "integer", "multipleOf": 2}`,
			want:   diffResult{Breaking: []string{"(root): multipleOf added: 2"}},
		},
		{
			name:   "multipleOf changed to a non-divisor",
			reason: "4 is a multiple of 2 but not of 3",
			old:    `{"multipleOf": 2}`,
			new:    `{"multipleOf": 3}`,
			want:   diffResult{Breaking: []string{"(root): multipleOf changed from 2 to 3"}},
		},
		{
			name:   "multipleOf relaxed to a divisor",
			reason: "every multiple of 10 is a multiple of 2.5",
			old:    `{"multipleOf": 10}`,
			new:    `{"multipleOf": 2.5}`,
			want:   diffResult{Additive: []string{"(root): multipleOf relaxed from 10 to 2.5"}},
		},
		{
			name:   "uniqueItems added",
			reason: "[1, 1] was valid",
			old:    `{"type": "array"}`,
			new:    `{"type": "array", "uniqueItems": true}`,
			want:   diffResult{Breaking: []string{"(root): uniqueItems added"}},
		},
		{
			name:   "uniqueItems removed",
			reason: "duplicates are now accepted too",
			old:    `{"type": "array", "uniqueItems": true}`,
			new:    `{"type": "array", "uniqueItems": false}`,
			want:   diffResult{Additive: []string{"(root): uniqueItems removed"}},
		},
		{
			name:   "contains counts",
			reason: "minContains lowered below its default of 1 widens; maxContains lowered narrows",
			old:    `{"contains": {"type": "string"}, "maxContains": 3}`,
			new:    `{"contains": {"type": "string"}, "maxContains": 2, "minContains": 0}`,
			want: diffResult{
				Breaking: []string{"(root): maxContains lowered from 3 to 2"},
				Additive: []string{"(root): minContains lowered from 1 to 0"},
			},
		},

		// pattern, format, propertyNames, dependentRequired.
		{
			name:   "pattern removed",
			reason: "any string is now accepted",
			old:    `{"type": "string", "pattern": "^[a-z]+$"}`,
			new:    `{"type": "string"}`,
			want:   diffResult{Additive: []string{`(root): pattern removed (was "^[a-z]+$")`}},
		},
		{
			name:   "pattern added",
			reason: "strings that do not match were valid",
			old:    `{"type": "string"}`,
			new:    `{"type": "string", "pattern": "^[a-z]+$"}`,
			want:   diffResult{Breaking: []string{`(root): pattern added: "^[a-z]+$"`}},
		},
		{
			name:   "pattern changed",
			reason: "a wider-looking regex cannot be proven wider",
			old:    `{"type": "string", "pattern": "^[a-z]+$"}`,
			new:    `{"type": "string", "pattern": "^[a-z0-9]+$"}`,
			want:   diffResult{Breaking: []string{`(root): pattern changed from "^[a-z]+$" to "^[a-z0-9]+$"`}},
		},
		{
			name:   "format added",
			reason: "format is an annotation today, but treated as an assertion to stay sound if that changes",
			old:    `{"type": "string"}`,
			new:    `{"type": "string", "format": "hostname"}`,
			want:   diffResult{Breaking: []string{`(root): format added: "hostname"`}},
		},
		{
			name:   "propertyNames added",
			reason: "names that do not match were valid",
			old:    `{"type": "object"}`,
			new:    `{"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}`,
			want:   diffResult{Breaking: []string{"(root): propertyNames added"}},
		},
		{
			name:   "propertyNames changed",
			reason: "changed subschema is not analysed",
			old:    `{"propertyNames": {"maxLength": 3}}`,
			new:    `{"propertyNames": {"maxLength": 4}}`,
			want:   diffResult{Breaking: []string{"(root): propertyNames changed; cannot prove it is backward compatible"}},
		},
		{
			name:   "propertyNames removed",
			reason: "any name is now accepted",
			old:    `{"propertyNames": {"maxLength": 3}}`,
			new:    `{}`,
			want:   diffResult{Additive: []string{"(root): propertyNames removed"}},
		},
		{
			name:   "dependentRequired",
			reason: "a new dependency narrows, a dropped one widens",
			old:    `{"dependentRequired": {"cert": ["key"], "user": ["password"]}}`,
			new:    `{"dependentRequired": {"cert": ["key", "ca"]}}`,
			want: diffResult{
				Breaking: []string{`dependentRequired.cert: "ca" newly required when "cert" is present`},
				Additive: []string{`dependentRequired.user: "password" no longer required when "user" is present`},
			},
		},

		// additionalProperties.
		{
			name:   "additionalProperties false removed",
			reason: "extra properties become valid",
			old:    closed(`"a": {}`),
			new:    `{"type": "object", "properties": {"a": {}}}`,
			want:   diffResult{Additive: []string{"additionalProperties: now accepts values (was false)"}},
		},
		{
			name:   "additionalProperties closed",
			reason: "documents with extra properties become invalid",
			old:    `{"type": "object", "properties": {"a": {}}}`,
			new:    closed(`"a": {}`),
			want:   diffResult{Breaking: []string{"additionalProperties: now rejects every value"}},
		},
		{
			name:   "additionalProperties given a schema",
			reason: "extra properties of other types were valid",
			old:    `{"type": "object"}`,
			new:    `{"type": "object", "additionalProperties": {"type": "string"}}`,
			want:   diffResult{Breaking: []string{"additionalProperties: type constraint added: must be string"}},
		},
		{
			name:   "additionalProperties schema widened",
			reason: "rules apply inside the subschema",
			old:    `{"additionalProperties": {"type": "string", "maxLength": 5}}`,
			new:    `{"additionalProperties": {"type": ["string", "number"]}}`,
			want: diffResult{Additive: []string{
				"additionalProperties: maxLength removed (was 5)",
				"additionalProperties: type widened from string to [string, number]",
			}},
		},
		{
			name:   "additionalProperties schema narrowed",
			reason: "rules apply inside the subschema",
			old:    `{"additionalProperties": {"type": ["string", "number"]}}`,
			new:    `{"additionalProperties": {"type": "string"}}`,
			want:   diffResult{Breaking: []string{"additionalProperties: type narrowed from [string, number] to string: number no longer allowed"}},
		},

		// Nested places.
		{
			name:   "nested property newly required",
			reason: "rules recurse into properties",
			old:    `{"properties": {"spec": {"type": "object", "properties": {"region": {"type": "string"}}}}}`,
			new:    `{"properties": {"spec": {"type": "object", "required": ["region"], "properties": {"region": {"type": "string"}}}}}`,
			want:   diffResult{Breaking: []string{"properties.spec.properties.region: newly required"}},
		},
		{
			name:   "nested under items",
			reason: "rules recurse into items",
			old:    `{"properties": {"ports": {"items": {"properties": {"port": {"maximum": 65535}}}}}}`,
			new:    `{"properties": {"ports": {"items": {"properties": {"port": {"maximum": 1024}}}}}}`,
			want:   diffResult{Breaking: []string{"properties.ports.items.properties.port: maximum lowered from 65535 to 1024"}},
		},
		{
			name:   "items widened",
			reason: "rules recurse into items",
			old:    `{"items": {"type": "string"}}`,
			new:    `{"items": true}`,
			want:   diffResult{Additive: []string{"items: type constraint removed (was string)"}},
		},
		{
			name:   "nested under $defs",
			reason: "a definition applies wherever it is referenced",
			old:    `{"$ref": "#/$defs/port", "$defs": {"port": {"type": "object", "properties": {"port": {"type": "integer"}}}}}`,
			new:    `{"$ref": "#/$defs/port", "$defs": {"port": {"type": "object", "properties": {"port": {"type": "string"}}}}}`,
			want:   diffResult{Breaking: []string{"$defs.port.properties.port: retyped from integer to string"}},
		},
		{
			name:   "new and removed definitions",
			reason: "a new definition is unused until a $ref changes; a removed one may still be referenced",
			old:    `{"$defs": {"a": {"type": "string"}}}`,
			new:    `{"$defs": {"b": {"type": "string"}}}`,
			want: diffResult{
				Breaking: []string{"$defs.a: definition removed; cannot prove nothing refers to it"},
				Additive: []string{"$defs.b: new definition"},
			},
		},
		{
			name:   "nested additionalProperties",
			reason: "rules recurse into additionalProperties subschemas",
			old:    `{"properties": {"labels": {"additionalProperties": {"type": "string"}}}}`,
			new:    `{"properties": {"labels": {"additionalProperties": {"type": "string", "maxLength": 63}}}}`,
			want:   diffResult{Breaking: []string{"properties.labels.additionalProperties: maxLength added: 63"}},
		},

		// Keywords the linter does not model.
		{
			name:   "allOf changed",
			reason: "composition is not analysed",
			old:    `{"allOf": [{"type": "object"}]}`,
			new:    `{"allOf": [{"type": "object"}, {"required": ["a"]}]}`,
			want:   diffResult{Breaking: []string{"(root): unrecognised change to allOf; cannot prove it is backward compatible"}},
		},
		{
			name:   "anyOf widened is still unrecognised",
			reason: "over-reporting is allowed, under-reporting is not",
			old:    `{"anyOf": [{"type": "string"}]}`,
			new:    `{"anyOf": [{"type": "string"}, {"type": "integer"}]}`,
			want:   diffResult{Breaking: []string{"(root): unrecognised change to anyOf; cannot prove it is backward compatible"}},
		},
		{
			name:   "oneOf, not, if/then/else",
			reason: "each changed keyword is reported",
			old:    `{"oneOf": [{"type": "string"}], "not": {"type": "null"}, "if": {"type": "string"}, "then": {"minLength": 1}}`,
			new:    `{"oneOf": [{"type": "integer"}], "not": {"type": "array"}, "if": {"type": "number"}, "then": {"minimum": 1}, "else": false}`,
			want: diffResult{Breaking: []string{
				"(root): unrecognised change to else; cannot prove it is backward compatible",
				"(root): unrecognised change to if; cannot prove it is backward compatible",
				"(root): unrecognised change to not; cannot prove it is backward compatible",
				"(root): unrecognised change to oneOf; cannot prove it is backward compatible",
				"(root): unrecognised change to then; cannot prove it is backward compatible",
			}},
		},
		{
			name:   "$ref retargeted",
			reason: "the targets are not compared",
			old:    `{"$ref": "#/$defs/a", "$defs": {"a": {}, "b": {}}}`,
			new:    `{"$ref": "#/$defs/b", "$defs": {"a": {}, "b": {}}}`,
			want:   diffResult{Breaking: []string{"(root): unrecognised change to $ref; cannot prove it is backward compatible"}},
		},
		{
			name:   "dependentSchemas, patternProperties, contains, unevaluatedProperties",
			reason: "each changed keyword is reported",
			old:    `{"dependentSchemas": {"a": {"required": ["b"]}}, "patternProperties": {"^x": {}}, "contains": {"type": "string"}}`,
			new:    `{"dependentSchemas": {"a": {"required": ["c"]}}, "patternProperties": {"^y": {}}, "contains": {"type": "integer"}, "unevaluatedProperties": false}`,
			want: diffResult{Breaking: []string{
				"(root): unrecognised change to contains; cannot prove it is backward compatible",
				"(root): unrecognised change to dependentSchemas; cannot prove it is backward compatible",
				"(root): unrecognised change to patternProperties; cannot prove it is backward compatible",
				"(root): unrecognised change to unevaluatedProperties; cannot prove it is backward compatible",
			}},
		},
		{
			name:   "prefixItems and items together",
			reason: "items' meaning shifts with the prefix length",
			old:    `{"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}`,
			new:    `{"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {"type": "number"}}`,
			want: diffResult{Breaking: []string{
				"(root): unrecognised change to prefixItems; cannot prove it is backward compatible",
				"items: changed together with prefixItems; cannot prove it is backward compatible",
			}},
		},
		{
			name:   "unknown keyword",
			reason: "unknown keywords are annotations to the validator, but the linter cannot know their purpose",
			old:    `{"x-kubernetes-int-or-string": false}`,
			new:    `{"x-kubernetes-int-or-string": true}`,
			want:   diffResult{Breaking: []string{"(root): unrecognised change to x-kubernetes-int-or-string; cannot prove it is backward compatible"}},
		},
		{
			name:   "another dialect",
			reason: "rules are written for 2020-12",
			old:    `{}`,
			new:    `{"$schema": "http://json-schema.org/draft-07/schema#"}`,
			want:   diffResult{Breaking: []string{"(root): unrecognised change to $schema; cannot prove it is backward compatible"}},
		},

		// Soundness traps.
		{
			name:   "widened definition under not",
			reason: "not: {$ref: a} rejects more when a accepts more: 5 was valid and is now rejected",
			old:    `{"not": {"$ref": "#/$defs/a"}, "$defs": {"a": {"type": "string"}}}`,
			new:    `{"not": {"$ref": "#/$defs/a"}, "$defs": {"a": {"type": ["string", "integer"]}}}`,
			want:   diffResult{Breaking: []string{"$defs.a: type widened from string to [string, integer]" + openOnRefs}},
		},
		{
			name:   "additionalProperties removed under unevaluatedProperties",
			reason: "{z: \"a\"} was evaluated by additionalProperties; now unevaluatedProperties: false rejects it",
			old:    `{"additionalProperties": {"type": "string"}, "unevaluatedProperties": false}`,
			new:    `{"unevaluatedProperties": false}`,
			want:   diffResult{Breaking: []string{"additionalProperties: removed while the schema uses unevaluatedProperties: the properties it evaluated are now unevaluated"}},
		},
		{
			name:   "items removed under unevaluatedItems",
			reason: "[\"a\"] was evaluated by items; now unevaluatedItems: false rejects it",
			old:    `{"allOf": [{"items": {"type": "string"}}], "properties": {"l": {"items": {"type": "string"}}}, "unevaluatedItems": false}`,
			new:    `{"allOf": [{"items": {"type": "string"}}], "properties": {"l": {}}, "unevaluatedItems": false}`,
			want:   diffResult{Breaking: []string{"properties.l.items: removed while the schema uses unevaluatedItems: the items it evaluated are now unevaluated"}},
		},
		{
			name:   "new definition with a dynamic anchor",
			reason: "it can change what an existing $dynamicRef resolves to",
			old:    `{"$dynamicRef": "#node", "$defs": {"n": {"$dynamicAnchor": "node"}}}`,
			new:    `{"$dynamicRef": "#node", "$defs": {"n": {"$dynamicAnchor": "node"}, "m": {"$dynamicAnchor": "other", "type": "string"}}}`,
			want:   diffResult{Breaking: []string{"$defs.m: new definition declares a dynamic anchor, which can change what $dynamicRef resolves to"}},
		},
	}
	if len(tests) < 40 {
		t.Fatalf("only %d lint cases, want at least 40", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Diff(json.RawMessage(tt.old), json.RawMessage(tt.new))
			if err != nil {
				t.Fatalf("Diff: %v", err)
			}
			res := diffResult{Identical: got.Identical, Breaking: strs(got.Breaking), Additive: strs(got.Additive)}
			if diff := cmp.Diff(tt.want, res); diff != "" {
				t.Errorf("%s\nDiff mismatch (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestDiffErr(t *testing.T) {
	t.Parallel()

	old := json.RawMessage(`{"properties": {"region": {"type": "string"}, "replicas": {"maximum": 10}}}`)
	t.Run("breaking", func(t *testing.T) {
		t.Parallel()
		ch, err := Diff(old, json.RawMessage(`{"required": ["region"], "properties": {"region": {"type": "string"}, "replicas": {"maximum": 5}}}`))
		if err != nil {
			t.Fatal(err)
		}
		err = ch.Err()
		var berr *BreakingError
		if !errors.As(err, &berr) {
			t.Fatalf("Err() = %v, want a *BreakingError", err)
		}
		want := "schema: breaking change to a published schema; publish it as a new kind_version instead: properties.region: newly required; properties.replicas: maximum lowered from 10 to 5"
		if diff := cmp.Diff(want, err.Error()); diff != "" {
			t.Errorf("Error() mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(ch.Breaking, berr.Changes); diff != "" {
			t.Errorf("BreakingError.Changes mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("additive", func(t *testing.T) {
		t.Parallel()
		ch, err := Diff(old, json.RawMessage(`{"properties": {"region": {"type": "string"}, "replicas": {"maximum": 20}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Err(); err != nil {
			t.Errorf("Err() = %v, want nil", err)
		}
	})
	t.Run("bad JSON", func(t *testing.T) {
		t.Parallel()
		_, err := Diff(old, json.RawMessage(`{`))
		if err == nil || !strings.HasPrefix(err.Error(), "schema: decode new schema:") {
			t.Errorf("Diff = %v, want a decode error for the new schema", err)
		}
	})
}

// TestDiffSound checks the claim behind each allowed case above: a document
// valid under old stays valid under new. It compiles both and validates
// sample documents, so a rule that calls a narrowing additive shows up here.
func TestDiffSound(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		old, new string
		docs     []string
	}{
		{
			name: "new optional property on a closed object",
			old:  closed(`"name": {"type": "string"}`),
			new:  closed(`"name": {"type": "string"}, "zone": {"type": "string"}`),
			docs: []string{`{}`, `{"name": "a"}`, `{"zone": 1}`},
		},
		{
			name: "new property as wide as additionalProperties",
			old:  `{"additionalProperties": {"type": "string", "maxLength": 10}}`,
			new:  `{"additionalProperties": {"type": "string", "maxLength": 10}, "properties": {"zone": {"type": ["string", "null"]}}}`,
			docs: []string{`{"zone": "abc"}`, `{"zone": "abcdefghijk"}`, `{"zone": 1}`},
		},
		{
			name: "widening bounds and types",
			old:  `{"type": "integer", "minimum": 1, "maximum": 10, "multipleOf": 10}`,
			new:  `{"type": "number", "minimum": 0, "maximum": 20, "multipleOf": 2.5}`,
			docs: []string{`10`, `20`, `5`, `0`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := Diff(json.RawMessage(tt.old), json.RawMessage(tt.new))
			if err != nil {
				t.Fatal(err)
			}
			if len(ch.Breaking) > 0 {
				t.Fatalf("Diff reported breaking changes: %v", ch.Breaking)
			}
			o, n := mustCompile(t, tt.old), mustCompile(t, tt.new)
			for _, doc := range tt.docs {
				if o.Validate(json.RawMessage(doc)) == nil && n.Validate(json.RawMessage(doc)) != nil {
					t.Errorf("%s is valid under old but not under new", doc)
				}
			}
		})
	}
}
