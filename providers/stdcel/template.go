package stdcel

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// A template is a JSON value whose strings may hold CEL expressions: "${expr}" alone
// keeps the result's type, "a-${expr}-b" interpolates into a string.
type template struct {
	kind  tmplKind
	lit   any      // tmplLit: a JSON leaf as decoded (json.Number for numbers)
	expr  *expr    // tmplExpr: a whole-value expression
	parts []part   // tmplInterp: text and expressions
	keys  []string // tmplObject: sorted keys of obj
	obj   map[string]*template
	list  []*template // tmplList
}

type tmplKind int

const (
	tmplLit tmplKind = iota
	tmplExpr
	tmplInterp
	tmplObject
	tmplList
)

// part is one piece of an interpolation: text, or an expression when expr is set.
type part struct {
	text string
	expr *expr
}

// splitExprs splits s into text and "${...}" expressions. Braces inside an expression
// nest and quoted strings are skipped, so map literals and "}" in strings work.
func splitExprs(s string) (texts []string, exprs []string, err error) {
	var text strings.Builder
	for i := 0; i < len(s); {
		if !strings.HasPrefix(s[i:], "${") {
			text.WriteByte(s[i])
			i++
			continue
		}
		end, err := exprEnd(s, i+2)
		if err != nil {
			return nil, nil, err
		}
		texts = append(texts, text.String())
		text.Reset()
		exprs = append(exprs, strings.TrimSpace(s[i+2:end]))
		i = end + 1
	}
	return append(texts, text.String()), exprs, nil
}

// exprEnd returns the index of the "}" closing an expression that starts at i.
func exprEnd(s string, i int) (int, error) {
	depth := 0
	var quote byte
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			switch c {
			case '\\':
				i++
			case quote:
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '{':
			depth++
		case c == '}':
			if depth == 0 {
				return i, nil
			}
			depth--
		}
	}
	return 0, errors.New(`unterminated "${"`)
}

// toCEL turns a decoded JSON value into one CEL's native adapter takes: json.Number
// becomes int64 when integral and in range, float64 otherwise.
func toCEL(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = toCEL(e)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = toCEL(e)
		}
		return l
	}
	return v
}

// fromCEL turns a CEL result into a JSON-encodable value.
func fromCEL(v ref.Val) (any, error) {
	switch v.Type() {
	case types.NullType:
		return nil, nil
	case types.BoolType, types.IntType, types.UintType, types.StringType:
		return v.Value(), nil
	case types.DoubleType:
		f := float64(v.(types.Double))
		if _, err := json.Marshal(f); err != nil {
			return nil, fmt.Errorf("result %v is not a JSON number", f)
		}
		return f, nil
	}
	switch v := v.(type) {
	case traits.Mapper:
		m := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			e, err := fromCEL(v.Get(k))
			if err != nil {
				return nil, err
			}
			m[string(ks)] = e
		}
		return m, nil
	case traits.Lister:
		var l []any
		for it := v.Iterator(); it.HasNext() == types.True; {
			e, err := fromCEL(it.Next())
			if err != nil {
				return nil, err
			}
			l = append(l, e)
		}
		if l == nil {
			l = []any{}
		}
		return l, nil
	}
	return nil, fmt.Errorf("result of type %s has no JSON form", v.Type().TypeName())
}

// scalarString formats an interpolated result; only scalars interpolate.
func scalarString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", fmt.Errorf("interpolated result %T is not a scalar", v)
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointerToken escapes one JSON Pointer token (RFC 6901).
func pointerToken(s string) string { return pointerEscaper.Replace(s) }

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
