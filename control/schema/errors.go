package schema

import (
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the library's own messages for error kinds we do not
// reword. It is only read, so sharing it is safe.
var printer = message.NewPrinter(language.English)

// Violation is one reason a document failed validation.
type Violation struct {
	// Pointer is an RFC 6901 JSON pointer to the offending value in the
	// document; "" is the whole document. For a missing required property it
	// points at the object that lacks it; for a property that is not allowed
	// it points at that property.
	Pointer string
	// Keyword is the schema keyword that failed, such as "required", "type"
	// or "maximum"; "false" for a false schema.
	Keyword string
	// Message says what is wrong without the pointer or keyword.
	Message string
}

// ValidationError lists every leaf cause of a failed validation, sorted by
// pointer so that responses are stable (the library's order is not).
type ValidationError struct {
	Violations []Violation
}

// Error joins the violations as "pointer: keyword: message", with the root
// shown as "(root)", e.g. "/replicas: maximum: must be <= 10".
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, v := range e.Violations {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(displayPointer(v.Pointer))
		b.WriteString(": ")
		b.WriteString(v.Keyword)
		b.WriteString(": ")
		b.WriteString(v.Message)
	}
	return b.String()
}

func displayPointer(p string) string {
	if p == "" {
		return "(root)"
	}
	return p
}

// newValidationError flattens the library's error tree. doc is the decoded
// instance, used to repair propertyNames pointers; it may be nil.
func newValidationError(verr *jsonschema.ValidationError, doc any) *ValidationError {
	var fl flattener
	fl.walk(verr)
	fl.fixPropertyNames(doc)
	out := make([]Violation, 0, len(fl.leaves))
	for _, l := range fl.leaves {
		out = append(out, l.Violation)
	}
	slices.SortFunc(out, cmpViolation)
	out = slices.Compact(out)
	return &ValidationError{Violations: out}
}

func cmpViolation(a, b Violation) int {
	if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
		return c
	}
	if c := strings.Compare(a.Keyword, b.Keyword); c != 0 {
		return c
	}
	return strings.Compare(a.Message, b.Message)
}

type leaf struct {
	Violation
	// set for propertyNames leaves, whose pointer the library may corrupt.
	propName  string
	schemaURL string
	// set for type leaves, so that alternatives can be merged.
	want []string
	got  string
}

type flattener struct {
	leaves []leaf
}

func (f *flattener) walk(e *jsonschema.ValidationError) {
	if k, ok := e.ErrorKind.(*kind.PropertyNames); ok {
		// The causes describe the name, validated as a string at "", so they
		// become part of this leaf's message instead of leaves of their own.
		var sub flattener
		for _, c := range e.Causes {
			sub.walk(c)
		}
		msg := "invalid property name " + quote(k.Property)
		for i, l := range sub.leaves {
			sep := ", "
			if i == 0 {
				sep = ": "
			}
			msg += sep + l.Keyword + ": " + l.Message
		}
		f.leaves = append(f.leaves, leaf{
			Violation: Violation{Pointer: pointer(e.InstanceLocation), Keyword: "propertyNames", Message: msg},
			propName:  k.Property,
			schemaURL: e.SchemaURL,
		})
		return
	}
	if len(e.Causes) == 0 {
		f.add(e)
		return
	}
	start := len(f.leaves)
	for _, c := range e.Causes {
		f.walk(c)
	}
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		f.mergeTypes(start)
	}
}

// mergeTypes folds the type errors of anyOf/oneOf alternatives at one pointer
// into a single "must be a or b" leaf, which reads better than one leaf per
// alternative. Only alternatives are merged: under allOf both must hold.
func (f *flattener) mergeTypes(start int) {
	first := map[string]int{}
	kept := f.leaves[:start]
	for _, l := range f.leaves[start:] {
		if l.Keyword != "type" || l.want == nil {
			kept = append(kept, l)
			continue
		}
		i, ok := first[l.Pointer]
		if !ok {
			first[l.Pointer] = len(kept)
			kept = append(kept, l)
			continue
		}
		m := &kept[i]
		for _, w := range l.want {
			if !slices.Contains(m.want, w) {
				m.want = append(m.want, w)
			}
		}
		m.Message = typeMessage(m.want, m.got)
	}
	f.leaves = kept
}

