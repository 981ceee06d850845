package gentypes

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/convergeplane/converge/control/schema"
)

// shape is what a schema means to a type system, independent of language.
type shape int

const (
	shapeAny    shape = iota // any JSON value
	shapeString              // string
	shapeInt                 // integer
	shapeNumber              // number
	shapeBool                // boolean
	shapeNull                // only null
	shapeArray               // array of elem
	shapeMap                 // object with string keys and elem values
	shapeNamed               // a declaration: an object, enum or alias
	shapeUnion               // one of members
	shapeNever               // no value (the false schema)
)

// typ is a type expression.
type typ struct {
	shape    shape
	nullable bool   // also null
	elem     *typ   // shapeArray, shapeMap
	decl     *decl  // shapeNamed
	members  []*typ // shapeUnion
}

// declKind is what a declaration declares.
type declKind int

const (
	declObject declKind = iota // a struct / interface / TypedDict
	declEnum                   // a closed set of values of base
	declAlias                  // a name for alias
)

// decl is a named type the output declares.
type decl struct {
	name   string // unprefixed PascalCase, unique in the output
	path   string // where in the manifest: spec.rules[], $defs/subnet
	doc    string
	kind   declKind
	fields []field // declObject, sorted by JSON name
	// extra is the type of the properties an object allows beyond its named
	// ones (additionalProperties with a schema), or nil.
	extra  *typ
	base   shape // declEnum: shapeString, shapeInt, shapeNumber, shapeBool or shapeAny (mixed)
	values []any // declEnum
	alias  *typ  // declAlias
	// recursive says the declaration refers to itself through $ref, so Go
	// must hold it by pointer.
	recursive bool
}

// field is one property of an object declaration.
type field struct {
	json     string
	doc      string
	typ      *typ
	required bool
}

// walker turns compiled schemas into declarations, in an order where each
// declaration follows the ones it uses (except through a $ref cycle).
type walker struct {
	decls []*decl
	names map[string]bool
	// named maps a $ref target (a $defs entry, or a schema referred to from
	// elsewhere) to its declaration, so it is declared once.
	named map[*jsonschema.Schema]*decl
	// filling holds the declarations being filled: a $ref to one of them is
	// a cycle.
	filling map[*decl]bool
}

func newWalker() *walker {
	return &walker{names: map[string]bool{}, named: map[*jsonschema.Schema]*decl{}, filling: map[*decl]bool{}}
}

// baseURL names the inline document inside the compiler; nothing is loaded.
const baseURL = "mem:///schema.json"

// refuseLoader loads nothing: schema.Compile has already refused external
// references, so only the embedded metaschema is ever asked for.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: %w", url, schema.ErrExternalRef)
}

// compile checks raw the way the server does (schema.Compile) and returns the
// library's compiled form to walk, or nil for an absent schema.
func compile(raw json.RawMessage) (*jsonschema.Schema, error) {
	s, err := schema.Compile(raw)
	if err != nil || s == nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(baseURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(baseURL)
}

// root declares the type of one axis under name. An absent schema declares
// an open object, the documents an untyped axis accepts in practice.
func (w *walker) root(name, path, doc string, s *jsonschema.Schema) {
	if s == nil {
		d := w.declare(name, doc+"\n\nThe manifest gives no schema: any object.")
		d.path = path
		d.kind, d.alias = declAlias, &typ{shape: shapeMap, elem: &typ{shape: shapeAny}}
		return
	}
	s = follow(s)
	if doc == "" {
		doc = describe(s)
	} else if describe(s) != "" {
		doc += "\n\n" + describe(s)
	}
	t := w.typeOf(name, path, s, true)
	if t.shape == shapeNamed && t.decl.name == name {
		t.decl.doc = doc
		return
	}
	d := w.declare(name, doc)
	d.kind, d.alias, d.path = declAlias, t, path
}

// declare reserves a unique name and appends an empty declaration.
func (w *walker) declare(name, doc string) *decl {
	base, n := name, 2
	for w.names[name] {
		name = fmt.Sprintf("%s%d", base, n)
		n++
	}
	w.names[name] = true
	d := &decl{name: name, doc: doc}
	w.decls = append(w.decls, d)
	return d
}

// follow skips pure $ref wrappers: a schema whose only keyword is $ref.
func follow(s *jsonschema.Schema) *jsonschema.Schema {
	for s.Ref != nil && onlyRef(s) {
		s = s.Ref
	}
	return s
}

func onlyRef(s *jsonschema.Schema) bool {
	return s.Types == nil && s.Properties == nil && s.Enum == nil && s.Const == nil &&
		s.AllOf == nil && s.AnyOf == nil && s.OneOf == nil && s.Items2020 == nil && s.AdditionalProperties == nil
}

// defName is the $defs (or definitions) entry s is, if any.
func defName(s *jsonschema.Schema) (string, bool) {
	_, frag, ok := strings.Cut(s.Location, "#")
	if !ok {
		return "", false
	}
	parts := strings.Split(frag, "/")
	if len(parts) == 3 && (parts[1] == "$defs" || parts[1] == "definitions") {
		return strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[2]), true
	}
	return "", false
}

