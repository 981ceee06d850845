// Package gentypes turns a kind manifest's JSON Schemas into Go, TypeScript
// or Python types, so a provider's handler is typed end to end. It backs
// `conctl gen-types`.
//
// One manifest yields a type per schema it carries: Spec (spec_schema),
// Status (status_schema), Config (config_schema, the provider config) and,
// per operation reaction, <Verb>Input (its input_schema). An axis without a
// schema is an open object. Each schema is first checked the way the server
// checks it (control/schema.Compile), then walked in its compiled form, so
// $ref and $defs resolve exactly as the server resolves them.
//
// The mapping: an object with properties becomes a Go struct with json tags,
// a TypeScript interface or a Python TypedDict, its required properties
// required and the others optional (a pointer with omitempty in Go for
// scalars and structs, "?" in TypeScript, NotRequired in Python); an object
// without properties becomes a map of its additionalProperties type; an
// array a slice / array / list; enum and const a named string type with
// constants in Go, a union of literals in TypeScript, a Literal in Python; a
// $defs entry a declaration of its own name. oneOf and anyOf become a union
// in TypeScript and Python; Go has no unions, so they become json.RawMessage
// (the members that are objects are still declared, to decode into), and a
// member that is only null makes the rest nullable. allOf of objects merges
// their properties. A property set beside additionalProperties with a schema
// gets an index signature in TypeScript; Go and Python keep the named
// properties only. Keywords that constrain values without changing their
// type (pattern, minimum, format...) are not expressed.
package gentypes

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// Languages lists the output languages Generate accepts.
var Languages = []string{"go", "typescript", "python"}

// Options chooses the output.
type Options struct {
	// Lang is one of Languages.
	Lang string
	// Package is the Go package name; empty means the kind's name with
	// every character that is not a letter or digit dropped.
	Package string
}

// Generate returns the source declaring m's types in opts.Lang.
func Generate(m *model.KindManifest, opts Options) ([]byte, error) {
	decls, err := declarations(m)
	if err != nil {
		return nil, err
	}
	src := source{kind: m.Kind, version: m.KindVersion, decls: decls}
	switch opts.Lang {
	case "go":
		pkg := opts.Package
		if pkg == "" {
			pkg = DefaultPackage(m.Kind)
		}
		if !validGoPackage(pkg) {
			return nil, fmt.Errorf("package name %q is not a Go identifier", pkg)
		}
		return src.golang(pkg)
	case "typescript":
		return src.typescript(), nil
	case "python":
		return src.python(), nil
	}
	return nil, fmt.Errorf("unknown language %q: want one of %s", opts.Lang, strings.Join(Languages, ", "))
}

// DefaultPackage is the Go package name Generate uses for a kind: its
// letters and digits, lower case, prefixed with "kind" if that leaves
// nothing or starts with a digit.
func DefaultPackage(kind string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(kind) {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		}
	}
	p := b.String()
	if p == "" || unicode.IsDigit(rune(p[0])) {
		p = "kind" + p
	}
	return p
}

func validGoPackage(p string) bool {
	if p == "" || p == "_" {
		return false
	}
	for i, r := range p {
		if r != '_' && !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return !goKeywords[p]
}

// declarations walks every schema m carries.
func declarations(m *model.KindManifest) ([]*decl, error) {
	w := newWalker()
	axes := []struct {
		name, field, doc string
		raw              json.RawMessage
	}{
		{"Spec", "spec_schema", "Spec is the desired state of a resource of kind " + m.Kind + " (spec_schema).", m.SpecSchema},
		{"Status", "status_schema", "Status is what a reaction of kind " + m.Kind + " reports as the resource's status (status_schema).", m.StatusSchema},
		{"Config", "config_schema", "Config is a provider config of kind " + m.Kind + ", the effective config a task carries (config_schema).", m.ConfigSchema},
	}
	for _, a := range axes {
		s, err := compile(a.raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.field, err)
		}
		w.root(a.name, strings.ToLower(a.name), a.doc, s)
	}
	for i, r := range m.Reactions {
		if r.Trigger != webhooksdk.TriggerOperation {
			continue
		}
		s, err := compile(r.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("reactions[%d].input_schema: %w", i, err)
		}
		name := pascal(r.Verb) + "Input"
		doc := fmt.Sprintf("%s is the input of the %q verb (reaction %q's input_schema).", name, r.Verb, r.Name)
		if s == nil {
			doc = fmt.Sprintf("%s is the input of the %q verb (reaction %q).", name, r.Verb, r.Name)
		}
		w.root(name, r.Verb+" input", doc, s)
	}
	return w.decls, nil
}

// source is the language-neutral content of one output file.
type source struct {
	kind    string
	version int
	decls   []*decl
}

func (s *source) header(comment string) string {
	return fmt.Sprintf("%s Code generated by conctl gen-types from kind %s version %d; DO NOT EDIT.\n", comment, s.kind, s.version)
}

// initialisms are written in capitals inside Go names.
var initialisms = map[string]bool{
	"acl": true, "api": true, "arn": true, "cidr": true, "cpu": true, "dns": true, "http": true,
	"https": true, "id": true, "ip": true, "json": true, "tls": true, "ttl": true, "uri": true,
	"url": true, "uuid": true, "vpc": true,
}

// pascal makes a name of s: its words (split on anything not a letter or
// digit, and at lower-to-upper changes) capitalised and joined.
func pascal(s string) string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = nil
		}
	}
	prev := rune(0)
	for _, r := range s {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r), r > unicode.MaxASCII:
			flush()
		case unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
		prev = r
	}
	flush()
	var b strings.Builder
	for _, w := range words {
		lw := strings.ToLower(w)
		if initialisms[lw] {
			b.WriteString(strings.ToUpper(lw))
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	n := b.String()
	if n == "" || unicode.IsDigit(rune(n[0])) {
		n = "X" + n
	}
	return n
}

// comment renders doc as lines of prefix-led comments, or nothing.
func comment(b *strings.Builder, indent, prefix, doc string) {
	if doc == "" {
		return
	}
	for _, l := range strings.Split(doc, "\n") {
		fmt.Fprintf(b, "%s%s%s\n", indent, prefix, strings.TrimRightFunc(" "+l, unicode.IsSpace))
	}
}

// literal is v as JSON text.
func literal(v any) string {
	out, err := json.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(out)
}
