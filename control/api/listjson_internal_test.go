package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// TestWriteItems: a list page written item by item is byte for byte what
// huma's JSON format writes for it in one piece.
func TestWriteItems(t *testing.T) {
	t.Parallel()
	r := model.Resource{CreatedAt: time.Unix(1, 0).UTC(), UpdatedAt: time.Unix(2, 0).UTC()}
	r.ID, r.Kind, r.KindVersion, r.Name, r.Phase = "6b0c3a3e-8b0f-4b39-9d3a-6f1d3a2b9c10", "vpc", 1, "a<b>&c", "Ready"
	r.Labels = map[string]string{"team": "ü & <x>"}
	withDocs := ListedResource{Resource: r, Spec: json.RawMessage(`{"html":"<a href=\"x\">&</a>","n":1}`), Status: json.RawMessage(`{"ok":true}`)}
	for _, tc := range []struct {
		name string
		body itemsWriter
	}{
		{"Empty", ResourceList{Items: []ListedResource{}}},
		{"ResourcesWithCursor", ResourceList{Items: []ListedResource{withDocs, {Resource: r}}, NextCursor: "MTc.abc_-"}},
		{"Children", ChildList{Items: []ListedResource{{Resource: r}, withDocs}}},
		{"ProviderConfigs", ProviderConfigList{Items: []store.ProviderConfig{{Name: "p", Kind: "vpc", KindVersion: 1,
			Spec: json.RawMessage(`{"k":"<v>"}`), Data: []byte{0, 1, 2}}}, NextCursor: "cA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want, got bytes.Buffer
			if err := huma.DefaultJSONFormat.Marshal(&want, tc.body); err != nil {
				t.Fatal(err)
			}
			if err := jsonFormat().Marshal(&got, tc.body); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.String(), got.String()); diff != "" {
				t.Errorf("written item by item (-want +got):\n%s", diff)
			}
		})
	}
}