func describe(s *jsonschema.Schema) string {
	switch {
	case s.Title != "" && s.Description != "":
		return s.Title + ": " + s.Description
	case s.Title != "":
		return s.Title
	}
	return s.Description
}

// typeOf returns the type of s; name is what a declaration made for s is
// called. top says s is an axis root, which is always declared under name.
func (w *walker) typeOf(name, path string, s *jsonschema.Schema, top bool) *typ {
	if s.Ref != nil && onlyRef(s) {
		target := follow(s)
		if d, ok := w.named[target]; ok {
			if w.filling[d] {
				d.recursive = true
			}
			return &typ{shape: shapeNamed, decl: d}
		}
		if n, ok := defName(target); ok {
			return w.namedType(pascal(n), "$defs/"+n, target, true)
		}
		return w.namedType(name, path, target, false)
	}
	if top {
		return w.namedType(name, path, s, false)
	}
	return w.anon(name, path, s)
}

// namedType declares s under name (registering it so every $ref to it shares
// the declaration) when s needs a declaration or always is set (a $defs
// entry), and returns its type.
func (w *walker) namedType(name, path string, s *jsonschema.Schema, always bool) *typ {
	if !needsDecl(s) && !always {
		return w.anon(name, path, s)
	}
	d := w.declare(name, describe(s))
	d.path = path
	w.named[s] = d
	// Move the declaration after the ones it uses.
	w.decls = w.decls[:len(w.decls)-1]
	w.filling[d] = true
	if needsDecl(s) {
		w.fill(d, path, s)
	} else {
		d.kind, d.alias = declAlias, w.anon(name, path, s)
	}
	delete(w.filling, d)
	w.decls = append(w.decls, d)
	return &typ{shape: shapeNamed, decl: d}
}

// needsDecl says s becomes a declaration: an object with properties, or an
// enum.
func needsDecl(s *jsonschema.Schema) bool {
	if s.Bool != nil {
		return false
	}
	if s.Enum != nil || s.Const != nil {
		return true
	}
	if len(s.Properties) > 0 {
		return true
	}
	return len(s.AllOf) > 0 && allObjects(s.AllOf)
}

func allObjects(ss []*jsonschema.Schema) bool {
	for _, m := range ss {
		m = follow(m)
		if len(m.Properties) == 0 && !types(m).has("object") {
			return false
		}
	}
	return true
}

// anon is the type of s, declaring nested objects and enums under name.
func (w *walker) anon(name, path string, s *jsonschema.Schema) *typ {
	if s.Ref != nil && onlyRef(s) {
		return w.typeOf(name, path, s, false)
	}
	if s.Bool != nil {
		if *s.Bool {
			return &typ{shape: shapeAny}
		}
		return &typ{shape: shapeNever}
	}
	if needsDecl(s) {
		return w.namedType(name, path, s, false)
	}
	if alts := alternatives(s); len(alts) > 0 {
		return w.union(name, path, alts, types(s).has("null"))
	}
	ts := types(s)
	nullable := ts.has("null")
	ts = ts.without("null")
	var t *typ
	switch {
	case len(ts) == 0 && nullable:
		t = &typ{shape: shapeNull}
	case len(ts) > 1:
		// Several types: a union of each alone.
		var members []*typ
		for _, one := range ts {
			c := *s
			c.Types = new(jsonschema.Types)
			c.Types.Add(one)
			members = append(members, w.anon(name+pascal(one), path, &c))
		}
		t = &typ{shape: shapeUnion, members: members}
	case len(ts) == 0:
		t = &typ{shape: shapeAny}
	case ts[0] == "string":
		t = &typ{shape: shapeString}
	case ts[0] == "integer":
		t = &typ{shape: shapeInt}
	case ts[0] == "number":
		t = &typ{shape: shapeNumber}
	case ts[0] == "boolean":
		t = &typ{shape: shapeBool}
	case ts[0] == "array":
		elem := &typ{shape: shapeAny}
		if s.Items2020 != nil {
			elem = w.anon(name+"Item", path+"[]", s.Items2020)
		}
		t = &typ{shape: shapeArray, elem: elem}
	case ts[0] == "object":
		t = &typ{shape: shapeMap, elem: w.extra(name+"Value", path+"{}", s)}
	}
	if nullable && t.shape != shapeNull {
		t.nullable = true
	}
	return t
}

