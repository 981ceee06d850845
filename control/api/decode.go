package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
)

// decodeBody decodes a JSON request body into v strictly: one JSON value,
// no unknown fields, every field of its Go type, every string valid UTF-8
// without NUL, no key twice in one object (see checkJSON). Anything else is
// a 400 naming where it went wrong, before any database work. Rule checks
// (422) come after, in the store.
func decodeBody(raw []byte, v any) *Problem {
	if p := decodeJSON(raw, v); p != nil {
		return p
	}
	return checkJSON("body", raw)
}

// decodeJSON is decodeBody without checkJSON's walk of every string and
// key: for an envelope whose parts are each decoded with decodeBody.
func decodeJSON(raw []byte, v any) *Problem {
	if len(bytes.TrimSpace(raw)) == 0 {
		return newProblem(http.StatusBadRequest, typeMalformed, "the request body is empty; send a JSON object",
			ProblemError{Location: "body", Message: "is required"})
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	// Not dec.More(): it reports no more for a stray ']' or '}'.
	if err == nil && len(bytes.Trim(raw[dec.InputOffset():], " \t\r\n")) > 0 {
		err = errors.New("unexpected data after the JSON document")
	}
	if err == nil {
		return nil
	}
	var (
		se *json.SyntaxError
		te *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &se):
		return malformed("body", fmt.Sprintf("is not valid JSON: %s (at byte %d)", se.Error(), se.Offset), nil)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("body", "is not valid JSON: it ends too early", nil)
	case errors.As(err, &te):
		loc := "body"
		if f := jsonPath(te.Field); f != "" {
			loc += "." + f
		}
		return malformed(loc, fmt.Sprintf("must be %s, got %s", jsonTypeName(te.Type.Kind().String()), te.Value), nil)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		return malformed("body", fmt.Sprintf("has an unknown field %q", name), name)
	}
	return malformed("body", "cannot be decoded: "+err.Error(), nil)
}

// embedded are the Go names of the structs the body types embed; the
// decoder puts them in field paths, where a client expects JSON names.
var embedded = map[string]bool{"KindManifest": true, "Policy": true, "ResourceApply": true,
	"ProviderConfigApply": true, "ReactorBindingApply": true, "EndpointApply": true, "KindConfigPut": true}

// jsonPath drops the embedded struct names from a decoder field path.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	kept := parts[:0]
	for _, p := range parts {
		if p != "" && !embedded[p] {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ".")
}

func malformed(loc, msg string, value any) *Problem {
	return newProblem(http.StatusBadRequest, typeMalformed, loc+" "+msg, ProblemError{Location: loc, Message: msg, Value: value})
}

func jsonTypeName(goKind string) string {
	switch goKind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	}
	return "a " + goKind
}

// versionField decodes a kind_version so that every number outside
// 1..32767 — 0, 40000, 1.5, 1e10 — is a rule violation (422) rather than a
// decoding failure, while a non-number is still malformed (400).
type versionField struct {
	raw json.RawMessage
}

// UnmarshalJSON keeps the raw value for value().
func (v *versionField) UnmarshalJSON(b []byte) error {
	v.raw = append(v.raw[:0], b...)
	return nil
}

// Schema documents the field as the integer it must be.
func (versionField) Schema(huma.Registry) *huma.Schema {
	lo, hi := 1.0, float64(model.MaxKindVersion)
	return &huma.Schema{Type: huma.TypeInteger, Minimum: &lo, Maximum: &hi,
		Description: "The kind version, 1..32767. Required; there is no default."}
}

// value returns the version, or a Problem: 422 when it is absent, null or
// a number outside 1..32767, 400 when it is not a number.
func (v versionField) value(loc string) (int, *Problem) {
	raw := bytes.TrimSpace(v.raw)
	invalid := func(msg string, value any) *Problem {
		return newProblem(http.StatusUnprocessableEntity, typeInvalid, loc+" "+msg,
			ProblemError{Location: loc, Message: msg, Value: value})
	}
	if len(raw) == 0 || string(raw) == "null" {
		return 0, invalid(fmt.Sprintf("is required: an integer in 1..%d (there is no default)", model.MaxKindVersion), nil)
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, malformed(loc, "must be an integer", json.RawMessage(raw))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || !model.ValidKindVersion(int(min(max(n, -1), model.MaxKindVersion+1))) {
		return 0, invalid(fmt.Sprintf("must be an integer in 1..%d", model.MaxKindVersion), json.RawMessage(raw))
	}
	return int(n), nil
}

// labelsField decodes a label map while keeping each value raw, so a
// non-string value is reported at its own key (body.labels.team) rather
// than at the map.
type labelsField map[string]json.RawMessage

// Schema documents the field as an object of strings.
func (labelsField) Schema(huma.Registry) *huma.Schema {
	return &huma.Schema{Type: huma.TypeObject, AdditionalProperties: &huma.Schema{Type: huma.TypeString},
		Description: "String keys and string values; any Unicode text."}
}

// strings returns the labels, or a 400 naming the first key whose value is
// not a string.
func (l labelsField) strings(loc string) (map[string]string, *Problem) {
	if l == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]string, len(l))
	for _, k := range keys {
		raw := l[k]
		var s string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			var v any
			_ = json.Unmarshal(raw, &v) // echo what was sent
			return nil, malformed(loc+"."+k, "label values must be strings, got "+jsonKind(v), v)
		}
		out[k] = s
	}
	return out, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "something else"
}
