package gentypes

import (
	"fmt"
	"regexp"
	"strings"
)

var tsIdent = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// typescript renders TypeScript: an interface per object, a type alias per
// enum (a union of literals) and per alias. Names carry the kind as prefix
// (VpcSpec), so several kinds' files can be imported side by side.
func (s *source) typescript() []byte {
	prefix := pascal(s.kind)
	var b strings.Builder
	b.WriteString(s.header("//"))
	for _, d := range s.decls {
		b.WriteString("\n")
		comment(&b, "", "//", d.comment(prefix+d.name))
		switch d.kind {
		case declObject:
			fmt.Fprintf(&b, "export interface %s%s {\n", prefix, d.name)
			for _, f := range d.fields {
				comment(&b, "  ", "//", f.doc)
				name := f.json
				if !tsIdent.MatchString(name) {
					name = literal(name)
				}
				opt := "?"
				if f.required {
					opt = ""
				}
				fmt.Fprintf(&b, "  %s%s: %s;\n", name, opt, tsExpr(prefix, f.typ))
			}
			if d.extra != nil {
				b.WriteString("  [key: string]: unknown;\n")
			}
			b.WriteString("}\n")
		case declEnum:
			vals := make([]string, len(d.values))
			for i, v := range d.values {
				vals[i] = literal(v)
			}
			fmt.Fprintf(&b, "export type %s%s = %s;\n", prefix, d.name, strings.Join(vals, " | "))
		case declAlias:
			fmt.Fprintf(&b, "export type %s%s = %s;\n", prefix, d.name, tsExpr(prefix, d.alias))
		}
	}
	return []byte(b.String())
}

func tsExpr(prefix string, t *typ) string {
	var e string
	switch t.shape {
	case shapeString:
		e = "string"
	case shapeInt, shapeNumber:
		e = "number"
	case shapeBool:
		e = "boolean"
	case shapeNull:
		return "null"
	case shapeNever:
		return "never"
	case shapeArray:
		e = tsElem(prefix, t.elem) + "[]"
	case shapeMap:
		e = "Record<string, " + tsExpr(prefix, t.elem) + ">"
	case shapeNamed:
		e = prefix + t.decl.name
	case shapeUnion:
		ms := make([]string, len(t.members))
		for i, m := range t.members {
			ms[i] = tsExpr(prefix, m)
		}
		e = strings.Join(ms, " | ")
	default:
		return "unknown"
	}
	if t.nullable {
		return e + " | null"
	}
	return e
}

// tsElem is an array element's type, parenthesised when it is a union.
func tsElem(prefix string, t *typ) string {
	e := tsExpr(prefix, t)
	if strings.Contains(e, " | ") {
		return "(" + e + ")"
	}
	return e
}
