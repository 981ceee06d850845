package gentypes

import (
	"fmt"
	"go/format"
	"strconv"
	"strings"
)

var goKeywords = map[string]bool{
	"break": true, "case": true, "chan": true, "const": true, "continue": true, "default": true,
	"defer": true, "else": true, "fallthrough": true, "for": true, "func": true, "go": true,
	"goto": true, "if": true, "import": true, "interface": true, "map": true, "package": true,
	"range": true, "return": true, "select": true, "struct": true, "switch": true, "type": true, "var": true,
}

// golang renders Go: a struct per object, a named type with constants per
// enum, a type definition per alias; gofmt'ed.
func (s *source) golang(pkg string) ([]byte, error) {
	var body strings.Builder
	g := goGen{}
	for _, d := range s.decls {
		body.WriteString("\n")
		comment(&body, "", "//", d.comment(d.name))
		switch d.kind {
		case declObject:
			fmt.Fprintf(&body, "type %s struct {\n", d.name)
			used := map[string]bool{}
			for _, f := range d.fields {
				name := pascal(f.json)
				for n := 2; used[name]; n++ {
					name = pascal(f.json) + strconv.Itoa(n)
				}
				used[name] = true
				doc := f.doc
				if f.typ.shape == shapeUnion {
					doc = strings.TrimSpace(doc + "\n\nOne of: " + g.alternatives(f.typ) + " (oneOf/anyOf: decode it once its shape is known).")
				}
				comment(&body, "\t", "//", doc)
				t := g.expr(f.typ)
				tag := f.json
				if !f.required {
					if pointerWhenOptional(f.typ) {
						t = "*" + t
					}
					tag += ",omitempty"
				} else if f.typ.shape == shapeNamed && f.typ.decl.recursive && f.typ.decl.kind == declObject {
					t = "*" + t
				}
				fmt.Fprintf(&body, "\t%s %s `json:%s`\n", name, t, strconv.Quote(tag))
			}
			body.WriteString("}\n")
		case declEnum:
			base := g.expr(&typ{shape: d.base})
			fmt.Fprintf(&body, "type %s %s\n", d.name, base)
			if d.base == shapeAny {
				break
			}
			fmt.Fprintf(&body, "\n// The values of %s.\nconst (\n", d.name)
			used := map[string]bool{}
			for _, v := range d.values {
				name := d.name + strings.TrimPrefix(pascal("x-"+fmt.Sprint(v)), "X")
				for n := 2; used[name]; n++ {
					name = d.name + strings.TrimPrefix(pascal("x-"+fmt.Sprint(v)), "X") + strconv.Itoa(n)
				}
				used[name] = true
				fmt.Fprintf(&body, "\t%s %s = %s\n", name, d.name, literal(v))
			}
			body.WriteString(")\n")
		case declAlias:
			fmt.Fprintf(&body, "type %s %s\n", d.name, g.expr(d.alias))
		}
	}
	var out strings.Builder
	out.WriteString(s.header("//"))
	fmt.Fprintf(&out, "\n// Package %s holds the types of kind %s version %d.\npackage %s\n", pkg, s.kind, s.version, pkg)
	if g.json {
		out.WriteString("\nimport \"encoding/json\"\n")
	}
	out.WriteString(body.String())
	src, err := format.Source([]byte(out.String()))
	if err != nil {
		return nil, fmt.Errorf("gofmt the generated code: %w", err)
	}
	return src, nil
}

// pointerWhenOptional says an optional field of type t is held by pointer,
// so that an absent value and a zero value differ.
func pointerWhenOptional(t *typ) bool {
	switch t.shape {
	case shapeString, shapeInt, shapeNumber, shapeBool:
		return !t.nullable
	case shapeNamed:
		return t.decl.kind == declObject || (t.decl.kind == declEnum && t.decl.base != shapeAny)
	}
	return false
}

// goGen renders Go type expressions and notes the imports they need.
type goGen struct{ json bool }

func (g *goGen) expr(t *typ) string {
	var e string
	switch t.shape {
	case shapeString:
		e = "string"
	case shapeInt:
		e = "int64"
	case shapeNumber:
		e = "float64"
	case shapeBool:
		e = "bool"
	case shapeArray:
		return "[]" + g.expr(t.elem)
	case shapeMap:
		return "map[string]" + g.expr(t.elem)
	case shapeNamed:
		e = t.decl.name
	case shapeUnion:
		g.json = true
		return "json.RawMessage"
	default: // shapeAny, shapeNull, shapeNever
		return "any"
	}
	if t.nullable {
		return "*" + e
	}
	return e
}

// alternatives names a union's members in Go.
func (g *goGen) alternatives(t *typ) string {
	names := make([]string, len(t.members))
	for i, m := range t.members {
		names[i] = g.expr(m)
	}
	return strings.Join(names, ", ")
}
