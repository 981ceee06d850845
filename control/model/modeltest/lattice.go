// Package modeltest holds shared test data for the model: the legality
// lattice's cases, run against both model.ValidateManifest and the
// database's kind_manifest_legal trigger (validate_kind_manifest) so the
// two halves cannot drift.
package modeltest

import (
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// LatticeCase is a manifest and the rule it breaks.
type LatticeCase struct {
	Name     string
	Manifest model.KindManifest
	// Want is a substring of the Go error; "" means the manifest is legal.
	Want string
}

// LatticeCases are manifests with the rule each breaks ("" = legal). The
// integration suite runs the same cases against the database's
// kind_manifest_legal trigger (validate_kind_manifest), so the two halves
// cannot drift apart.
func LatticeCases() []LatticeCase {
	r := func(name string, t webhooksdk.Trigger, emits ...string) model.ReactionDecl {
		return model.ReactionDecl{Name: name, Trigger: t, Emits: emits}
	}
	m := func(rs ...model.ReactionDecl) model.KindManifest {
		return model.KindManifest{Kind: "vpc", KindVersion: 1, Reactions: rs}
	}
	withFin := func(k model.KindManifest, fin string) model.KindManifest { k.FinalizerName = fin; return k }
	verb := func(d model.ReactionDecl, v string) model.ReactionDecl { d.Verb = v; return d }
	fin := func(d model.ReactionDecl, f string) model.ReactionDecl { d.Finalizer = f; return d }
	return []LatticeCase{
		{"worker", m(r("work", webhooksdk.TriggerSpecChange, "status")), ""},
		{"composer with rollup", m(r("compose", webhooksdk.TriggerSpecChange, "children", "edges", "status"), r("rollup", webhooksdk.TriggerChildrenSettled, "status", "conditions")), ""},
		{"no reactions (a data kind)", m(), ""},
		{"reactor", m(r("react", webhooksdk.TriggerReactor, "sideEffect")), ""},
		{"operation with a verb", m(r("work", webhooksdk.TriggerSpecChange, "status"), verb(r("op", webhooksdk.TriggerOperation, "operationOutput"), "enable")), ""},
		{"finalizer on the reaction", m(fin(r("teardown", webhooksdk.TriggerDeleteRequested, "finalizer"), "vpc.io/cleanup")), ""},
		{"finalizer on the manifest", withFin(m(r("teardown", webhooksdk.TriggerDeleteRequested, "finalizer")), "vpc.io/cleanup"), ""},
		{"composer without status", m(r("compose", webhooksdk.TriggerSpecChange, "children")), "must also emit status"},
		{"composer with sideEffect", m(r("compose", webhooksdk.TriggerSpecChange, "children", "status", "sideEffect")), "may not emit sideEffect"},
		{"two specChange reactions", m(r("a", webhooksdk.TriggerSpecChange, "status"), r("b", webhooksdk.TriggerSpecChange, "conditions")), "at most one specChange"},
		{"two rollups", m(r("a", webhooksdk.TriggerChildrenSettled, "status"), r("b", webhooksdk.TriggerChildrenSettled, "status")), "at most one rollup"},
		{"two reactors", m(r("a", webhooksdk.TriggerReactor, "sideEffect"), r("b", webhooksdk.TriggerReactor, "sideEffect")), "at most one reactor"},
		{"reactor emitting status", m(r("react", webhooksdk.TriggerReactor, "sideEffect", "status")), "and nothing else"},
		{"operation without a verb", m(r("op", webhooksdk.TriggerOperation, "operationOutput")), "needs a verb"},
		{"duplicate verb", m(verb(r("a", webhooksdk.TriggerOperation, "operationOutput"), "x"), verb(r("b", webhooksdk.TriggerOperation, "operationOutput"), "x")), "handled twice"},
		{"verb on a non-operation", m(verb(r("work", webhooksdk.TriggerSpecChange, "status"), "x")), "only allowed on an operation"},
		{"deleteRequested without a finalizer", m(r("teardown", webhooksdk.TriggerDeleteRequested, "finalizer")), "needs a finalizer"},
		{"finalizer on a non-delete", m(fin(r("work", webhooksdk.TriggerSpecChange, "status"), "x")), "only allowed on a deleteRequested"},
		{"unknown trigger", m(r("work", webhooksdk.Trigger("onTuesday"), "status")), "is not one of"},
		{"unknown emit", m(r("work", webhooksdk.TriggerSpecChange, "everything")), "is not one of"},
		{"empty emits", m(r("work", webhooksdk.TriggerSpecChange)), "at least one"},
		{"duplicate name", m(r("x", webhooksdk.TriggerSpecChange, "status"), r("x", webhooksdk.TriggerChildrenSettled, "status")), "duplicated"},
		{"missing name", m(r("", webhooksdk.TriggerSpecChange, "status")), "name"},
	}
}
