package gentypes

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var pyKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// python renders Python 3.11 with typing only: a TypedDict per object (the
// functional form when a property name is not an identifier), a Literal per
// enum, a TypeAlias per alias. Names carry the kind as prefix, as in
// TypeScript.
func (s *source) python() []byte {
	p := pyGen{prefix: pascal(s.kind), used: map[string]bool{}}
	var b strings.Builder
	for _, d := range s.decls {
		b.WriteString("\n\n")
		name := p.prefix + d.name
		comment(&b, "", "#", d.comment(name))
		switch d.kind {
		case declObject:
			p.used["TypedDict"] = true
			functional := slices.ContainsFunc(d.fields, func(f field) bool {
				return !pyIdent.MatchString(f.json) || pyKeywords[f.json]
			})
			if functional {
				fmt.Fprintf(&b, "%s = TypedDict(\n    %q,\n    {\n", name, name)
				for _, f := range d.fields {
					comment(&b, "        ", "#", f.doc)
					fmt.Fprintf(&b, "        %s: %s,\n", literal(f.json), p.field(f))
				}
				b.WriteString("    },\n)\n")
				continue
			}
			fmt.Fprintf(&b, "class %s(TypedDict):\n", name)
			for _, f := range d.fields {
				comment(&b, "    ", "#", f.doc)
				fmt.Fprintf(&b, "    %s: %s\n", f.json, p.field(f))
			}
			if len(d.fields) == 0 {
				b.WriteString("    pass\n")
			}
		case declEnum:
			p.used["TypeAlias"] = true
			if !pyLiterals(d.values) {
				fmt.Fprintf(&b, "%s: TypeAlias = %s\n", name, p.expr(&typ{shape: d.base}))
				continue
			}
			p.used["Literal"] = true
			vals := make([]string, len(d.values))
			for i, v := range d.values {
				vals[i] = pyLiteral(v)
			}
			fmt.Fprintf(&b, "%s: TypeAlias = Literal[%s]\n", name, strings.Join(vals, ", "))
		case declAlias:
			p.used["TypeAlias"] = true
			fmt.Fprintf(&b, "%s: TypeAlias = %s\n", name, p.expr(d.alias))
		}
	}
	var out strings.Builder
	out.WriteString(s.header("#"))
	out.WriteString("\nfrom __future__ import annotations\n\n")
	var names []string
	for n := range p.used {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(&out, "from typing import %s\n", strings.Join(names, ", "))
	out.WriteString(b.String())
	return []byte(out.String())
}

// pyLiterals says every value may stand in a typing.Literal: strings,
// integers, booleans and None, not floats.
func pyLiterals(values []any) bool {
	for _, v := range values {
		switch v := v.(type) {
		case string, bool, nil:
		case json.Number:
			if _, err := v.Int64(); err != nil {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func pyLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	}
	return literal(v)
}

// pyGen renders Python type expressions and notes the typing names used.
type pyGen struct {
	prefix string
	used   map[string]bool
}

func (p *pyGen) field(f field) string {
	t := p.expr(f.typ)
	if f.required {
		return t
	}
	p.used["NotRequired"] = true
	return "NotRequired[" + t + "]"
}

func (p *pyGen) expr(t *typ) string {
	var e string
	switch t.shape {
	case shapeString:
		e = "str"
	case shapeInt:
		e = "int"
	case shapeNumber:
		e = "float"
	case shapeBool:
		e = "bool"
	case shapeNull:
		return "None"
	case shapeNever:
		p.used["Never"] = true
		return "Never"
	case shapeArray:
		e = "list[" + p.expr(t.elem) + "]"
	case shapeMap:
		e = "dict[str, " + p.expr(t.elem) + "]"
	case shapeNamed:
		e = p.prefix + t.decl.name
	case shapeUnion:
		ms := make([]string, len(t.members))
		for i, m := range t.members {
			ms[i] = p.expr(m)
		}
		e = strings.Join(ms, " | ")
	default:
		p.used["Any"] = true
		return "Any"
	}
	if t.nullable {
		return e + " | None"
	}
	return e
}
