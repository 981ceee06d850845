package model

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/convergeplane/converge/webhooksdk"
)

// MaxKindVersion is the largest kind_version: the smallint columns it rides
// on, as the protocol states it.
const MaxKindVersion = webhooksdk.MaxKindVersion

// Triggers lists every reaction trigger, the closed set a manifest may use.
// The trigger type and its values are the protocol's (webhooksdk.Trigger).
var Triggers = []webhooksdk.Trigger{webhooksdk.TriggerSpecChange, webhooksdk.TriggerChildrenSettled,
	webhooksdk.TriggerDeleteRequested, webhooksdk.TriggerOperation, webhooksdk.TriggerReactor, webhooksdk.TriggerResync}

// OutcomeBit is one part of an Outcome the core may apply. The values match
// outcome_bit() in the database.
type OutcomeBit uint8

// The eight outcome parts.
const (
	OutcomeChildren OutcomeBit = 1 << iota
	OutcomeEdges
	OutcomeConfigs
	OutcomeStatus
	OutcomeConditions
	OutcomeFinalizer
	OutcomeOperationOutput
	OutcomeSideEffect
)

var outcomeNames = []struct {
	bit  OutcomeBit
	name string
}{
	{OutcomeChildren, "children"}, {OutcomeEdges, "edges"}, {OutcomeConfigs, "configs"},
	{OutcomeStatus, "status"}, {OutcomeConditions, "conditions"}, {OutcomeFinalizer, "finalizer"},
	{OutcomeOperationOutput, "operationOutput"}, {OutcomeSideEffect, "sideEffect"},
}

// OutcomeMask is a set of outcome parts: what a reaction emits.
type OutcomeMask uint8

// Has reports whether every bit of b is in m.
func (m OutcomeMask) Has(b OutcomeBit) bool { return m&OutcomeMask(b) == OutcomeMask(b) }

// Names returns the mask's parts in canonical order.
func (m OutcomeMask) Names() []string {
	var out []string
	for _, o := range outcomeNames {
		if m.Has(o.bit) {
			out = append(out, o.name)
		}
	}
	return out
}

// ParseOutcome maps a part name to its bit.
func ParseOutcome(name string) (OutcomeBit, bool) {
	for _, o := range outcomeNames {
		if o.name == name {
			return o.bit, true
		}
	}
	return 0, false
}

// Transitions lists every lifecycle edge a reactor binding may watch. The
// transition type and its values are the protocol's (webhooksdk.Transition).
var Transitions = []webhooksdk.Transition{webhooksdk.TransitionCreated, webhooksdk.TransitionSynced,
	webhooksdk.TransitionDegraded, webhooksdk.TransitionFailed, webhooksdk.TransitionDeleted}

