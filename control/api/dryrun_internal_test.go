package api

import (
	"reflect"
	"testing"
)

// TestDeclaresDryRun: an operation input that reads ?dry_run itself, in a
// field of its own or of a struct it embeds, is found (register refuses
// it: the dryRun middleware owns the parameter), and the inputs of every
// write operation registered today are not.
func TestDeclaresDryRun(t *testing.T) {
	t.Parallel()
	type own struct {
		DryRun bool `query:"dry_run"`
	}
	type embedded struct {
		own
		Name string `path:"name"`
	}
	type other struct {
		Limit int `query:"limit,omitempty"`
	}
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		want bool
	}{
		{"own field", reflect.TypeFor[own](), true},
		{"embedded", reflect.TypeFor[*embedded](), true},
		{"other query", reflect.TypeFor[other](), false},
		{"apply input", reflect.TypeFor[applyInput](), false},
		{"no struct", reflect.TypeFor[int](), false},
	} {
		if got := declaresDryRun(tc.typ); got != tc.want {
			t.Errorf("%s: declaresDryRun = %v, want %v", tc.name, got, tc.want)
		}
	}
}
