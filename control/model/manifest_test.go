package model_test

import (
	"errors"
	"strings"
	"testing"

	. "github.com/convergeplane/converge/control/model" // the model's own tests read best unqualified
	"github.com/convergeplane/converge/control/model/modeltest"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestValidateManifestLattice(t *testing.T) {
	t.Parallel()
	for _, tc := range modeltest.LatticeCases() {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			m := tc.Manifest
			err := ValidateManifest(&m)
			switch {
			case tc.Want == "" && err != nil:
				t.Fatalf("legal manifest refused: %v", err)
			case tc.Want != "" && err == nil:
				t.Fatalf("illegal manifest accepted; want an error containing %q", tc.Want)
			case tc.Want != "" && !strings.Contains(err.Error(), tc.Want):
				t.Fatalf("error = %q, want it to contain %q", err, tc.Want)
			}
			var fe *FieldError
			if err != nil && !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *FieldError naming the field", err)
			}
		})
	}
}

func TestValidateManifestFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    KindManifest
		loc  string
	}{
		{"bad kind", KindManifest{Kind: "VPC", KindVersion: 1}, "kind"},
		{"version 0", KindManifest{Kind: "vpc"}, "kind_version"},
		{"version too big", KindManifest{Kind: "vpc", KindVersion: MaxKindVersion + 1}, "kind_version"},
		{"negative cap", KindManifest{Kind: "vpc", KindVersion: 1, Policy: Policy{MaxInflight: -1}}, "max_inflight"},
	} {
		var fe *FieldError
		if err := ValidateManifest(&tc.m); !errors.As(err, &fe) || fe.Location != tc.loc {
			t.Errorf("%s: err = %v, want a FieldError at %s", tc.name, err, tc.loc)
		}
	}
	ok := KindManifest{Kind: "vpc", KindVersion: MaxKindVersion}
	if err := ValidateManifest(&ok); err != nil {
		t.Errorf("version %d refused: %v", MaxKindVersion, err)
	}
}

func TestIsReactorAndMask(t *testing.T) {
	t.Parallel()
	m := KindManifest{Reactions: []ReactionDecl{{Name: "r", Trigger: webhooksdk.TriggerReactor, Emits: []string{"sideEffect"}}}}
	if !m.IsReactor() {
		t.Error("a kind with only a reactor reaction is a reactor")
	}
	m.Reactions = append(m.Reactions, ReactionDecl{Name: "w", Trigger: webhooksdk.TriggerSpecChange, Emits: []string{"status"}})
	if m.IsReactor() {
		t.Error("a kind with a specChange reaction is not a reactor")
	}
	mask := ReactionDecl{Emits: []string{"children", "status", "bogus"}}.Mask()
	if !mask.Has(OutcomeChildren) || !mask.Has(OutcomeStatus) || mask.Has(OutcomeEdges) {
		t.Errorf("mask = %v", mask.Names())
	}
}
