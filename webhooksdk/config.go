package webhooksdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MergeConfig deep-merges override onto defaultSpec and returns the merged JSON document:
// objects merge recursively, and for any other value (scalars, arrays, null) the
// override's value wins. An empty or "null" override returns defaultSpec unchanged; an
// empty or "null" default yields the override. Numbers keep their exact text.
//
// A malformed override never wipes the default: MergeConfig returns defaultSpec together
// with an error. A malformed default, or an override that is not a JSON object, is an
// error too.
func MergeConfig(defaultSpec, override json.RawMessage) (json.RawMessage, error) {
	if isAbsent(override) {
		return defaultSpec, nil
	}
	ovObj, err := decodeObject(override)
	if err != nil {
		return defaultSpec, fmt.Errorf("merge config: override %w", err)
	}
	if isAbsent(defaultSpec) {
		return override, nil
	}
	defObj, err := decodeObject(defaultSpec)
	if err != nil {
		return nil, fmt.Errorf("merge config: default %w", err)
	}
	merged, err := json.Marshal(mergeObjects(defObj, ovObj))
	if err != nil {
		return nil, fmt.Errorf("merge config: %w", err)
	}
	return merged, nil
}

// EffectiveConfig deep-merges override onto defaultSpec (see [MergeConfig]) and decodes
// the result into a T. An absent override decodes the default verbatim; both absent
// decode to the zero T. If the override is malformed, EffectiveConfig returns the default
// decoded into T together with the error, so a caller may choose to run on the default.
//
// The dispatcher already sends the effective config in [Request.Config]; this helper is
// for a provider that layers defaults of its own under it.
func EffectiveConfig[T any](defaultSpec, override json.RawMessage) (T, error) {
	var out T
	merged, mergeErr := MergeConfig(defaultSpec, override)
	if mergeErr != nil && merged == nil {
		return out, fmt.Errorf("effective config: %w", mergeErr)
	}
	if !isAbsent(merged) {
		if err := json.Unmarshal(merged, &out); err != nil {
			return out, fmt.Errorf("effective config: decode: %w", err)
		}
	}
	if mergeErr != nil {
		return out, fmt.Errorf("effective config: %w", mergeErr)
	}
	return out, nil
}

// EffectiveBundle returns the effective config data: a bundle is opaque and replaced
// whole, so override wins if it is non-empty, else def.
func EffectiveBundle(def, override []byte) []byte {
	if len(override) > 0 {
		return override
	}
	return def
}

// CheckConfigSpec reports whether spec can be a provider config spec: absent, null, or
// exactly one JSON object — what [MergeConfig] accepts as a default or an override. The
// core refuses any other config, so that every merge of a stored config succeeds.
func CheckConfigSpec(spec json.RawMessage) error {
	if isAbsent(spec) {
		return nil
	}
	_, err := decodeObject(spec)
	return err
}

// decodeObject decodes exactly one JSON object, keeping numbers exact. Its errors read
// after a noun: "override is not a JSON object".
func decodeObject(b []byte) (map[string]any, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("is not a JSON object")
	}
	return obj, nil
}

func isAbsent(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

// decodeJSON decodes exactly one JSON value, keeping numbers as json.Number.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func mergeObjects(def, ov map[string]any) map[string]any {
	out := make(map[string]any, len(def)+len(ov))
	for k, v := range def {
		out[k] = v
	}
	for k, v := range ov {
		dv, dok := out[k].(map[string]any)
		ovv, ook := v.(map[string]any)
		if dok && ook {
			out[k] = mergeObjects(dv, ovv)
			continue
		}
		out[k] = v
	}
	return out
}
