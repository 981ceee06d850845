package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPrintObjects checks what `quickstart-provider objects` gives
// `converge dev --demo`: the kinds this provider serves, leaves before the
// composite, and a site to apply.
func TestPrintObjects(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := printObjects(&buf); err != nil {
		t.Fatal(err)
	}
	var o Objects
	if err := json.Unmarshal(buf.Bytes(), &o); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.Bytes())
	}
	type ref struct {
		Kind        string `json:"kind"`
		KindVersion int    `json:"kind_version"`
		Name        string `json:"name,omitempty"`
	}
	refs := func(raws []json.RawMessage) []ref {
		var out []ref
		for _, r := range raws {
			var x ref
			if err := json.Unmarshal(r, &x); err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	}
	if diff := cmp.Diff([]ref{{"bucket", 1, ""}, {"cdn", 1, ""}, {"site", 1, ""}}, refs(o.Manifests)); diff != "" {
		t.Errorf("manifests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]ref{{"site", 1, "shop"}}, refs(o.Resources)); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}
