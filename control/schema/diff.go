package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Change is one semantic difference between two versions of a schema.
type Change struct {
	// Path locates the change in the schema as dotted keywords and property
	// names, such as "properties.spec.properties.region"; "" is the root.
	// Names that are not plain identifiers are quoted: properties["a.b"].
	Path string
	// Message says what changed, such as "newly required".
	Message string
}

// String renders the change as "path: message", with the root as "(root)".
func (c Change) String() string {
	if c.Path == "" {
		return "(root): " + c.Message
	}
	return c.Path + ": " + c.Message
}

// Changes is the verdict of Diff on an edit of a published schema.
type Changes struct {
	// Identical is true when the documents are equal as JSON, ignoring key
	// order, whitespace and number spelling; the edit is a no-op.
	Identical bool
	// Breaking lists the changes that may make a document that satisfied the
	// old schema fail the new one. Any entry means the edit must be published
	// as a new kind_version.
	Breaking []Change
	// Additive lists the changes that only widen what is accepted. Changes to
	// annotations (description, title, default...) are listed in neither.
	Additive []Change
}

// Err returns a *BreakingError when there are breaking changes, else nil.
func (c Changes) Err() error {
	if len(c.Breaking) == 0 {
		return nil
	}
	return &BreakingError{Changes: c.Breaking}
}

// BreakingError rejects an in-place edit of a published schema. Changes lists
// why; the API can return them as field errors.
type BreakingError struct {
	Changes []Change
}

// Error tells the operator to publish a new kind_version and lists why.
func (e *BreakingError) Error() string {
	var b strings.Builder
	b.WriteString("schema: breaking change to a published schema; publish it as a new kind_version instead: ")
	for i, c := range e.Changes {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.String())
	}
	return b.String()
}

// Diff compares two versions of a schema document and classifies every
// semantic change as breaking or additive. A nil, empty or null document is
// the untyped schema, which accepts everything.
//
// Diff is sound, not complete: when it reports no breaking change, every
// document valid under old is valid under new. It may call a compatible edit
// breaking when it cannot prove otherwise (any change to allOf, anyOf, oneOf,
// not, if/then/else, $ref, patternProperties, prefixItems and other keywords
// it does not model), but never the reverse. Diff does not compile the
// documents; callers compile new first.
func Diff(old, new json.RawMessage) (Changes, error) {
	return diff(old, new, false)
}

// diff is Diff; strict also refuses a new property on an open object, which
// makes the gate provably sound (the randomised soundness test runs it so).
func diff(old, new json.RawMessage, strict bool) (Changes, error) {
	ov, err := decodeSchema(old)
	if err != nil {
		return Changes{}, fmt.Errorf("schema: decode old schema: %w", err)
	}
	nv, err := decodeSchema(new)
	if err != nil {
		return Changes{}, fmt.Errorf("schema: decode new schema: %w", err)
	}
	if canon(ov) == canon(nv) {
		return Changes{Identical: true}, nil
	}
	d := &differ{
		strict:      strict,
		unevalProps: hasKey(ov, "unevaluatedProperties") || hasKey(nv, "unevaluatedProperties"),
		unevalItems: hasKey(ov, "unevaluatedItems") || hasKey(nv, "unevaluatedItems"),
	}
	d.schema("", orTrue(ov), orTrue(nv))
	if refsInNegation(ov) || refsInNegation(nv) {
		// A $ref inside not, if, oneOf or contains can reach any definition,
		// and there widening one can reject documents (not: {$ref}); so no
		// widening is provably safe.
		for _, c := range d.additive {
			c.Message += "; but the schema uses $ref inside not, if, oneOf or contains, where a wider subschema can reject documents, so this cannot be proven backward compatible"
			d.breaking = append(d.breaking, c)
		}
		d.additive = nil
	}
	sortChanges(d.breaking)
	sortChanges(d.additive)
	return Changes{Breaking: d.breaking, Additive: d.additive}, nil
}

func decodeSchema(raw json.RawMessage) (any, error) {
	if isNull(raw) {
		return nil, nil
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(raw))
}

func orTrue(v any) any {
	if v == nil {
		return true
	}
	return v
}