func typeMessage(want []string, got string) string {
	return "must be " + strings.Join(want, " or ") + ", got " + got
}

func (f *flattener) add(e *jsonschema.ValidationError) {
	ptr := pointer(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		f.leaves = append(f.leaves, leaf{
			Violation: Violation{Pointer: ptr, Keyword: "type", Message: typeMessage(k.Want, k.Got)},
			want:      slices.Clone(k.Want),
			got:       k.Got,
		})
	case *kind.Required:
		for _, m := range k.Missing {
			f.leaves = append(f.leaves, leaf{Violation: Violation{
				Pointer: ptr, Keyword: "required", Message: "missing required property " + quote(m),
			}})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			f.leaves = append(f.leaves, leaf{Violation: Violation{
				Pointer: pointer(append(slices.Clone(e.InstanceLocation), p)), Keyword: "additionalProperties", Message: "property is not allowed",
			}})
		}
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			f.leaves = append(f.leaves, leaf{Violation: Violation{
				Pointer: ptr, Keyword: "dependentRequired", Message: fmt.Sprintf("missing property %s, required when %s is present", quote(m), quote(k.Prop)),
			}})
		}
	default:
		kw, msg := describe(e.ErrorKind)
		f.leaves = append(f.leaves, leaf{Violation: Violation{Pointer: ptr, Keyword: kw, Message: msg}})
	}
}

