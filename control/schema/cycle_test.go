package schema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/schema"
)

// TestCompileRefusesRefCycles: a schema whose $refs loop on one value
// compiled, and then every document failed with "reference cycle". It is
// refused at compile time; recursion that descends into the document is
// fine.
func TestCompileRefusesRefCycles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, schema, cycle string
	}{
		{"Self", `{"$ref":"#"}`, "/ -> /"},
		{"TwoDefs", `{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}}`, "/$defs/a -> /$defs/b -> /$defs/a"},
		{"ThroughAllOf", `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"type":"object","properties":{"x":{"$ref":"#/$defs/a"}}}`, "/$defs/a"},
		{"ThroughNot", `{"$defs":{"a":{"not":{"$ref":"#/$defs/a"}}},"anyOf":[{"$ref":"#/$defs/a"}]}`, "/$defs/a"},
		{"ThroughIfThen", `{"$defs":{"a":{"if":true,"then":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`, "/$defs/a"},
		{"UnderProperties", `{"type":"object","properties":{"deep":{"$ref":"#/$defs/loop"}},"$defs":{"loop":{"$ref":"#/$defs/loop"}}}`, "/$defs/loop -> /$defs/loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := schema.Compile(json.RawMessage(tc.schema))
			if !errors.Is(err, schema.ErrRefCycle) {
				t.Fatalf("Compile = %v, want ErrRefCycle", err)
			}
			if !strings.Contains(err.Error(), tc.cycle) {
				t.Errorf("error %q does not show the cycle %q", err, tc.cycle)
			}
		})
	}
	for _, tc := range []struct{ name, schema, doc string }{
		{"TreeThroughProperties", `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`,
			`{"name":"a","children":[{"name":"b","children":[]}]}`},
		{"LinkedListThroughDefs", `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}}}`,
			`{"next":{"next":{}}}`},
		{"SharedDefNoCycle", `{"allOf":[{"$ref":"#/$defs/s"},{"$ref":"#/$defs/s"}],"$defs":{"s":{"type":"object"}}}`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := schema.Compile(json.RawMessage(tc.schema))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if err := s.Validate(json.RawMessage(tc.doc)); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}
