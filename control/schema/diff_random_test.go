package schema

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// TestDiffSoundRandom searches for counterexamples to the gate's soundness:
// random schema edits that Diff calls non-breaking, and a random document
// that the old schema accepts and the new one rejects. Set DIFF_FUZZ_PAIRS
// to search longer.
func TestDiffSoundRandom(t *testing.T) {
	t.Parallel()

	pairs := 300
	if n, err := strconv.Atoi(os.Getenv("DIFF_FUZZ_PAIRS")); err == nil {
		pairs = n
	}
	r := rand.New(rand.NewPCG(1, 2))
	docs := make([]json.RawMessage, 300)
	for i := range docs {
		docs[i] = mustJSON(t, genValue(r, 3))
	}
	var checked int
	for range pairs {
		old := genSchema(r, 2, true)
		new := mutate(r, clone(old), 2)
		oraw, nraw := mustJSON(t, old), mustJSON(t, new)
		ch, err := diff(oraw, nraw, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.Breaking) > 0 {
			continue
		}
		osch, err1 := Compile(oraw)
		nsch, err2 := Compile(nraw)
		if err1 != nil || err2 != nil {
			continue
		}
		checked++
		for _, doc := range docs {
			if osch.Validate(doc) == nil && nsch.Validate(doc) != nil {
				t.Errorf("unsound: Diff found no breaking change (additive: %v), but\n  old: %s\n  new: %s\n  doc: %s\n  err: %v",
					ch.Additive, oraw, nraw, doc, nsch.Validate(doc))
				break
			}
		}
	}
	t.Logf("checked %d of %d random edits that Diff called compatible", checked, pairs)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	genNames   = []string{"a", "b", "x1"}
	genTypes   = []string{"string", "integer", "number", "object", "array", "null", "boolean"}
	genNums    = []any{0, 1, 2, 2.5, 5, 10}
	genScalars = []any{nil, true, false, 0, 1, 2, 2.5, 5, 10, "", "a", "ab", "x1", "A"}
	genPats    = []string{"^a", "^x", "b$", "^[a-z]+$"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func genValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(10); {
	case depth == 0 || n < 5:
		return pick(r, genScalars)
	case n < 7:
		arr := []any{}
		for range r.IntN(4) {
			arr = append(arr, genValue(r, depth-1))
		}
		return arr
	default:
		obj := map[string]any{}
		for range r.IntN(4) {
			obj[pick(r, []string{"a", "b", "x1", "xa", "c"})] = genValue(r, depth-1)
		}
		return obj
	}
}

func genSchema(r *rand.Rand, depth int, root bool) any {
	if r.IntN(8) == 0 {
		return r.IntN(2) == 0
	}
	s := map[string]any{}
	for range 1 + r.IntN(3) {
		addKeyword(r, s, depth)
	}
	if root && r.IntN(4) == 0 {
		s["$defs"] = map[string]any{"d": genSchema(r, 0, false)}
		ref := map[string]any{"$ref": "#/$defs/d"}
		if r.IntN(2) == 0 {
			s["not"] = ref
		} else {
			s["properties"] = map[string]any{"a": ref}
		}
	}
	return s
}

func addKeyword(r *rand.Rand, s map[string]any, depth int) {
	switch r.IntN(17) {
	case 0:
		if r.IntN(2) == 0 {
			s["type"] = pick(r, genTypes)
		} else {
			s["type"] = []any{pick(r, genTypes), pick(r, genTypes)}
		}
	case 1:
		s["enum"] = []any{pick(r, genScalars), pick(r, genScalars)}
	case 2:
		s["const"] = pick(r, genScalars)
	case 3:
		s[pick(r, []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})] = pick(r, genNums)
	case 4:
		s["multipleOf"] = pick(r, genNums[1:])
	case 5:
		s[pick(r, []string{"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})] = r.IntN(3)
	case 6:
		s["pattern"] = pick(r, genPats)
	case 7:
		s["required"] = []any{pick(r, genNames)}
	case 8, 9:
		if depth > 0 {
			props := map[string]any{}
			for range 1 + r.IntN(2) {
				props[pick(r, genNames)] = genSchema(r, depth-1, false)
			}
			s["properties"] = props
		}
	case 10:
		if depth > 0 && r.IntN(2) == 0 {
			s["additionalProperties"] = genSchema(r, depth-1, false)
		} else {
			s["additionalProperties"] = r.IntN(2) == 0
		}
	case 11:
		if depth > 0 {
			s["items"] = genSchema(r, depth-1, false)
		}
	case 12:
		s["uniqueItems"] = r.IntN(2) == 0
	case 13:
		if depth > 0 {
			s["patternProperties"] = map[string]any{pick(r, genPats): genSchema(r, depth-1, false)}
		}
	case 14:
		s["unevaluatedProperties"] = r.IntN(2) == 0
	case 15:
		s["minContains"] = r.IntN(2)
		s["contains"] = map[string]any{"type": pick(r, genTypes)}
	case 16:
		s["dependentRequired"] = map[string]any{pick(r, genNames): []any{pick(r, genNames)}}
	}
}

// mutate makes one to three random edits somewhere in s.
func mutate(r *rand.Rand, s any, depth int) any {
	for range 1 + r.IntN(3) {
		s = mutateOnce(r, s, depth)
	}
	return s
}

func mutateOnce(r *rand.Rand, s any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok {
		return genSchema(r, depth, false)
	}
	switch r.IntN(4) {
	case 0: // add or replace a keyword
		addKeyword(r, m, depth)
	case 1: // remove a keyword
		for k := range m {
			delete(m, k)
			break
		}
	case 2: // recurse into a subschema
		for _, kw := range []string{"properties", "$defs", "patternProperties"} {
			if sub, ok := m[kw].(map[string]any); ok {
				for k, v := range sub {
					sub[k] = mutateOnce(r, v, depth-1)
					return m
				}
			}
		}
		for _, kw := range []string{"items", "additionalProperties"} {
			if v, ok := m[kw]; ok {
				m[kw] = mutateOnce(r, v, depth-1)
				return m
			}
		}
		addKeyword(r, m, depth)
	case 3: // nudge a bound or an enum
		for _, kw := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} {
			if _, ok := m[kw]; ok {
				m[kw] = pick(r, genNums[1:])
				return m
			}
		}
		if e, ok := m["enum"].([]any); ok {
			m["enum"] = append(e, pick(r, genScalars))
			return m
		}
		addKeyword(r, m, depth)
	}
	return m
}

func clone(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
