package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func kindsOf(t *testing.T, vars map[string]string) []string {
	t.Helper()
	got, err := selectKinds(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.provider.Kind().String())
	}
	return names
}

func TestSelectKinds(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want []string
	}{
		{nil, []string{"stdio/v1", "stdio-composer/v1", "stdshell/v1", "stdcel/v1", "stdstarlark/v1", "stdterraform/v1"}},
		{map[string]string{"STD_KINDS": "stdshell"}, []string{"stdshell/v1"}},
		{map[string]string{"STD_KINDS": "stdio, stdio-composer", "STDIO_KINDS": "backups,dns", "STDIO_COMPOSER_KINDS": "app-bom"},
			[]string{"backups/v1", "dns/v1", "app-bom/v1"}},
	} {
		if got := kindsOf(t, tc.vars); !slices.Equal(got, tc.want) {
			t.Errorf("%v: kinds = %v, want %v", tc.vars, got, tc.want)
		}
	}
}

func TestSelectKindsRefuses(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"STD_KINDS": "stdio,stdcobol"}, `STD_KINDS: unknown provider "stdcobol"`},
		{map[string]string{"STDIO_KINDS": "dns", "STDIO_COMPOSER_KINDS": "dns"}, `"dns" is in both`},
		{map[string]string{"STDIO_KINDS": "stdshell"}, `"stdshell" is served twice`},
	} {
		if _, err := selectKinds(env(tc.vars)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.vars, err, tc.want)
		}
	}
}

func TestManifestsPrintsOneDocumentPerKind(t *testing.T) {
	var out bytes.Buffer
	if err := printManifests(&out, env(map[string]string{"STDIO_KINDS": "backups"})); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	var kinds []string
	for {
		var m struct {
			Kind        string            `json:"kind"`
			KindVersion int               `json:"kind_version"`
			Reactions   []json.RawMessage `json:"reactions"`
		}
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || m.KindVersion != 1 || len(m.Reactions) == 0 {
			t.Fatalf("document %d: %+v, %v", len(kinds), m, err)
		}
		kinds = append(kinds, m.Kind)
	}
	if want := []string{"backups", "stdio-composer", "stdshell", "stdcel", "stdstarlark", "stdterraform"}; !slices.Equal(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
}

func TestRunNeedsSecrets(t *testing.T) {
	if err := run(t.Context(), nil, env(nil)); err == nil || !strings.Contains(err.Error(), "PROVIDER_SECRETS") {
		t.Fatalf("err = %v", err)
	}
}
