package store

import (
	"fmt"
	"strings"
)

// LabelSelector selects resources by their labels, with Kubernetes'
// semantics: every requirement must hold, and a requirement that a label
// differs (NotEquals, NotIn, DoesNotExist) holds for a resource without the
// label.
type LabelSelector []LabelRequirement

// LabelRequirement is one term of a LabelSelector.
type LabelRequirement struct {
	Key string
	Op  SelectorOp
	// Values are the operator's values: one for Equals and NotEquals, one
	// or more for In and NotIn, none for Exists and DoesNotExist.
	Values []string
}

// SelectorOp is the operator of a LabelRequirement.
type SelectorOp string

// The selector operators.
const (
	SelectorEquals       SelectorOp = "="     // the label is set to the value
	SelectorNotEquals    SelectorOp = "!="    // the label is absent or set to another value
	SelectorIn           SelectorOp = "in"    // the label is set to one of the values
	SelectorNotIn        SelectorOp = "notin" // the label is absent or set to none of the values
	SelectorExists       SelectorOp = "exists"
	SelectorDoesNotExist SelectorOp = "!"
)

// MaxSelectorValues bounds the requirements of a selector and the values of
// one set (in, notin).
const MaxSelectorValues = MaxLabels

// validate checks the bounds labels have (a key or value no label could
// have matches nothing, and is more likely a mistake) and the shape of
// each requirement. Problems are *InvalidError at label_selector.
func (sel LabelSelector) validate() error {
	const loc = "label_selector"
	if len(sel) > MaxSelectorValues {
		return &InvalidError{Location: loc, Message: fmt.Sprintf("has %d requirements; at most %d are allowed", len(sel), MaxSelectorValues)}
	}
	for _, r := range sel {
		n, shaped := len(r.Values), false
		switch r.Op {
		case SelectorEquals, SelectorNotEquals:
			shaped = n == 1
		case SelectorIn, SelectorNotIn:
			shaped = n >= 1
		case SelectorExists, SelectorDoesNotExist:
			shaped = n == 0
		default:
			return &InvalidError{Location: loc, Message: fmt.Sprintf("has an unknown operator %q", r.Op)}
		}
		switch {
		case !shaped:
			return &InvalidError{Location: loc, Message: fmt.Sprintf("%s %s cannot take %d values", r.Key, r.Op, n)}
		case n > MaxSelectorValues:
			return &InvalidError{Location: loc, Message: fmt.Sprintf("%s %s lists %d values; at most %d are allowed", r.Key, r.Op, n, MaxSelectorValues)}
		case r.Key == "":
			return &InvalidError{Location: loc, Message: "label keys must not be empty"}
		case len(r.Key) > MaxLabelKeyBytes:
			return &InvalidError{Location: loc, Message: fmt.Sprintf("a label key is longer than %d bytes", MaxLabelKeyBytes)}
		}
		for _, v := range r.Values {
			if len(v) > MaxLabelValueBytes {
				return &InvalidError{Location: loc, Message: fmt.Sprintf("a value of %s is longer than %d bytes", r.Key, MaxLabelValueBytes)}
			}
		}
	}
	return nil
}

// where renders the selector as SQL conditions on the labels column col,
// adding its arguments with arg. Equality and set membership are jsonb
// containment (@>), which the GIN index idx_resources_labels serves; the
// negative forms and existence are filters on the rows the other
// conditions find.
func (sel LabelSelector) where(col string, arg func(any) string) string {
	var (
		conds []string
		equal = map[string]string{}
	)
	for _, r := range sel {
		switch r.Op {
		case SelectorEquals:
			if v, ok := equal[r.Key]; ok && v != r.Values[0] {
				return "false" // one label cannot hold two values
			}
			equal[r.Key] = r.Values[0]
		case SelectorNotEquals:
			conds = append(conds, "NOT "+col+" @> "+arg(map[string]string{r.Key: r.Values[0]})+"::jsonb")
		case SelectorIn:
			alts := make([]string, len(r.Values))
			for i, v := range r.Values {
				alts[i] = col + " @> " + arg(map[string]string{r.Key: v}) + "::jsonb"
			}
			conds = append(conds, "("+strings.Join(alts, " OR ")+")")
		case SelectorNotIn:
			conds = append(conds, "NOT coalesce("+col+" ->> "+arg(r.Key)+"::text = ANY ("+arg(r.Values)+"::text[]), false)")
		case SelectorExists:
			conds = append(conds, col+" ? "+arg(r.Key)+"::text")
		case SelectorDoesNotExist:
			conds = append(conds, "NOT "+col+" ? "+arg(r.Key)+"::text")
		}
	}
	if len(equal) > 0 {
		conds = append([]string{col + " @> " + arg(equal) + "::jsonb"}, conds...)
	}
	return strings.Join(conds, " AND ")
}
