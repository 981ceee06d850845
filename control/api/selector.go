package api

import (
	"regexp"
	"strings"

	"github.com/convergeplane/converge/control/store"
)

// setStart matches the start of a set requirement, "key in (" or
// "key notin (", up to the first value.
var setStart = regexp.MustCompile(`(?s)^\s*([^\s=!(),][^=(),]*?)\s+(in|notin)\s*\((.*)$`)

// looseSetWord finds "in" or "notin" standing alone in a key: a set
// requirement without its parentheses ("env in a").
var looseSetWord = regexp.MustCompile(`\s(in|notin)(\s|$)`)

// parseSelector parses a label_selector (docs/api.md, "Label selectors"):
// requirements separated by commas, each one of
//
//	key=value, key==value  the label is set to value
//	key!=value             the label is absent or set to another value
//	key in (v1,v2)         the label is set to one of the values
//	key notin (v1,v2)      the label is absent or set to none of them
//	key                    the label is set
//	!key                   the label is absent
//
// Whitespace around keys, operators and set values is ignored; the value of
// =, == and != is everything after the operator up to the next comma,
// taken verbatim (it may hold '=', spaces, tabs). A key cannot contain '=',
// '(', ')' or ',', nor start or end with '!' ("a! =b" would read as a!=b
// once its spaces go), and no value can contain ','. A
// selector this grammar cannot read is a 400 naming query.label_selector;
// the bounds labels have are the store's (422).
func parseSelector(sel string) (store.LabelSelector, *Problem) {
	if strings.TrimSpace(sel) == "" {
		return nil, nil
	}
	var out store.LabelSelector
	parts := strings.Split(sel, ",")
	for i := 0; i < len(parts); i++ {
		part := parts[i]
		if m := setStart.FindStringSubmatch(part); m != nil {
			key, op, values := strings.TrimSpace(m[1]), store.SelectorOp(m[2]), []string{}
			if strings.HasSuffix(key, "!") {
				return nil, selectorProblem("a key cannot contain '=', '(' or ')' nor start or end with '!'", part)
			}
			term, rest := part, m[3]
			for {
				v, closed := strings.CutSuffix(strings.TrimSpace(rest), ")")
				values = append(values, strings.TrimSpace(v))
				if closed {
					break
				}
				if i++; i == len(parts) {
					return nil, selectorProblem("a set is not closed with ')': write key "+string(op)+" (v1,v2)", term)
				}
				rest = parts[i]
				term += "," + rest
			}
			for _, v := range values {
				switch {
				case v == "":
					return nil, selectorProblem("a set lists an empty value: write key "+string(op)+" (v1,v2)", term)
				case strings.ContainsAny(v, "()"):
					return nil, selectorProblem("a set value cannot contain '(' or ')'", term)
				}
			}
			out = append(out, store.LabelRequirement{Key: key, Op: op, Values: values})
			continue
		}
		var r store.LabelRequirement
		if k, v, ok := strings.Cut(part, "="); ok {
			r = store.LabelRequirement{Key: k, Op: store.SelectorEquals, Values: []string{v}}
			if k, ok = strings.CutSuffix(k, "!"); ok {
				r.Key, r.Op = k, store.SelectorNotEquals
			} else if v, ok = strings.CutPrefix(v, "="); ok {
				r.Values = []string{v}
			}
		} else {
			r.Key, r.Op = strings.TrimSpace(part), store.SelectorExists
			if k, ok := strings.CutPrefix(r.Key, "!"); ok {
				r.Key, r.Op = k, store.SelectorDoesNotExist
			}
			if looseSetWord.MatchString(r.Key) {
				return nil, selectorProblem("in and notin take a set in parentheses: key in (v1,v2)", part)
			}
		}
		r.Key = strings.TrimSpace(r.Key)
		switch {
		case r.Key == "":
			return nil, selectorProblem("each requirement needs a key: key=value, key!=value, key in (v1,v2), key notin (v1,v2), key or !key", part)
		case strings.HasPrefix(r.Key, "!") || strings.HasSuffix(r.Key, "!") || strings.ContainsAny(r.Key, "()"):
			return nil, selectorProblem("a key cannot contain '=', '(' or ')' nor start or end with '!'", part)
		}
		out = append(out, r)
	}
	return out, nil
}

func selectorProblem(msg, term string) *Problem {
	return malformed("query.label_selector", msg, term)
}