// describe returns the keyword and message of a leaf error kind. Numbers are
// printed plainly: the library's printer adds thousands separators.
func describe(ek jsonschema.ErrorKind) (kw, msg string) {
	switch k := ek.(type) {
	case *kind.Maximum:
		return "maximum", "must be <= " + rat(k.Want)
	case *kind.Minimum:
		return "minimum", "must be >= " + rat(k.Want)
	case *kind.ExclusiveMaximum:
		return "exclusiveMaximum", "must be < " + rat(k.Want)
	case *kind.ExclusiveMinimum:
		return "exclusiveMinimum", "must be > " + rat(k.Want)
	case *kind.MultipleOf:
		return "multipleOf", "must be a multiple of " + rat(k.Want)
	case *kind.MaxLength:
		return "maxLength", fmt.Sprintf("must be at most %s long, got %d", plural(k.Want, "character"), k.Got)
	case *kind.MinLength:
		return "minLength", fmt.Sprintf("must be at least %s long, got %d", plural(k.Want, "character"), k.Got)
	case *kind.MaxItems:
		return "maxItems", fmt.Sprintf("must have at most %s, got %d", plural(k.Want, "item"), k.Got)
	case *kind.MinItems:
		return "minItems", fmt.Sprintf("must have at least %s, got %d", plural(k.Want, "item"), k.Got)
	case *kind.MaxProperties:
		return "maxProperties", fmt.Sprintf("must have at most %s, got %d", plural(k.Want, "property"), k.Got)
	case *kind.MinProperties:
		return "minProperties", fmt.Sprintf("must have at least %s, got %d", plural(k.Want, "property"), k.Got)
	case *kind.MaxContains:
		return "maxContains", fmt.Sprintf("at most %s may match contains, got %d", plural(k.Want, "item"), len(k.Got))
	case *kind.MinContains:
		return "minContains", fmt.Sprintf("at least %s must match contains, got %d", plural(k.Want, "item"), len(k.Got))
	case *kind.UniqueItems:
		return "uniqueItems", fmt.Sprintf("items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "false", "no value is allowed here"
	case *kind.Not:
		return "not", "must not match the schema in not"
	case *kind.RefCycle:
		return "$ref", ek.LocalizedString(printer)
	case *kind.InvalidJsonValue:
		return "type", ek.LocalizedString(printer)
	}
	kw = "schema"
	if p := ek.KeywordPath(); len(p) > 0 {
		kw = p[0]
	}
	msg = ek.LocalizedString(printer)
	// Several library messages repeat the keyword ("minimum: got ...").
	return kw, strings.TrimPrefix(msg, kw+": ")
}

func rat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return strconv.Itoa(n) + " " + strings.TrimSuffix(noun, "y") + "ies"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func quote(s string) string {
	return strconv.Quote(s)
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

func escapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

// fixPropertyNames repairs the pointers of propertyNames errors.
//
// jsonschema v6.0.3 stores the validator's location slice without copying it
// (upstream issue #258), so sibling validation that runs later overwrites it
// and the error may name another property ("/image" for "/labels"). The
// length survives; the tokens may not. We rebuild the pointer from the
// document: the objects that hold the offending name at a path that fits the
// propertyNames keyword's own location in the schema.
func (f *flattener) fixPropertyNames(doc any) {
	if doc == nil {
		return
	}
	type group struct {
		idx   []int
		cands []string
	}
	groups := map[[2]string]*group{}
	var order [][2]string
	for i, l := range f.leaves {
		if l.Keyword != "propertyNames" || l.schemaURL == "" {
			continue
		}
		key := [2]string{l.schemaURL, l.propName}
		g, ok := groups[key]
		if !ok {
			depth := strings.Count(l.Pointer, "/")
			g = &group{cands: findObjects(doc, l.propName, depth, schemaPath(l.schemaURL))}
			groups[key] = g
			order = append(order, key)
		}
		g.idx = append(g.idx, i)
	}
	for _, key := range order {
		g := groups[key]
		switch {
		case len(g.cands) == len(g.idx):
			for j, i := range g.idx {
				f.leaves[i].Pointer = g.cands[j]
			}
		case len(g.cands) > 0:
			for _, i := range g.idx {
				if !slices.Contains(g.cands, f.leaves[i].Pointer) {
					f.leaves[i].Pointer = g.cands[0]
				}
			}
		}
	}
}

// step matches one token of an instance path: a literal, or any token.
type step struct {
	any bool
	tok string
}

// schemaPath derives the instance path a propertyNames keyword applies to from
// its location in the schema, such as "#/properties/spec/properties/labels/
// propertyNames" -> [spec labels]. It returns nil when the location passes
// through a keyword whose instance path it cannot follow ($defs, allOf...);
// the caller then only matches on depth.
func schemaPath(schemaURL string) []step {
	_, frag, ok := strings.Cut(schemaURL, "#")
	if !ok {
		return nil
	}
	var toks []string
	for _, t := range strings.Split(frag, "/")[1:] {
		t, err := url.PathUnescape(t)
		if err != nil {
			return nil
		}
		toks = append(toks, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
	}
	if len(toks) == 0 || toks[len(toks)-1] != "propertyNames" {
		return nil
	}
	toks = toks[:len(toks)-1]
	var out []step
	for i := 0; i < len(toks); i++ {
		switch toks[i] {
		case "properties", "prefixItems":
			if i+1 >= len(toks) {
				return nil
			}
			out = append(out, step{tok: toks[i+1]})
			i++
		case "patternProperties":
			if i+1 >= len(toks) {
				return nil
			}
			out = append(out, step{any: true})
			i++
		case "items", "additionalProperties":
			out = append(out, step{any: true})
		default:
			return nil
		}
	}
	if out == nil {
		out = []step{}
	}
	return out
}

// findObjects returns, sorted, the pointers of objects at the given depth that
// have the property name and, when path is not nil, fit path.
func findObjects(doc any, name string, depth int, path []step) []string {
	var out []string
	var walk func(v any, toks []string)
	walk = func(v any, toks []string) {
		if len(toks) == depth {
			if obj, ok := v.(map[string]any); ok {
				if _, ok := obj[name]; ok {
					out = append(out, pointer(toks))
				}
			}
			return
		}
		var want *step
		if path != nil {
			if len(toks) >= len(path) {
				return
			}
			want = &path[len(toks)]
		}
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if want == nil || want.any || want.tok == k {
					walk(c, append(slices.Clone(toks), k))
				}
			}
		case []any:
			for i, c := range v {
				k := strconv.Itoa(i)
				if want == nil || want.any || want.tok == k {
					walk(c, append(slices.Clone(toks), k))
				}
			}
		}
	}
	if path != nil && len(path) != depth {
		path = nil
	}
	walk(doc, nil)
	slices.Sort(out)
	return out
}