// ReactionDecl is one (Trigger, Emits) pair a kind declares.
type ReactionDecl struct {
	Name      string             `json:"name"`
	Trigger   webhooksdk.Trigger `json:"trigger"`
	Emits     []string           `json:"emits"`
	Verb      string             `json:"verb,omitempty"`
	Finalizer string             `json:"finalizer,omitempty"`
	// InputSchema is an operation reaction's JSON Schema (draft 2020-12)
	// for the verb's input; absent = any input.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Mask returns the reaction's emits as a mask; unknown names are ignored
// (ValidateManifest rejects them).
func (r ReactionDecl) Mask() OutcomeMask {
	var m OutcomeMask
	for _, e := range r.Emits {
		if b, ok := ParseOutcome(e); ok {
			m |= OutcomeMask(b)
		}
	}
	return m
}

// Policy is a kind's operational policy, seeded insert-if-absent into
// kind_config on apply and editable live afterwards.
type Policy struct {
	// MaxInflight is the global cap on concurrently running tasks of this
	// (kind, kind_version). 0 means uncapped.
	MaxInflight int `json:"max_inflight,omitempty"`
	// TaskDeadlineSecs bounds one task's run time. 0 means no deadline.
	TaskDeadlineSecs int `json:"task_deadline_secs,omitempty"`
	// ResyncIntervalSecs > 0 opts the kind into periodic drift re-observe.
	ResyncIntervalSecs int `json:"resync_interval_secs,omitempty"`
	// ResyncRecomposes also re-runs the composer on each resync.
	ResyncRecomposes bool `json:"resync_recomposes,omitempty"`
	// OrphanGraceSecs keeps a composer-dropped child this long before it is
	// torn down. 0 prunes at once.
	OrphanGraceSecs int `json:"orphan_grace_secs,omitempty"`
	// MaxTransientAttempts turns a task that failed transiently this many
	// times into a terminal failure. 0 retries forever.
	MaxTransientAttempts int `json:"max_transient_attempts,omitempty"`
}

// KindManifest is the CRD: schemas, reactions and policy for one
// (kind, kind_version). It is data; no code rides with it.
type KindManifest struct {
	Kind          string          `json:"kind"`
	KindVersion   int             `json:"kind_version"`
	Description   string          `json:"description,omitempty"`
	SpecSchema    json.RawMessage `json:"spec_schema,omitempty"`
	StatusSchema  json.RawMessage `json:"status_schema,omitempty"`
	ConfigSchema  json.RawMessage `json:"config_schema,omitempty"`
	Reactions     []ReactionDecl  `json:"reactions"`
	FinalizerName string          `json:"finalizer_name,omitempty"`
	Policy
}

// IsReactor reports whether the kind declares only reactor reactions: it owns
// no resources and runs when a binding fires.
func (m *KindManifest) IsReactor() bool {
	if len(m.Reactions) == 0 {
		return false
	}
	for _, r := range m.Reactions {
		if r.Trigger != webhooksdk.TriggerReactor {
			return false
		}
	}
	return true
}

// Operation returns the operation reaction handling verb, if any.
func (m *KindManifest) Operation(verb string) (ReactionDecl, bool) {
	for _, r := range m.Reactions {
		if r.Trigger == webhooksdk.TriggerOperation && r.Verb == verb {
			return r, true
		}
	}
	return ReactionDecl{}, false
}

// Reaction returns the reaction declared for trigger t, if any.
func (m *KindManifest) Reaction(t webhooksdk.Trigger) (ReactionDecl, bool) {
	for _, r := range m.Reactions {
		if r.Trigger == t {
			return r, true
		}
	}
	return ReactionDecl{}, false
}

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// nameRE matches resource, config and binding names: 1-253 characters of
// letters, digits, '.', '_' and '-', starting and ending alphanumeric.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$`)

// ValidKind reports whether s is a legal kind name.
func ValidKind(s string) bool { return kindRE.MatchString(s) }

// ValidName reports whether s is a legal object name.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ValidKindVersion reports whether v is in 1..MaxKindVersion.
func ValidKindVersion(v int) bool { return v >= 1 && v <= MaxKindVersion }

// FieldError is a rule broken by one field of an input.
type FieldError struct {
	// Location is a dotted path to the field, e.g. "reactions[1].verb".
	Location string
	// Rule names the rule, e.g. "operation needs a verb".
	Message string
}

func (e *FieldError) Error() string { return e.Location + ": " + e.Message }

// ValidateManifest enforces the legality lattice and the field rules of a
// manifest. It returns a *FieldError naming the first broken rule.
func ValidateManifest(m *KindManifest) error {
	if !ValidKind(m.Kind) {
		return &FieldError{"kind", "must match ^[a-z][a-z0-9-]{0,62}$"}
	}
	if !ValidKindVersion(m.KindVersion) {
		return &FieldError{"kind_version", fmt.Sprintf("is required and must be in 1..%d (got %d)", MaxKindVersion, m.KindVersion)}
	}
	for _, p := range []struct {
		loc string
		v   int
	}{{"max_inflight", m.MaxInflight}, {"task_deadline_secs", m.TaskDeadlineSecs},
		{"resync_interval_secs", m.ResyncIntervalSecs}, {"orphan_grace_secs", m.OrphanGraceSecs},
		{"max_transient_attempts", m.MaxTransientAttempts}} {
		if p.v < 0 {
			return &FieldError{p.loc, "must not be negative"}
		}
	}
	var (
		names, verbs                         []string
		composers, rollups, reactors, specCh int
	)
	for i, r := range m.Reactions {
		loc := fmt.Sprintf("reactions[%d]", i)
		if r.Name == "" {
			return &FieldError{loc + ".name", "is required"}
		}
		if slices.Contains(names, r.Name) {
			return &FieldError{loc + ".name", fmt.Sprintf("reaction name %q is duplicated", r.Name)}
		}
		names = append(names, r.Name)
		if !slices.Contains(Triggers, r.Trigger) {
			return &FieldError{loc + ".trigger", fmt.Sprintf("%q is not one of %s", r.Trigger, joinTriggers())}
		}
		if len(r.Emits) == 0 {
			return &FieldError{loc + ".emits", "must list at least one outcome part"}
		}
		for j, e := range r.Emits {
			if _, ok := ParseOutcome(e); !ok {
				return &FieldError{fmt.Sprintf("%s.emits[%d]", loc, j), fmt.Sprintf("%q is not one of %s", e, strings.Join(OutcomeMask(0xff).Names(), ", "))}
			}
		}
		mask := r.Mask()
		if r.Verb != "" && r.Trigger != webhooksdk.TriggerOperation {
			return &FieldError{loc + ".verb", "is only allowed on an operation reaction"}
		}
		if len(r.InputSchema) > 0 && r.Trigger != webhooksdk.TriggerOperation {
			return &FieldError{loc + ".input_schema", "is only allowed on an operation reaction"}
		}
		if r.Finalizer != "" && r.Trigger != webhooksdk.TriggerDeleteRequested {
			return &FieldError{loc + ".finalizer", "is only allowed on a deleteRequested reaction"}
		}
		switch r.Trigger {
		case webhooksdk.TriggerSpecChange:
			specCh++
			if mask.Has(OutcomeChildren) {
				composers++
				if !mask.Has(OutcomeStatus) {
					return &FieldError{loc + ".emits", "a composer (specChange emitting children) must also emit status"}
				}
				if mask.Has(OutcomeSideEffect) {
					return &FieldError{loc + ".emits", "a composer may not emit sideEffect"}
				}
			}
		case webhooksdk.TriggerChildrenSettled:
			if mask.Has(OutcomeStatus) {
				rollups++
			}
		case webhooksdk.TriggerOperation:
			if r.Verb == "" {
				return &FieldError{loc + ".verb", "an operation reaction needs a verb"}
			}
			if slices.Contains(verbs, r.Verb) {
				return &FieldError{loc + ".verb", fmt.Sprintf("verb %q is handled twice", r.Verb)}
			}
			verbs = append(verbs, r.Verb)
		case webhooksdk.TriggerDeleteRequested:
			if r.Finalizer == "" && m.FinalizerName == "" {
				return &FieldError{loc + ".finalizer", "a deleteRequested reaction needs a finalizer (on the reaction or the manifest's finalizer_name)"}
			}
		case webhooksdk.TriggerReactor:
			reactors++
			if mask != OutcomeMask(OutcomeSideEffect) {
				return &FieldError{loc + ".emits", `a reactor reaction must emit ["sideEffect"] and nothing else`}
			}
		}
	}
	switch {
	case composers > 1:
		return &FieldError{"reactions", "at most one composer (specChange emitting children) per kind"}
	case specCh > 1:
		return &FieldError{"reactions", "at most one specChange reaction per kind (one request carries one reaction)"}
	case rollups > 1:
		return &FieldError{"reactions", "at most one rollup (childrenSettled emitting status) per kind"}
	case reactors > 1:
		return &FieldError{"reactions", "at most one reactor reaction per kind"}
	}
	return nil
}

func joinTriggers() string {
	s := make([]string, len(Triggers))
	for i, t := range Triggers {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}
