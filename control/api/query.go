package api

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
)

// Query parameter limits, checked for every route under Prefix by
// checkQuery before a handler runs.
const (
	// MaxQueryValueBytes caps one query parameter value.
	MaxQueryValueBytes = 1024
	// MaxSelectorBytes caps label_selector, which holds several pairs.
	MaxSelectorBytes = 4096
)

// queryRule is how one parameter's values are checked beyond the common
// rules; the zero rule is the default.
type queryRule struct {
	max int
	// allowSpace lets tabs and newlines through (label values may hold
	// them); NUL and the other control bytes are still refused.
	allowSpace bool
	// check validates the format; it returns why the value is refused.
	check func(string) string
	// repeatable lets the parameter be sent more than once: a list, read
	// as huma reads an exploded array. Every other parameter takes one
	// value, and a second is refused rather than silently ignored.
	repeatable bool
}

// queryRules are the parameters with their own rule. A parameter a route
// reads as a list ([]T, "explode") must be listed here as repeatable.
var queryRules = map[string]queryRule{ // a constant table
	"label_selector": {max: MaxSelectorBytes, allowSpace: true},
	"cursor":         {check: cursorFormat},
	"phase":          {repeatable: true},
}

// checkQuery is the one validator of every query parameter of every route
// under Prefix, run before any handler so that nothing unchecked reaches the
// database: each name and value must be valid UTF-8 without NUL or other
// control bytes, at most MaxQueryValueBytes long (label_selector:
// MaxSelectorBytes), a cursor must look like one this server issues, and
// only a repeatable parameter may be sent more than once (?limit=1&limit=3
// took the first). A refused parameter is a 400 naming it (query.cursor).
// The handlers' own rules (limit ranges, a phase name, an owner id) come
// after, as 422s.
func checkQuery(c *fiber.Ctx) error {
	var seen []string // a query names few parameters
	for k, v := range c.Request().URI().QueryArgs().All() {
		name := string(k)
		if p := checkParam(name, string(v)); p != nil {
			return writeProblem(c, p)
		}
		if slices.Contains(seen, name) && !queryRules[name].repeatable {
			return writeProblem(c, malformed("query."+name, "is sent more than once; it takes one value", nil))
		}
		seen = append(seen, name)
	}
	return c.Next()
}

// checkParam says what is wrong with one query parameter, or nil.
func checkParam(name, value string) *Problem {
	if why := badText(name, false); why != "" {
		return malformed("query", "has a parameter name that "+why, strings.ToValidUTF8(name, "\uFFFD"))
	}
	rule := queryRules[name]
	loc := "query." + name
	limit := cmp.Or(rule.max, MaxQueryValueBytes)
	switch {
	case len(value) > limit:
		return malformed(loc, fmt.Sprintf("must be at most %d bytes (got %d)", limit, len(value)), nil)
	case badText(value, rule.allowSpace) != "":
		return malformed(loc, badText(value, rule.allowSpace), strings.ToValidUTF8(value, "\uFFFD"))
	case rule.check != nil:
		if why := rule.check(value); why != "" {
			return malformed(loc, why, value)
		}
	}
	return nil
}

// badText says why s cannot be a parameter, or "".
func badText(s string, allowSpace bool) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r == 0:
			return "must not contain a NUL byte"
		case allowSpace && (r == '\t' || r == '\n' || r == '\r'):
		case r < 0x20 || r == 0x7f:
			return fmt.Sprintf("must not contain control characters (got %U)", r)
		}
	}
	return ""
}

// cursorFormat checks what every cursor this server issues has in common:
// unpadded base64url of printable UTF-8 text. What the text must say is the
// store's business; a cursor it does not recognise is a 400 as well (see
// problemFor).
func cursorFormat(s string) string {
	const refused = "is not a cursor this server issued: pass back a next_cursor unchanged"
	if s == "" {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || badText(string(b), false) != "" {
		return refused
	}
	return ""
}

// cursorProblem is the store's refusal of a cursor (well-formed but not
// one it recognises): a 400, like the refusals of checkQuery.
func cursorProblem(msg string, value any) *Problem {
	return newProblem(http.StatusBadRequest, typeMalformed, "query.cursor "+msg,
		ProblemError{Location: "query.cursor", Message: msg, Value: value})
}
