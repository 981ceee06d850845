package model_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	. "github.com/convergeplane/converge/control/model" // as the model's other tests
	"github.com/convergeplane/converge/control/model/modeltest"
)

// FuzzManifest: a kind manifest is what an operator publishes.
// ValidateManifest refuses a bad one with a *FieldError naming the field;
// one it accepts has a legal kind and version and unique reaction names,
// and it decides the same for the manifest after a JSON round trip.
// testdata/fuzz/FuzzManifest holds the standard providers' manifests.
// `make fuzz` runs it; see docs/operations.md, "Fuzzing and mutation".
func FuzzManifest(f *testing.F) {
	for _, tc := range modeltest.LatticeCases() {
		raw, err := json.Marshal(tc.Manifest)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"kind":"vpc","kind_version":1,"reactions":[{"name":"r","trigger":"specChange","emits":["status"]}],"max_inflight":-1}`))
	f.Add([]byte(`{"kind":"Vpc","kind_version":0,"reactions":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var m KindManifest
		if json.Unmarshal(raw, &m) != nil {
			return
		}
		err := ValidateManifest(&m)
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Location == "" || fe.Message == "") {
			t.Fatalf("refusal %#v does not name a field", err)
		}
		if err == nil {
			if !ValidKind(m.Kind) || !ValidKindVersion(m.KindVersion) {
				t.Fatalf("accepted kind %q version %d", m.Kind, m.KindVersion)
			}
			var names []string
			for _, r := range m.Reactions {
				if r.Name == "" || slices.Contains(names, r.Name) || len(r.Emits) == 0 {
					t.Fatalf("accepted the reaction %+v", r)
				}
				names = append(names, r.Name)
			}
		}
		again, merr := json.Marshal(m)
		if merr != nil {
			t.Fatalf("cannot encode a decoded manifest: %v", merr)
		}
		var m2 KindManifest
		if uerr := json.Unmarshal(again, &m2); uerr != nil {
			t.Fatalf("cannot decode %s: %v", again, uerr)
		}
		err2 := ValidateManifest(&m2)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("%s: %v; after a round trip %s: %v", raw, err, again, err2)
		}
	})
}