// extra is the type of an object's additional properties: its
// additionalProperties schema, or any value when it has none.
func (w *walker) extra(name, path string, s *jsonschema.Schema) *typ {
	if a, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		return w.anon(name, path, a)
	}
	return &typ{shape: shapeAny}
}

// alternatives are a schema's oneOf or anyOf members.
func alternatives(s *jsonschema.Schema) []*jsonschema.Schema {
	if len(s.OneOf) > 0 {
		return s.OneOf
	}
	return s.AnyOf
}

// union is the type of oneOf/anyOf members: a member that is only null makes
// the rest nullable, one member left is that member.
func (w *walker) union(name, path string, alts []*jsonschema.Schema, nullable bool) *typ {
	var members []*typ
	for i, m := range alts {
		t := w.anon(fmt.Sprintf("%sOption%d", name, i+1), fmt.Sprintf("%s (option %d)", path, i+1), m)
		if t.shape == shapeNull {
			nullable = true
			continue
		}
		members = append(members, t)
	}
	var t *typ
	switch len(members) {
	case 0:
		t = &typ{shape: shapeNull}
	case 1:
		c := *members[0]
		t = &c
	default:
		t = &typ{shape: shapeUnion, members: members}
	}
	if nullable && t.shape != shapeNull {
		t.nullable = true
	}
	return t
}

// fill makes d the declaration of s: an enum, or an object of its
// properties (and those of every allOf member).
func (w *walker) fill(d *decl, path string, s *jsonschema.Schema) {
	if s.Enum != nil || s.Const != nil {
		d.kind = declEnum
		if s.Const != nil {
			d.values = []any{*s.Const}
		} else {
			d.values = slices.Clone(s.Enum.Values)
		}
		d.base = enumBase(d.values)
		return
	}
	d.kind = declObject
	required := map[string]bool{}
	props := map[string]*jsonschema.Schema{}
	parts := append([]*jsonschema.Schema{s}, s.AllOf...)
	for _, p := range parts {
		p = follow(p)
		for _, r := range p.Required {
			required[r] = true
		}
		for k, v := range p.Properties {
			if _, ok := props[k]; !ok {
				props[k] = v
			}
		}
		if a, ok := p.AdditionalProperties.(*jsonschema.Schema); ok && d.extra == nil {
			d.extra = w.anon(d.name+"Extra", path+"{}", a)
		}
	}
	for _, k := range slices.Sorted(mapKeys(props)) {
		p := props[k]
		d.fields = append(d.fields, field{
			json:     k,
			doc:      cmp.Or(describe(p), describe(follow(p))),
			typ:      w.anon(d.name+pascal(k), path+"."+k, p),
			required: required[k],
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// enumBase is the JSON type every value shares, or shapeAny.
func enumBase(values []any) shape {
	base := shapeAny
	for i, v := range values {
		var s shape
		switch v := v.(type) {
		case string:
			s = shapeString
		case bool:
			s = shapeBool
		case json.Number:
			s = shapeNumber
			if _, err := v.Int64(); err == nil {
				s = shapeInt
			}
		default:
			return shapeAny
		}
		if i == 0 {
			base = s
		} else if s != base {
			if (s == shapeInt || s == shapeNumber) && (base == shapeInt || base == shapeNumber) {
				base = shapeNumber
				continue
			}
			return shapeAny
		}
	}
	return base
}

// typeSet is a schema's "type" keyword, or the type its other keywords
// imply when it has none.
type typeSet []string

func types(s *jsonschema.Schema) typeSet {
	if s.Types != nil && !s.Types.IsEmpty() {
		return s.Types.ToStrings()
	}
	switch {
	case len(s.Properties) > 0 || s.AdditionalProperties != nil:
		return typeSet{"object"}
	case s.Items2020 != nil:
		return typeSet{"array"}
	}
	return nil
}

func (t typeSet) has(name string) bool { return slices.Contains(t, name) }

func (t typeSet) without(name string) typeSet {
	return slices.DeleteFunc(slices.Clone(t), func(s string) bool { return s == name })
}

// comment is the declaration's doc comment, led by its name as Go wants.
func (d *decl) comment(name string) string {
	doc := d.doc
	if d.kind == declObject && d.extra != nil {
		doc = strings.TrimSpace(doc + "\n\nIts other properties (additionalProperties) are typed only in TypeScript.")
	}
	switch {
	case strings.HasPrefix(doc, d.name+" "):
		return name + strings.TrimPrefix(doc, d.name)
	case doc == "":
		return name + " is " + d.path + "."
	}
	return name + " is " + d.path + ": " + doc
}
