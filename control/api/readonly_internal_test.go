package api

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// TestReadOnlyFields pins the read-only lists of readonly.go: for every
// object type conctl gets and applies, each field its GET answer can hold
// is either one its apply takes or one its apply ignores, the two sets do
// not overlap (encoding/json would then drop both), and the ignored ones
// are all fields of the GET answer. A field added to a GET answer fails
// here until it is classified. TestApplyTakesItsGet and conctl's
// TestRoundTrip apply real GET answers back.
func TestReadOnlyFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		get      any // the GET answer's type
		apply    any // what the apply takes
		readOnly any // what the apply ignores; nil for nothing
	}{
		{"resource", ResourceView{}, ResourceApply{}, resourceReadOnly{}},
		{"manifest", model.KindManifest{}, manifestBody{}, nil},
		{"kindconfig", store.KindConfig{}, KindConfigPut{}, kindConfigReadOnly{}},
		{"providerconfig", store.ProviderConfig{}, ProviderConfigApply{}, providerConfigReadOnly{}},
		{"reactorbinding", store.ReactorBinding{}, ReactorBindingApply{}, bindingReadOnly{}},
		{"endpoint", EndpointView{}, EndpointApply{}, endpointReadOnly{}},
		{"alertsink", AlertSinkView{}, AlertSinkApply{}, bindingReadOnly{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			get, apply := jsonFields(reflect.TypeOf(tc.get)), jsonFields(reflect.TypeOf(tc.apply))
			var ro []string
			if tc.readOnly != nil {
				ro = jsonFields(reflect.TypeOf(tc.readOnly))
			}
			var unclassified, stale, both []string
			for _, f := range get {
				if !slices.Contains(apply, f) && !slices.Contains(ro, f) {
					unclassified = append(unclassified, f)
				}
			}
			for _, f := range ro {
				if !slices.Contains(get, f) {
					stale = append(stale, f)
				}
				if slices.Contains(apply, f) {
					both = append(both, f)
				}
			}
			if diff := cmp.Diff([]string(nil), unclassified); diff != "" {
				t.Errorf("GET fields neither applied nor ignored (add each to the apply or to its read-only list) (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string(nil), stale); diff != "" {
				t.Errorf("read-only fields no GET returns (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string(nil), both); diff != "" {
				t.Errorf("fields both applied and ignored (-want +got):\n%s", diff)
			}
		})
	}
}

// jsonFields lists the top-level JSON field names encoding/json gives a
// struct type, following embedded structs as it does.
func jsonFields(t reflect.Type) []string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			if ft := f.Type; ft.Kind() == reflect.Struct || (ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct) {
				for _, n := range jsonFields(ft) {
					if !slices.Contains(out, n) {
						out = append(out, n)
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		name := tag
		if name == "" {
			name = f.Name
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
