package schema

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// fuzzBound is how long one Compile or Validate of a fuzzed input may take:
// far above what any legitimate schema needs (microseconds), so only a
// runaway (a regex bomb, a $ref loop walked forever) trips it.
const fuzzBound = 10 * time.Second

// schemaSeeds cover the keywords an operator reaches for, $ref in its
// forms (local, anchors, cycles, external) and patterns, including
// classic backtracking bombs, which the RE2 engine must run in linear time.
var schemaSeeds = []string{
	`{"type":"object","properties":{"cidr":{"type":"string","pattern":"^[0-9./]+$"}},"required":["cidr"],"additionalProperties":false}`,
	`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer","minimum":1,"maximum":10,"multipleOf":2}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#"}`,
	`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
	`{"$defs":{"x":{"$anchor":"x","type":"string"}},"$ref":"#x"}`,
	`{"$ref":"https://example.com/s.json"}`,
	`{"$ref":"file:///etc/passwd"}`,
	`{"$ref":"other.json#/a"}`,
	`{"$ref":"#/$defs/missing"}`,
	`{"$id":"https://x.example/root","$defs":{"a":{"$id":"a","type":"null"}},"$ref":"a"}`,
	`{"type":"string","pattern":"^(a+)+$"}`,
	`{"type":"string","pattern":"(a|a)*b"}`,
	`{"type":"string","pattern":"((a{100}){100}){100}"}`,
	`{"type":"string","pattern":"(?=a)"}`,
	`{"type":"string","pattern":"\\p{L}{1,1000}"}`,
	`{"type":"object","patternProperties":{"^(x+x+)+y$":{"type":"string"}}}`,
	`{"type":"string","format":"email","minLength":1,"maxLength":1e300}`,
	`{"type":"array","prefixItems":[{"type":"string"}],"items":false,"contains":{"const":1},"uniqueItems":true}`,
	`{"allOf":[{"type":"object"}],"anyOf":[{"required":["a"]},{"required":["b"]}],"not":{"type":"null"}}`,
	`{"if":{"properties":{"a":{"const":1}}},"then":{"required":["b"]},"else":{"required":["c"]}}`,
	`{"type":"object","dependentRequired":{"a":["b"]},"unevaluatedProperties":false}`,
	`true`, `false`, `null`, ``, `[]`, `{"type":"nope"}`, `{"minimum":"1"}`,
}

var docSeeds = []string{
	`{"cidr":"10.0.0.0/16"}`, `4`, `"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"`,
	`{"next":{"next":{"next":null}}}`, `[1,"a",1]`, `null`, `{"a":1}`, `1e400`, `{`, ``,
}

// timed runs fn and fails when it takes longer than fuzzBound.
func timed(t *testing.T, what string, fn func()) {
	t.Helper()
	begin := time.Now()
	fn()
	if d := time.Since(begin); d > fuzzBound {
		t.Fatalf("%s took %s", what, d)
	}
}

// FuzzCompileValidate: Compile, which takes operators' schemas, refuses
// what it cannot compile with an error instead of panicking or running
// away, and refuses the same document again; a compiled schema's Validate answers a document with nil,
// a *ValidationError, or, only for a document that is not JSON, a decode
// error.
func FuzzCompileValidate(f *testing.F) {
	// One document per schema: each Compile costs milliseconds, and every
	// seed runs before the fuzzing starts.
	for i, s := range schemaSeeds {
		f.Add([]byte(s), []byte(docSeeds[i%len(docSeeds)]))
	}
	f.Fuzz(func(t *testing.T, raw, doc []byte) {
		var sch *Schema
		var err error
		timed(t, "Compile", func() { sch, err = Compile(raw) })
		if err != nil {
			if sch != nil {
				t.Fatal("Compile returned a schema and an error")
			}
			if _, again := Compile(raw); again == nil {
				t.Fatalf("Compile refused the schema (%v), then compiled it", err)
			}
			return
		}
		if sch != nil && string(sch.Raw()) != string(raw) {
			t.Fatalf("Raw() = %q, want %q", sch.Raw(), raw)
		}
		var verr error
		timed(t, "Validate", func() { verr = sch.Validate(doc) })
		var v *ValidationError
		switch {
		case verr == nil:
		case errors.As(verr, &v):
			if len(v.Violations) == 0 {
				t.Fatal("a ValidationError with no violation")
			}
			_ = v.Error()
		case json.Valid(doc):
			t.Fatalf("Validate of valid JSON %q failed without a ValidationError: %v", doc, verr)
		}
	})
}

// FuzzDiffSound: Diff (strict, as the randomised soundness test runs it)
// is sound on any pair of schemas that compile: when it reports no
// breaking change, a document the old schema accepts the new one accepts.
// And a schema compared with itself is identical.
func FuzzDiffSound(f *testing.F) {
	for i, s := range schemaSeeds {
		f.Add([]byte(s), []byte(schemaSeeds[(i+1)%len(schemaSeeds)]), []byte(docSeeds[i%len(docSeeds)]))
	}
	f.Add([]byte(`{"type":"integer","maximum":5}`), []byte(`{"type":"integer","maximum":6}`), []byte(`5`))
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"string"}}}`), []byte(`{"type":"object"}`), []byte(`{"a":"x"}`))
	f.Fuzz(func(t *testing.T, oldRaw, newRaw, doc []byte) {
		osch, err := Compile(oldRaw)
		if err != nil {
			return
		}
		nsch, err := Compile(newRaw)
		if err != nil {
			return
		}
		if self, err := diff(oldRaw, oldRaw, true); err != nil || !self.Identical {
			t.Fatalf("a schema diffed with itself: %+v, %v", self, err)
		}
		ch, err := diff(oldRaw, newRaw, true)
		if err != nil {
			t.Fatalf("Diff of two compiled schemas: %v", err)
		}
		if len(ch.Breaking) > 0 || !json.Valid(doc) {
			return
		}
		if osch.Validate(doc) == nil && nsch.Validate(doc) != nil {
			t.Fatalf("unsound: no breaking change found (additive: %v), but\n old: %s\n new: %s\n doc: %s\n err: %v",
				ch.Additive, oldRaw, newRaw, doc, nsch.Validate(doc))
		}
	})
}
