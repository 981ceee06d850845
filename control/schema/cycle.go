package schema

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrRefCycle is wrapped by Compile when $refs (with allOf, anyOf, oneOf,
// not, if/then/else or dependentSchemas, which also apply to the same
// value) lead back to where they started without descending into the
// value. The library compiles such a schema and then fails every document
// with "reference cycle", so a kind would accept its manifest and refuse
// every resource.
var ErrRefCycle = errors.New("reference cycle")

// checkRefCycles walks every subschema reachable from root and refuses a
// cycle of in-place applicators. Descending keywords (properties, items…)
// consume a level of the document, so recursion through them terminates
// and is allowed.
func checkRefCycles(root *jsonschema.Schema) error {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[*jsonschema.Schema]int{}
	var path []*jsonschema.Schema
	var visit func(s *jsonschema.Schema) error
	// descend starts a fresh in-place path below a keyword that consumes a
	// level of the document.
	descend := func(s *jsonschema.Schema) error {
		if s == nil {
			return nil
		}
		saved := path
		path = nil
		defer func() { path = saved }()
		return visit(s)
	}
	visit = func(s *jsonschema.Schema) error {
		if s == nil {
			return nil
		}
		switch state[s] {
		case onPath:
			for i, p := range path {
				if p == s {
					return fmt.Errorf("$ref cycle %s: %w", cycleText(path[i:], s), ErrRefCycle)
				}
			}
			// Reached again below a descending keyword: terminates.
			return nil
		case done:
			return nil
		}
		state[s] = onPath
		path = append(path, s)
		for _, next := range inPlace(s) {
			if err := visit(next); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		for _, next := range descending(s) {
			if err := descend(next); err != nil {
				return err
			}
		}
		state[s] = done
		return nil
	}
	return visit(root)
}

// inPlace lists the subschemas applied to the same value as s.
func inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, d := range s.DependentSchemas {
		out = append(out, d)
	}
	for _, d := range s.Dependencies {
		if d, ok := d.(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	return out
}

// descending lists the subschemas applied to a part of the value.
func descending(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020,
		s.UnevaluatedItems, s.ContentSchema}
	for _, p := range s.Properties {
		out = append(out, p)
	}
	for _, p := range s.PatternProperties {
		out = append(out, p)
	}
	out = append(out, s.PrefixItems...)
	for _, a := range []any{s.AdditionalProperties, s.AdditionalItems, s.Items} {
		switch v := a.(type) {
		case *jsonschema.Schema:
			out = append(out, v)
		case []*jsonschema.Schema:
			out = append(out, v...)
		}
	}
	return out
}

// cycleText names the schemas of a cycle by their pointers in the document.
func cycleText(cycle []*jsonschema.Schema, back *jsonschema.Schema) string {
	names := make([]string, 0, len(cycle)+1)
	for _, s := range append(cycle, back) {
		loc := strings.TrimPrefix(s.Location, baseURL)
		loc = strings.TrimPrefix(loc, "#")
		if loc == "" {
			loc = "/"
		}
		names = append(names, loc)
	}
	return strings.Join(names, " -> ")
}
