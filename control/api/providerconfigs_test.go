package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/webhooksdk"
)

type providerConfig struct {
	Name        string         `json:"name"`
	Kind        string         `json:"kind"`
	KindVersion int            `json:"kind_version"`
	IsDefault   bool           `json:"is_default"`
	Spec        map[string]any `json:"spec"`
	Data        []byte         `json:"data"`
}

func TestProviderConfigs(t *testing.T) {
	t.Parallel()

	setupConfigs := func(t *testing.T) *testBundle {
		t.Helper()
		b := setup(t, api.Config{})
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		b.putManifest("vpc", fixture(t, "vpc-v2.kind.json")).wantApply(t, "created")
		// strict's config schema requires a field, so an empty spec fails.
		b.putManifest("strict", `{"kind":"strict","kind_version":1,"reactions":[],
			"config_schema":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}}`).wantApply(t, "created")
		return b
	}
	post := func(b *testBundle, body any) response {
		b.t.Helper()
		return b.do(http.MethodPost, "/api/v1/providerconfigs", body)
	}

	t.Run("ValidatedAgainstConfigSchema", func(t *testing.T) {
		t.Parallel()
		b := setupConfigs(t)
		p := post(b, `{"name":"c","kind":"vpc","kind_version":1,"spec":{"flow_logs_bucket":5}}`).
			wantProblem(t, http.StatusBadRequest, "body.spec.flow_logs_bucket")
		if e, _ := p.at("body.spec.flow_logs_bucket"); e.Keyword != "type" || e.Pointer != "/spec/flow_logs_bucket" {
			t.Errorf("error %+v", e)
		}
		// An empty spec validates as {}: a required field still fails.
		post(b, `{"name":"s","kind":"strict","kind_version":1}`).wantProblem(t, http.StatusBadRequest, "body.spec")
		post(b, `{"name":"s","kind":"strict","kind_version":1,"spec":{"url":"https://x"}}`).wantApply(t, "created")
		// An untyped-by-omission spec on vpc is fine.
		var c providerConfig
		post(b, `{"name":"e","kind":"vpc","kind_version":1}`).wantApply(t, "created").decode(t, &c)
		if c.Spec == nil || len(c.Spec) != 0 {
			t.Errorf("empty spec stored as %v, want {}", c.Spec)
		}
		post(b, `{"name":"bad name!","kind":"vpc","kind_version":1}`).wantProblem(t, http.StatusUnprocessableEntity, "body.name")
		if n := b.count(`SELECT count(*) FROM providerconfigs`); n != 2 {
			t.Errorf("%d configs, want 2", n)
		}
	})

	// The dispatcher merges every override onto its kind's default with
	// webhooksdk.MergeConfig before each delivery: a spec it would refuse
	// must never be stored, and one it takes must be stored exactly.
	t.Run("RefusesWhatTheMergeRefuses", func(t *testing.T) {
		t.Parallel()
		b := setupConfigs(t)
		b.putManifest("free", `{"kind":"free","kind_version":1,"reactions":[]}`).wantApply(t, "created")
		for i, spec := range []string{`[1,2]`, `[]`, `"x"`, `1`, `true`} {
			if webhooksdk.CheckConfigSpec(json.RawMessage(spec)) == nil {
				t.Fatalf("the SDK takes %s; pick another case", spec)
			}
			for _, def := range []bool{true, false} {
				body := fmt.Sprintf(`{"name":"bad-%d","kind":"free","kind_version":1,"is_default":%t,"spec":%s}`, i, def, spec)
				p := post(b, body).wantProblem(t, http.StatusBadRequest, "body.spec")
				if e, _ := p.at("body.spec"); e.Keyword != "type" || e.Pointer != "/spec" || !strings.Contains(e.Message, "object") {
					t.Errorf("spec %s: error %+v", spec, e)
				}
			}
		}
		if n := b.count(`SELECT count(*) FROM providerconfigs`); n != 0 {
			t.Errorf("%d configs stored, want none", n)
		}
		exact := `{"limits":{"max":9007199254740993,"ratio":0.1000000000000000055511151231257827},"tags":["a"]}`
		if err := webhooksdk.CheckConfigSpec(json.RawMessage(exact)); err != nil {
			t.Fatal(err)
		}
		post(b, `{"name":"ok","kind":"free","kind_version":1,"spec":`+exact+`}`).wantApply(t, "created")
		if got := b.do(http.MethodGet, "/api/v1/providerconfigs/ok", nil).want(t, http.StatusOK).body; !strings.Contains(string(got), "9007199254740993") ||
			!strings.Contains(string(got), "0.1000000000000000055511151231257827") {
			t.Errorf("stored spec lost digits: %s", got)
		}
	})

	t.Run("DataRoundTripsAsBase64", func(t *testing.T) {
		t.Parallel()
		b := setupConfigs(t)
		bundle := []byte("#!/bin/sh\necho \x00\xff binary")
		body := map[string]any{"name": "b", "kind": "vpc", "kind_version": 1, "data": bundle}
		post(b, body).wantApply(t, "created")
		var c providerConfig
		b.do(http.MethodGet, "/api/v1/providerconfigs/b", nil).want(t, http.StatusOK).decode(t, &c)
		if string(c.Data) != string(bundle) {
			t.Fatalf("data %q, want %q", c.Data, bundle)
		}
		post(b, body).wantApply(t, "unchanged")
		post(b, `{"name":"b","kind":"vpc","kind_version":1,"data":"not base64!"}`).wantProblem(t, http.StatusBadRequest, "body")
		if got := base64.StdEncoding.EncodeToString(bundle); !strings.Contains(string(b.do(http.MethodGet, "/api/v1/providerconfigs/b", nil).body), got) {
			t.Errorf("GET does not carry data as base64 %s", got)
		}
	})

	t.Run("MoveBetweenVersionsOnlyWhileUnreferenced", func(t *testing.T) {
		t.Parallel()
		b := setupConfigs(t)
		post(b, fixture(t, "providerconfig-vpc-v1-custom.json")).wantApply(t, "created")
		// Unreferenced: it may move to v2 (validated against v2's schema).
		post(b, `{"name":"vpc-v1-payments","kind":"vpc","kind_version":2,"spec":{"default_region":"x"}}`).wantApply(t, "configured")
		post(b, fixture(t, "providerconfig-vpc-v1-custom.json")).wantApply(t, "configured")
		b.apply(fixture(t, "resource-vpc-v1-with-custom.json")).wantApply(t, "created")
		p := post(b, `{"name":"vpc-v1-payments","kind":"vpc","kind_version":2}`).wantProblem(t, http.StatusConflict, "")
		if !strings.Contains(p.Detail, "sample-vpc-v1-payments") {
			t.Errorf("detail %q does not name the referencing resource", p.Detail)
		}
		var c providerConfig
		b.do(http.MethodGet, "/api/v1/providerconfigs/vpc-v1-payments", nil).want(t, http.StatusOK).decode(t, &c)
		if c.KindVersion != 1 {
			t.Fatalf("refused move changed the config: %+v", c)
		}
	})

	t.Run("DeleteRefusedWhileReferenced", func(t *testing.T) {
		t.Parallel()
		b := setupConfigs(t)
		post(b, fixture(t, "providerconfig-vpc-v1-custom.json")).wantApply(t, "created")
		b.apply(fixture(t, "resource-vpc-v1-with-custom.json")).wantApply(t, "created")
		b.do(http.MethodDelete, "/api/v1/providerconfigs/vpc-v1-payments", nil).wantProblem(t, http.StatusConflict, "")
		// Detach, then delete.
		b.apply(strings.Replace(string(fixture(t, "resource-vpc-v1-with-custom.json")), `"provider_config_ref": "vpc-v1-payments",`, "", 1)).
			wantApply(t, "configured")
		b.do(http.MethodDelete, "/api/v1/providerconfigs/vpc-v1-payments", nil).want(t, http.StatusNoContent)
		b.do(http.MethodGet, "/api/v1/providerconfigs/vpc-v1-payments", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodDelete, "/api/v1/providerconfigs/vpc-v1-payments", nil).wantProblem(t, http.StatusNotFound, "")
		b.apply(fixture(t, "resource-vpc-v1-with-custom.json")).wantProblem(t, http.StatusNotFound, "body.provider_config_ref")
	})

	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		b := setupConfigs(t)
		for _, f := range []string{"providerconfig-vpc-v1-default.json", "providerconfig-vpc-v2-default.json",
			"providerconfig-vpc-v1-custom.json", "providerconfig-vpc-v2-custom.json"} {
			post(b, fixture(t, f)).wantApply(t, "created")
		}
		post(b, `{"name":"s","kind":"strict","kind_version":1,"spec":{"url":"u"}}`).wantApply(t, "created")
		for _, tc := range []struct {
			query string
			want  []string
		}{
			{"", []string{"s", "vpc-v1-default", "vpc-v1-payments", "vpc-v2-default", "vpc-v2-payments"}},
			{"kind=vpc&kind_version=2", []string{"vpc-v2-default", "vpc-v2-payments"}},
			{"kind=vpc&default=true", []string{"vpc-v1-default", "vpc-v2-default"}},
			{"default=false", []string{"s", "vpc-v1-payments", "vpc-v2-payments"}},
		} {
			var l struct {
				Items []providerConfig `json:"items"`
			}
			b.do(http.MethodGet, "/api/v1/providerconfigs?"+tc.query, nil).want(t, http.StatusOK).decode(t, &l)
			var got []string
			for _, c := range l.Items {
				got = append(got, c.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("?%s gave %v, want %v", tc.query, got, tc.want)
			}
		}
		// Pages by name.
		var page struct {
			Items      []providerConfig `json:"items"`
			NextCursor string           `json:"next_cursor"`
		}
		b.do(http.MethodGet, "/api/v1/providerconfigs?limit=2", nil).want(t, http.StatusOK).decode(t, &page)
		if len(page.Items) != 2 || page.NextCursor == "" {
			t.Fatalf("first page %+v", page)
		}
		b.do(http.MethodGet, "/api/v1/providerconfigs?limit=2&cursor="+page.NextCursor, nil).want(t, http.StatusOK).decode(t, &page)
		if len(page.Items) != 2 || page.Items[0].Name != "vpc-v1-payments" {
			t.Fatalf("second page %+v", page)
		}
		b.do(http.MethodGet, "/api/v1/providerconfigs?default=maybe", nil).wantProblem(t, http.StatusUnprocessableEntity, "query.default")
	})
}
