package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// baseURL names the inline document inside the compiler. It is never fetched:
// the document is added as a resource before compiling. Relative $refs without
// an $id resolve against it and are then refused by the loader like any other
// URL.
const baseURL = "mem:///schema.json"

// draft2020 is the only $schema a kind schema may name. The linter's rules are
// written for 2020-12 semantics (items vs prefixItems, format as annotation),
// so an older draft would make them unsound.
var draft2020 = map[string]bool{
	"https://json-schema.org/draft/2020-12/schema": true,
	"http://json-schema.org/draft/2020-12/schema":  true,
}

// ErrExternalRef is wrapped by Compile when the schema refers to a document
// outside itself. Kind schemas come from operators; fetching what they name
// would let them make the control plane read the network or local files
// (SSRF, file disclosure), so nothing is ever loaded.
var ErrExternalRef = errors.New("external reference")

// Schema is a compiled kind schema. It is immutable and safe for concurrent
// use. A nil *Schema is an untyped axis: it accepts every document.
type Schema struct {
	raw json.RawMessage
	sch *jsonschema.Schema
}

// Compile compiles an inline draft 2020-12 schema. $schema may be omitted.
// A nil, empty or null raw returns a nil *Schema (untyped) and no error.
//
// Any $ref that leaves the document (http, file or relative URLs) fails with
// an error wrapping ErrExternalRef; the 2020-12 metaschema, $defs and anchors
// keep working because the library embeds the metaschema. A document that is
// not a valid schema fails with an error wrapping *ValidationError whose
// pointers point into the schema; one whose $refs loop without descending
// into the document fails with an error wrapping ErrRefCycle.
func Compile(raw json.RawMessage) (*Schema, error) {
	return compile(raw, refuseLoader{})
}

// compile is Compile with a chosen loader, so the official test suite can
// serve its localhost remotes through the same path production uses.
func compile(raw json.RawMessage, loader jsonschema.URLLoader) (*Schema, error) {
	if isNull(raw) {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema: decode: %w", err)
	}
	var dialect string
	if obj, ok := doc.(map[string]any); ok {
		dialect, _ = obj["$schema"].(string)
	}
	if dialect != "" && isJSONSchemaOrg(dialect) && !draft2020[strings.TrimSuffix(dialect, "#")] {
		return nil, fmt.Errorf("schema: $schema %q is not supported; kind schemas are draft 2020-12", dialect)
	}

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(loader)
	if err := c.AddResource(baseURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	sch, err := c.Compile(baseURL)
	if err != nil {
		return nil, compileError(err, dialect)
	}
	if err := checkRefCycles(sch); err != nil {
		return nil, fmt.Errorf("schema: %w; every document would fail to validate", err)
	}
	return &Schema{raw: bytes.Clone(raw), sch: sch}, nil
}

// compileError turns the library's errors into ones an operator can act on.
// dialect is the root $schema, so a refused custom metaschema is not reported
// as a $ref.
func compileError(err error, dialect string) error {
	var load *jsonschema.LoadURLError
	if errors.As(err, &load) && errors.Is(load.Err, ErrExternalRef) {
		if dialect != "" && load.URL == strings.TrimSuffix(dialect, "#") {
			return fmt.Errorf("schema: $schema %q is not supported; kind schemas are draft 2020-12: %w", dialect, ErrExternalRef)
		}
		return fmt.Errorf("schema: external $ref %q is not allowed; inline it under $defs: %w", load.URL, ErrExternalRef)
	}
	var meta *jsonschema.SchemaValidationError
	var verr *jsonschema.ValidationError
	if errors.As(err, &meta) && errors.As(meta.Err, &verr) {
		return fmt.Errorf("schema: not a valid draft 2020-12 schema: %w", newValidationError(verr, nil))
	}
	// The remaining errors (dangling $ref, duplicate anchor...) name the
	// internal base URL; strip it so the message points into the document.
	return &compileErr{msg: "schema: " + strings.ReplaceAll(err.Error(), baseURL, ""), err: err}
}

// compileErr rewords a library error but still unwraps to it.
type compileErr struct {
	msg string
	err error
}

func (e *compileErr) Error() string { return e.msg }
func (e *compileErr) Unwrap() error { return e.err }

// Raw returns the schema document as given to Compile. The API publishes it in
// OpenAPI. Raw on a nil Schema returns nil. Callers must not modify it.
func (s *Schema) Raw() json.RawMessage {
	if s == nil {
		return nil
	}
	return s.raw
}

// Validate checks doc against the schema. A violation is returned as a
// *ValidationError; any other error means doc is not JSON. Validate on a nil
// Schema accepts anything without parsing it.
func (s *Schema) Validate(doc json.RawMessage) error {
	if s == nil {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("schema: decode document: %w", err)
	}
	if err := s.sch.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return fmt.Errorf("schema: validate: %w", err)
		}
		return newValidationError(verr, v)
	}
	return nil
}

// refuseLoader is the production loader: it loads nothing. The library serves
// the draft metaschemas from its embedded copy before it consults a loader.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, ErrExternalRef
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func isJSONSchemaOrg(s string) bool {
	return strings.HasPrefix(s, "https://json-schema.org/") || strings.HasPrefix(s, "http://json-schema.org/")
}
