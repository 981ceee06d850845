package stdstarlark

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/convergeplane/converge/webhooksdk"
)

// maxDepth bounds the nesting of a value converted to JSON; Starlark lists may contain
// themselves.
const maxDepth = 64

// fromJSON converts a JSON document into Starlark values: objects become dicts (keys
// sorted, so iteration is deterministic), integers ints of any size, other numbers floats.
func fromJSON(raw json.RawMessage) (starlark.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return starlarkValue(v)
}

func starlarkValue(v any) (starlark.Value, error) {
	switch v := v.(type) {
	case nil:
		return starlark.None, nil
	case bool:
		return starlark.Bool(v), nil
	case string:
		return starlark.String(v), nil
	case json.Number:
		if i, ok := new(big.Int).SetString(v.String(), 10); ok {
			return starlark.MakeBigInt(i), nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", v, err)
		}
		return starlark.Float(f), nil
	case []any:
		elems := make([]starlark.Value, len(v))
		for i, e := range v {
			sv, err := starlarkValue(e)
			if err != nil {
				return nil, err
			}
			elems[i] = sv
		}
		return starlark.NewList(elems), nil
	case map[string]any:
		d := starlark.NewDict(len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			sv, err := starlarkValue(v[k])
			if err != nil {
				return nil, err
			}
			if err := d.SetKey(starlark.String(k), sv); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}

// toJSON converts a Starlark value to a Go value that encodes as JSON: dicts with string
// keys and structs become objects, lists and tuples arrays. where names the value in
// errors.
func toJSON(v starlark.Value, where string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d", where, maxDepth)
	}
	switch v := v.(type) {
	case starlark.NoneType:
		return nil, nil
	case starlark.Bool:
		return bool(v), nil
	case starlark.String:
		return string(v), nil
	case starlark.Int:
		if i, ok := v.Int64(); ok {
			return i, nil
		}
		return json.Number(v.String()), nil
	case starlark.Float:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%s: %v is not a JSON number", where, v)
		}
		return float64(v), nil
	case *starlark.List, starlark.Tuple:
		seq := v.(starlark.Indexable)
		out := make([]any, seq.Len())
		for i := range out {
			e, err := toJSON(seq.Index(i), fmt.Sprintf("%s[%d]", where, i), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case *starlark.Dict, *starlarkstruct.Struct:
		fs, err := fields(v, where)
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, len(fs))
		for k, e := range fs {
			if out[k], err = toJSON(e, where+"."+k, depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: a %s is not JSON", where, v.Type())
}

// object converts v, a dict or struct, to a JSON object.
func object(v starlark.Value, where string) (json.RawMessage, error) {
	if _, err := fields(v, where); err != nil {
		return nil, err
	}
	g, err := toJSON(v, where, 0)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return b, nil
}

// fields returns the fields of a struct or of a dict with string keys. With allowed
// given, any other field is an error (it is most likely a typo).
func fields(v starlark.Value, where string, allowed ...string) (map[string]starlark.Value, error) {
	out := map[string]starlark.Value{}
	switch v := v.(type) {
	case *starlarkstruct.Struct:
		for _, k := range v.AttrNames() {
			out[k], _ = v.Attr(k)
		}
	case *starlark.Dict:
		for _, kv := range v.Items() {
			k, ok := kv[0].(starlark.String)
			if !ok {
				return nil, fmt.Errorf("%s: key %s is a %s, not a string", where, kv[0], kv[0].Type())
			}
			out[string(k)] = kv[1]
		}
	default:
		return nil, fmt.Errorf("%s: want a struct or dict, got %s", where, v.Type())
	}
	if len(allowed) > 0 {
		for k := range out {
			if !slices.Contains(allowed, k) {
				return nil, fmt.Errorf("%s: unknown field %q (want %s)", where, k, strings.Join(allowed, ", "))
			}
		}
	}
	return out, nil
}

// str returns field k of fs as a string; required says whether it may be absent.
func str(fs map[string]starlark.Value, k, where string, required bool) (string, error) {
	v, ok := fs[k]
	if !ok || v == starlark.None {
		if required {
			return "", fmt.Errorf("%s.%s is required", where, k)
		}
		return "", nil
	}
	s, ok := v.(starlark.String)
	if !ok {
		return "", fmt.Errorf("%s.%s: want a string, got %s", where, k, v.Type())
	}
	return string(s), nil
}

// list returns field k of fs as a list or tuple; absent is empty.
func list(fs map[string]starlark.Value, k, where string) (starlark.Indexable, error) {
	v, ok := fs[k]
	if !ok || v == starlark.None {
		return starlark.Tuple{}, nil
	}
	switch v.(type) {
	case *starlark.List, starlark.Tuple:
		return v.(starlark.Indexable), nil
	}
	return nil, fmt.Errorf("%s.%s: want a list, got %s", where, k, v.Type())
}

// decodeCompose reads compose's result: struct(children=[…], edges=[…], status={…}).
func decodeCompose(v starlark.Value) (webhooksdk.Outcome, error) {
	var out webhooksdk.Outcome
	fs, err := fields(v, "result", "children", "edges", "status")
	if err != nil {
		return out, err
	}
	children, err := list(fs, "children", "result")
	if err != nil {
		return out, err
	}
	for i := range children.Len() {
		c, err := decodeChild(children.Index(i), fmt.Sprintf("children[%d]", i))
		if err != nil {
			return out, err
		}
		out.Children = append(out.Children, c)
	}
	edges, err := list(fs, "edges", "result")
	if err != nil {
		return out, err
	}
	for i := range edges.Len() {
		e, err := decodeEdge(edges.Index(i), fmt.Sprintf("edges[%d]", i))
		if err != nil {
			return out, err
		}
		out.Edges = append(out.Edges, e)
	}
	if s, ok := fs["status"]; ok && s != starlark.None {
		if out.Status, err = object(s, "status"); err != nil {
			return out, err
		}
	}
	return out, nil
}

func decodeChild(v starlark.Value, where string) (webhooksdk.Child, error) {
	var c webhooksdk.Child
	fs, err := fields(v, where, "kind", "kind_version", "name", "labels", "spec")
	if err != nil {
		return c, err
	}
	if c.Kind, err = str(fs, "kind", where, true); err != nil {
		return c, err
	}
	if c.Name, err = str(fs, "name", where, true); err != nil {
		return c, err
	}
	kv, ok := fs["kind_version"].(starlark.Int)
	if !ok {
		return c, fmt.Errorf("%s.kind_version: want an int 1..%d (there is no default)", where, webhooksdk.MaxKindVersion)
	}
	if c.KindVersion, err = starlark.AsInt32(kv); err != nil {
		return c, fmt.Errorf("%s.kind_version: %w", where, err)
	}
	if l, ok := fs["labels"]; ok && l != starlark.None {
		lfs, err := fields(l, where+".labels")
		if err != nil {
			return c, err
		}
		c.Labels = make(map[string]string, len(lfs))
		for k := range lfs {
			if c.Labels[k], err = str(lfs, k, where+".labels", true); err != nil {
				return c, err
			}
		}
	}
	if s, ok := fs["spec"]; ok && s != starlark.None {
		if c.Spec, err = object(s, where+".spec"); err != nil {
			return c, err
		}
	}
	return c, nil
}

func decodeEdge(v starlark.Value, where string) (webhooksdk.Edge, error) {
	var e webhooksdk.Edge
	fs, err := fields(v, where, "dependent", "dependency", "values")
	if err != nil {
		return e, err
	}
	if e.Dependent, err = decodeRef(fs["dependent"], where+".dependent"); err != nil {
		return e, err
	}
	if e.Dependency, err = decodeRef(fs["dependency"], where+".dependency"); err != nil {
		return e, err
	}
	values, err := list(fs, "values", where)
	if err != nil {
		return e, err
	}
	for i := range values.Len() {
		w := fmt.Sprintf("%s.values[%d]", where, i)
		vfs, err := fields(values.Index(i), w, "dependent", "source")
		if err != nil {
			return e, err
		}
		var f webhooksdk.ValueFlow
		if f.DependentField, err = str(vfs, "dependent", w, true); err != nil {
			return e, err
		}
		if f.SourceField, err = str(vfs, "source", w, true); err != nil {
			return e, err
		}
		e.Values = append(e.Values, f)
	}
	return e, nil
}

func decodeRef(v starlark.Value, where string) (webhooksdk.Ref, error) {
	var r webhooksdk.Ref
	if v == nil {
		return r, fmt.Errorf("%s is required", where)
	}
	fs, err := fields(v, where, "kind", "name")
	if err != nil {
		return r, err
	}
	if r.Kind, err = str(fs, "kind", where, true); err != nil {
		return r, err
	}
	r.Name, err = str(fs, "name", where, true)
	return r, err
}

// decodeStatus reads status's result: struct(status={…}, conditions=[…]).
func decodeStatus(v starlark.Value) (webhooksdk.Outcome, error) {
	var out webhooksdk.Outcome
	fs, err := fields(v, "result", "status", "conditions")
	if err != nil {
		return out, err
	}
	if s, ok := fs["status"]; ok && s != starlark.None {
		if out.Status, err = object(s, "status"); err != nil {
			return out, err
		}
	}
	conds, err := list(fs, "conditions", "result")
	if err != nil {
		return out, err
	}
	for i := range conds.Len() {
		w := fmt.Sprintf("conditions[%d]", i)
		cfs, err := fields(conds.Index(i), w, "type", "status", "reason", "message")
		if err != nil {
			return out, err
		}
		var c webhooksdk.Condition
		if c.Type, err = str(cfs, "type", w, true); err != nil {
			return out, err
		}
		if c.Status, err = str(cfs, "status", w, true); err != nil {
			return out, err
		}
		if c.Status != "True" && c.Status != "False" && c.Status != "Unknown" {
			return out, fmt.Errorf("%s.status: %q, want \"True\", \"False\" or \"Unknown\"", w, c.Status)
		}
		if c.Reason, err = str(cfs, "reason", w, false); err != nil {
			return out, err
		}
		if c.Message, err = str(cfs, "message", w, false); err != nil {
			return out, err
		}
		out.Conditions = append(out.Conditions, c)
	}
	return out, nil
}