func sortChanges(cs []Change) {
	slices.SortStableFunc(cs, func(a, b Change) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
}

// annotations never affect validation (format and content* are left out on
// purpose: they become assertions if the compiler is ever configured so).
var annotations = map[string]bool{
	"title": true, "description": true, "examples": true, "default": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

type differ struct {
	// strict refuses a new property on an open object (see newProperty).
	strict bool
	// The document uses unevaluatedProperties/Items somewhere, so removing
	// a keyword that evaluates (additionalProperties, items) can narrow.
	unevalProps, unevalItems bool

	breaking, additive []Change
}

func (d *differ) brk(path, format string, args ...any) {
	d.breaking = append(d.breaking, Change{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (d *differ) add(path, format string, args ...any) {
	d.additive = append(d.additive, Change{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (d *differ) unrecognised(path, kw string) {
	d.brk(path, "unrecognised change to %s; cannot prove it is backward compatible", kw)
}

// schema compares two subschemas at the same place. Absent subschemas are
// passed as true.
func (d *differ) schema(path string, old, new any) {
	if canon(old) == canon(new) {
		return
	}
	if new == false {
		d.brk(path, "now rejects every value")
		return
	}
	if old == false {
		d.add(path, "now accepts values (was false)")
		return
	}
	o, ok1 := asObject(old)
	n, ok2 := asObject(new)
	if !ok1 || !ok2 {
		d.brk(path, "unrecognised change; cannot prove it is backward compatible")
		return
	}
	d.object(path, o, n)
}

// asObject returns a schema object, with true as the empty schema.
func asObject(v any) (map[string]any, bool) {
	if v == true {
		return map[string]any{}, true
	}
	m, ok := v.(map[string]any)
	return m, ok
}

func (d *differ) object(path string, o, n map[string]any) {
	var keys []string
	for k := range o {
		keys = append(keys, k)
	}
	for k := range n {
		if _, ok := o[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		ov, oHas := o[k]
		nv, nHas := n[k]
		if annotations[k] || (oHas && nHas && canon(ov) == canon(nv)) {
			continue
		}
		switch k {
		case "$schema":
			if dialectOf(ov) != dialectOf(nv) {
				d.unrecognised(path, k)
			}
		case "type":
			d.types(path, ov, nv, oHas, nHas)
		case "enum":
			d.enum(path, ov, nv, oHas, nHas)
		case "const":
			switch {
			case !nHas:
				d.add(path, "const removed (was %s)", show(ov))
			case !oHas:
				d.brk(path, "const added: only %s is allowed", show(nv))
			default:
				d.brk(path, "const changed from %s to %s", show(ov), show(nv))
			}
		case "maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains":
			d.bound(path, k, ov, nv, oHas, nHas, +1)
		case "minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties":
			d.bound(path, k, ov, nv, oHas, nHas, -1)
		case "minContains":
			// Absent means 1 when contains is present.
			if !oHas {
				ov = json.Number("1")
			}
			if !nHas {
				nv = json.Number("1")
			}
			d.bound(path, k, ov, nv, true, true, -1)
		case "multipleOf":
			d.multipleOf(path, ov, nv, oHas, nHas)
		case "uniqueItems":
			switch {
			case nv == true:
				d.brk(path, "uniqueItems added")
			case ov == true:
				d.add(path, "uniqueItems removed")
			}
		case "pattern", "format":
			switch {
			case !nHas:
				d.add(path, "%s removed (was %s)", k, show(ov))
			case !oHas:
				d.brk(path, "%s added: %s", k, show(nv))
			default:
				d.brk(path, "%s changed from %s to %s", k, show(ov), show(nv))
			}
		case "propertyNames":
			switch {
			case !nHas:
				d.add(path, "propertyNames removed")
			case !oHas:
				d.brk(path, "propertyNames added")
			default:
				d.brk(path, "propertyNames changed; cannot prove it is backward compatible")
			}
		case "required":
			d.required(path, ov, nv)
		case "dependentRequired":
			d.dependentRequired(path, ov, nv)
		case "properties":
			d.properties(path, o, n)
		case "additionalProperties":
			p := join(path, k)
			if d.unevalProps && oHas && !nHas && ov != false {
				d.brk(p, "removed while the schema uses unevaluatedProperties: the properties it evaluated are now unevaluated")
				continue
			}
			d.schema(p, orTrue(ov), orTrue(nv))
		case "items":
			p := join(path, k)
			if canon(o["prefixItems"]) != canon(n["prefixItems"]) {
				d.brk(p, "changed together with prefixItems; cannot prove it is backward compatible")
				continue
			}
			if d.unevalItems && oHas && !nHas && ov != false {
				d.brk(p, "removed while the schema uses unevaluatedItems: the items it evaluated are now unevaluated")
				continue
			}
			d.schema(p, orTrue(ov), orTrue(nv))
		case "$defs":
			d.defs(path, ov, nv)
		default:
			d.unrecognised(path, k)
		}
	}
}

// dialectOf normalises $schema: draft 2020-12, however spelled, is the
// default and the same as none.
func dialectOf(v any) string {
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		return canon(v)
	}
	if draft2020[strings.TrimSuffix(s, "#")] {
		return ""
	}
	return s
}

func (d *differ) types(path string, ov, nv any, oHas, nHas bool) {
	ot, ok1 := typeSet(ov)
	nt, ok2 := typeSet(nv)
	switch {
	case !ok1 || !ok2:
		d.unrecognised(path, "type")
	case !nHas:
		d.add(path, "type constraint removed (was %s)", showTypes(ot))
	case !oHas:
		d.brk(path, "type constraint added: must be %s", showTypes(nt))
	default:
		var lost []string
		for _, t := range ot {
			if !slices.Contains(nt, t) && (t != "integer" || !slices.Contains(nt, "number")) {
				lost = append(lost, t)
			}
		}
		gained := slices.ContainsFunc(nt, func(t string) bool { return !slices.Contains(ot, t) })
		switch {
		case len(lost) == 0 && !gained:
			// Same set, spelled differently ("string" vs ["string"]).
		case len(lost) == 0:
			d.add(path, "type widened from %s to %s", showTypes(ot), showTypes(nt))
		case len(ot) == 1 && len(nt) == 1:
			d.brk(path, "retyped from %s to %s", showTypes(ot), showTypes(nt))
		default:
			d.brk(path, "type narrowed from %s to %s: %s no longer allowed", showTypes(ot), showTypes(nt), strings.Join(lost, ", "))
		}
	}
}

func typeSet(v any) ([]string, bool) {
	switch v := v.(type) {
	case nil:
		return nil, true
	case string:
		return []string{v}, true
	case []any:
		var out []string
		for _, t := range v {
			s, ok := t.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func showTypes(ts []string) string {
	if len(ts) == 1 {
		return ts[0]
	}
	return "[" + strings.Join(ts, ", ") + "]"
}

func (d *differ) enum(path string, ov, nv any, oHas, nHas bool) {
	oe, ok1 := ov.([]any)
	ne, ok2 := nv.([]any)
	switch {
	case !nHas:
		d.add(path, "enum removed")
		return
	case (oHas && !ok1) || !ok2:
		d.unrecognised(path, "enum")
		return
	case !oHas:
		d.brk(path, "enum added: only %s allowed", showList(ne))
		return
	}
	in := func(v any, list []any) bool {
		c := canon(v)
		return slices.ContainsFunc(list, func(w any) bool { return canon(w) == c })
	}
	var lost, gained []any
	for _, v := range oe {
		if !in(v, ne) {
			lost = append(lost, v)
		}
	}
	for _, v := range ne {
		if !in(v, oe) {
			gained = append(gained, v)
		}
	}
	if len(lost) > 0 {
		d.brk(path, "enum narrowed: %s no longer allowed", showList(lost))
	}
	if len(gained) > 0 {
		d.add(path, "enum widened: %s added", showList(gained))
	}
}

// bound compares a numeric limit. dir is +1 for an upper bound (raising it
// widens) and -1 for a lower bound.
func (d *differ) bound(path, kw string, ov, nv any, oHas, nHas bool, dir int) {
	if !nHas {
		d.add(path, "%s removed (was %s)", kw, show(ov))
		return
	}
	if !oHas {
		d.brk(path, "%s added: %s", kw, show(nv))
		return
	}
	o, ok1 := number(ov)
	n, ok2 := number(nv)
	if !ok1 || !ok2 {
		d.unrecognised(path, kw)
		return
	}
	switch c := n.Cmp(o) * dir; {
	case c < 0 && dir > 0:
		d.brk(path, "%s lowered from %s to %s", kw, show(ov), show(nv))
	case c < 0:
		d.brk(path, "%s raised from %s to %s", kw, show(ov), show(nv))
	case c > 0 && dir > 0:
		d.add(path, "%s raised from %s to %s", kw, show(ov), show(nv))
	case c > 0:
		d.add(path, "%s lowered from %s to %s", kw, show(ov), show(nv))
	}
}

func (d *differ) multipleOf(path string, ov, nv any, oHas, nHas bool) {
	if !nHas {
		d.add(path, "multipleOf removed (was %s)", show(ov))
		return
	}
	if !oHas {
		d.brk(path, "multipleOf added: %s", show(nv))
		return
	}
	o, ok1 := number(ov)
	n, ok2 := number(nv)
	if !ok1 || !ok2 || n.Sign() <= 0 {
		d.unrecognised(path, "multipleOf")
		return
	}
	// Every multiple of o is a multiple of n iff o/n is an integer.
	if new(big.Rat).Quo(o, n).IsInt() {
		d.add(path, "multipleOf relaxed from %s to %s", show(ov), show(nv))
		return
	}
	d.brk(path, "multipleOf changed from %s to %s", show(ov), show(nv))
}

func (d *differ) required(path string, ov, nv any) {
	or, ok1 := stringSet(ov)
	nr, ok2 := stringSet(nv)
	if !ok1 || !ok2 {
		d.unrecognised(path, "required")
		return
	}
	for _, name := range nr {
		if !slices.Contains(or, name) {
			d.brk(join(join(path, "properties"), name), "newly required")
		}
	}
	for _, name := range or {
		if !slices.Contains(nr, name) {
			d.add(join(join(path, "properties"), name), "no longer required")
		}
	}
}

func stringSet(v any) ([]string, bool) {
	if v == nil {
		return nil, true
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func (d *differ) dependentRequired(path string, ov, nv any) {
	om, ok1 := mapOrNil(ov)
	nm, ok2 := mapOrNil(nv)
	if !ok1 || !ok2 {
		d.unrecognised(path, "dependentRequired")
		return
	}
	for _, k := range unionKeys(om, nm) {
		p := join(join(path, "dependentRequired"), k)
		o, ok1 := stringSet(om[k])
		n, ok2 := stringSet(nm[k])
		if !ok1 || !ok2 {
			d.unrecognised(p, "dependentRequired")
			continue
		}
		for _, name := range n {
			if !slices.Contains(o, name) {
				d.brk(p, "%s newly required when %s is present", quote(name), quote(k))
			}
		}
		for _, name := range o {
			if !slices.Contains(n, name) {
				d.add(p, "%s no longer required when %s is present", quote(name), quote(k))
			}
		}
	}
}

func (d *differ) properties(path string, o, n map[string]any) {
	om, ok1 := mapOrNil(o["properties"])
	nm, ok2 := mapOrNil(n["properties"])
	if !ok1 || !ok2 {
		d.unrecognised(path, "properties")
		return
	}
	for _, name := range unionKeys(om, nm) {
		p := join(join(path, "properties"), name)
		ov, oHas := om[name]
		nv, nHas := nm[name]
		switch {
		case oHas && nHas:
			d.schema(p, ov, nv)
		case oHas:
			d.brk(p, "property removed; existing documents may still set it")
		default:
			d.newProperty(p, name, o, nv)
		}
	}
}

// newProperty decides whether declaring property name with schema p narrows
// what old accepted for that name. Before, its value was constrained only by
// the patternProperties that match it or, if none does, by
// additionalProperties (and things this analysis ignores, which only makes
// the old set larger and the verdict more cautious).
func (d *differ) newProperty(path, name string, old map[string]any, p any) {
	if hasKey(p, "$dynamicAnchor") || hasKey(p, "$recursiveAnchor") {
		d.brk(path, "new property declares a dynamic anchor, which can change what $dynamicRef resolves to")
		return
	}
	if trivial(p) {
		d.add(path, "new optional property")
		return
	}
	pats, ok := mapOrNil(old["patternProperties"])
	if !ok {
		d.brk(path, "new property; cannot prove it is backward compatible")
		return
	}
	var matched []string
	for _, re := range unionKeys(pats, nil) {
		rx, err := regexp.Compile(re)
		if err != nil {
			d.brk(path, "new property; cannot tell whether patternProperties %s matches it", quote(re))
			return
		}
		if rx.MatchString(name) {
			matched = append(matched, re)
		}
	}
	if len(matched) > 0 {
		for _, re := range matched {
			if d.provablyWider(pats[re], p) {
				d.add(path, "new optional property (at least as wide as patternProperties %s)", quote(re))
				return
			}
		}
		d.brk(path, "new property may reject values that patternProperties %s allowed", quote(matched[0]))
		return
	}
	ap, has := old["additionalProperties"]
	switch {
	case ap == false:
		d.add(path, "new optional property")
	case !has || ap == true:
		// Strictly, a stored document may already carry this name with a
		// value the new schema rejects. The gate follows the contract every
		// operator expects (a new optional field is additive); such a
		// document is refused on its next apply, never silently reshaped.
		if d.strict {
			d.brk(path, "new property on an open object (additionalProperties is not false): existing documents may already set it to a value its schema rejects")
			return
		}
		d.add(path, "new optional property")
	case d.provablyWider(ap, p):
		d.add(path, "new optional property (at least as wide as additionalProperties)")
	default:
		d.brk(path, "new property may reject values that additionalProperties allowed")
	}
}

// provablyWider reports whether every value valid under old is valid under
// new, by running the same rules on the pair. Subschemas that use references
// are refused: the same $ref may resolve differently at the two places.
func (d *differ) provablyWider(old, new any) bool {
	for _, k := range []string{"$ref", "$dynamicRef", "$recursiveRef", "$id", "$anchor", "$dynamicAnchor"} {
		if hasKey(old, k) || hasKey(new, k) {
			return false
		}
	}
	sub := &differ{unevalProps: d.unevalProps, unevalItems: d.unevalItems}
	sub.schema("", orTrue(old), orTrue(new))
	return len(sub.breaking) == 0
}

// trivial reports whether a subschema accepts every value.
func trivial(v any) bool {
	m, ok := asObject(v)
	if !ok {
		return false
	}
	for k, v := range m {
		if !annotations[k] && (k != "$schema" || dialectOf(v) != "") {
			return false
		}
	}
	return true
}

func (d *differ) defs(path string, ov, nv any) {
	om, ok1 := mapOrNil(ov)
	nm, ok2 := mapOrNil(nv)
	if !ok1 || !ok2 {
		d.unrecognised(path, "$defs")
		return
	}
	for _, name := range unionKeys(om, nm) {
		p := join(join(path, "$defs"), name)
		o, oHas := om[name]
		n, nHas := nm[name]
		switch {
		case oHas && nHas:
			d.schema(p, o, n)
		case oHas:
			// A definition is only applied through a $ref; a removed one that
			// is still referenced fails to compile, but Diff cannot tell.
			d.brk(p, "definition removed; cannot prove nothing refers to it")
		case hasKey(n, "$dynamicAnchor") || hasKey(n, "$recursiveAnchor"):
			d.brk(p, "new definition declares a dynamic anchor, which can change what $dynamicRef resolves to")
		default:
			d.add(p, "new definition")
		}
	}
}

func mapOrNil(v any) (map[string]any, bool) {
	if v == nil {
		return nil, true
	}
	m, ok := v.(map[string]any)
	return m, ok
}

func unionKeys(a, b map[string]any) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

var ident = regexp.MustCompile(`^[A-Za-z0-9_$-]+$`)

// join appends a keyword or property name to a change path.
func join(path, name string) string {
	seg := name
	if !ident.MatchString(name) {
		return path + "[" + strconv.Quote(name) + "]"
	}
	if path == "" {
		return seg
	}
	return path + "." + seg
}

// hasKey reports whether key appears as an object key anywhere in v. It does
// not know which objects are schemas, so it may find a property of that name:
// callers use it only where a false positive is the cautious answer.
func hasKey(v any, key string) bool {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v[key]; ok {
			return true
		}
		for _, c := range v {
			if hasKey(c, key) {
				return true
			}
		}
	case []any:
		for _, c := range v {
			if hasKey(c, key) {
				return true
			}
		}
	}
	return false
}

// refsInNegation reports whether a reference occurs inside a keyword where a
// wider subschema can make the whole schema narrower.
func refsInNegation(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			switch k {
			case "not", "if", "oneOf", "contains":
				if hasKey(c, "$ref") || hasKey(c, "$dynamicRef") || hasKey(c, "$recursiveRef") {
					return true
				}
			}
			if refsInNegation(c) {
				return true
			}
		}
	case []any:
		for _, c := range v {
			if refsInNegation(c) {
				return true
			}
		}
	}
	return false
}

// number parses a JSON number exactly. Numbers with huge exponents are
// refused rather than expanded.
func number(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	s := string(n)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1000 || e < -1000 {
			return nil, false
		}
	}
	return new(big.Rat).SetString(s)
}

// canon writes v as canonical JSON: sorted keys, no whitespace, and numbers
// by value, so 1, 1.0 and 1e0 are equal.
func canon(v any) string {
	var b strings.Builder
	writeCanon(&b, v)
	return b.String()
}

func writeCanon(b *strings.Builder, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := unionKeys(v, nil)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(k))
			b.WriteByte(':')
			writeCanon(b, v[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, c := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanon(b, c)
		}
		b.WriteByte(']')
	case json.Number:
		if r, ok := number(v); ok {
			b.WriteString(r.RatString())
		} else {
			b.WriteString(string(v))
		}
	case string:
		b.WriteString(strconv.Quote(v))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	default:
		fmt.Fprintf(b, "%v", v)
	}
}

// show renders a schema value for a message, shortened.
func show(v any) string {
	var s string
	if n, ok := v.(json.Number); ok {
		s = string(n)
	} else {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return "?"
		}
		s = strings.TrimSuffix(b.String(), "\n")
	}
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func showList(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = show(v)
	}
	return strings.Join(parts, ", ")
}
