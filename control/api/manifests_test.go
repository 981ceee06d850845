package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// mustGet GETs path and returns its members raw.
func mustGet(t *testing.T, b *testBundle, path string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	b.do(http.MethodGet, path, nil).want(t, http.StatusOK).decode(t, &m)
	return m
}

func TestManifests(t *testing.T) {
	t.Parallel()

	t.Run("PublishRepublishUnchangedConfigured", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		r := b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		m := r.object(t)
		if m["kind"] != "vpc" || m["kind_version"] != float64(1) {
			t.Fatalf("answer is not the stored manifest: %s", r.body)
		}
		// The same document again, and the stored form of it: both no-ops.
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "unchanged")
		b.putManifest("vpc", r.body).wantApply(t, "unchanged")
		// Whitespace, key order and number spelling do not matter.
		var doc map[string]any
		if err := json.Unmarshal(fixture(t, "vpc.kind.json"), &doc); err != nil {
			t.Fatal(err)
		}
		doc["spec_schema"].(map[string]any)["properties"].(map[string]any)["account_id"].(map[string]any)["maxLength"] = json.Number("12.0")
		reordered, err := json.MarshalIndent(doc, "", "      ")
		if err != nil {
			t.Fatal(err)
		}
		b.putManifest("vpc", reordered).wantApply(t, "unchanged")
		// An additive change and a status-schema change are allowed in place.
		b.putManifest("vpc", fixture(t, "vpc-v1-additive.json")).wantApply(t, "configured")
		doc["status_schema"] = map[string]any{"type": "object", "properties": map[string]any{"vpc_id": map[string]any{"type": "integer"}}}
		doc["spec_schema"] = json.RawMessage(mustGet(t, b, "/api/v1/kinds/vpc/versions/1/schema")["spec_schema"])
		retyped, _ := json.Marshal(doc)
		b.putManifest("vpc", retyped).wantApply(t, "configured")
	})

	t.Run("KindFromPathAndMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("noop", `{"kind_version":1,"reactions":[]}`).wantApply(t, "created")
		b.do(http.MethodGet, "/api/v1/kinds/noop/versions/1/manifest", nil).want(t, http.StatusOK)
		p := b.putManifest("other", `{"kind":"noop","kind_version":2,"reactions":[]}`).wantProblem(t, http.StatusUnprocessableEntity, "body.kind")
		if !strings.Contains(p.Detail, "path") {
			t.Errorf("detail %q does not explain the mismatch", p.Detail)
		}
		b.putManifest("Bad_Kind", `{"kind_version":1,"reactions":[]}`).wantProblem(t, http.StatusUnprocessableEntity, "path.kind")
		b.do(http.MethodGet, "/api/v1/kinds/noop/versions/2/manifest", nil).wantProblem(t, http.StatusNotFound, "")
	})

	t.Run("BadSchemaNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		p := b.putManifest("bad", `{"kind":"bad","kind_version":1,"reactions":[],"spec_schema":{"type":"objekt"}}`).
			wantProblem(t, http.StatusUnprocessableEntity, "body.spec_schema")
		_ = p
		b.putManifest("bad", `{"kind":"bad","kind_version":1,"reactions":[],"config_schema":{"$ref":"https://evil.example/s.json"}}`).
			wantProblem(t, http.StatusUnprocessableEntity, "body.config_schema")
		b.do(http.MethodGet, "/api/v1/kinds/bad/versions/1/manifest", nil).want(t, http.StatusNotFound)
	})

	t.Run("ListKindsSchemaAndFilter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		b.putManifest("vpc", fixture(t, "vpc-v2.kind.json")).wantApply(t, "created")
		b.putManifest("account", fixture(t, "account.kind.json")).wantApply(t, "created")

		var list struct {
			Items []struct {
				Kind        string `json:"kind"`
				KindVersion int    `json:"kind_version"`
			} `json:"items"`
		}
		b.do(http.MethodGet, "/api/v1/manifests", nil).want(t, http.StatusOK).decode(t, &list)
		if len(list.Items) != 3 || list.Items[0].Kind != "account" || list.Items[2].KindVersion != 2 {
			t.Fatalf("manifests %+v, want account/1, vpc/1, vpc/2", list.Items)
		}
		b.do(http.MethodGet, "/api/v1/manifests?kind=vpc", nil).want(t, http.StatusOK).decode(t, &list)
		if len(list.Items) != 2 {
			t.Fatalf("?kind=vpc gave %d manifests, want 2", len(list.Items))
		}

		var kinds struct {
			Items []struct {
				Kind     string `json:"kind"`
				Versions []int  `json:"versions"`
			} `json:"items"`
		}
		b.do(http.MethodGet, "/api/v1/kinds", nil).want(t, http.StatusOK).decode(t, &kinds)
		if len(kinds.Items) != 2 || kinds.Items[1].Kind != "vpc" || len(kinds.Items[1].Versions) != 2 {
			t.Fatalf("kinds %+v", kinds.Items)
		}

		s := b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/2/schema", nil).want(t, http.StatusOK).object(t)
		spec, _ := s["spec_schema"].(map[string]any)
		if req, _ := spec["required"].([]any); len(req) != 3 {
			t.Fatalf("vpc/2 spec_schema required %v, want 3 fields", spec["required"])
		}
		b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/3/schema", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/0/schema", nil).wantProblem(t, http.StatusUnprocessableEntity, "path.version")
		b.do(http.MethodGet, "/api/v1/manifests?kinnd=vpc", nil).wantProblem(t, http.StatusUnprocessableEntity, "query.kinnd")
	})

	t.Run("KindConfigSeededEditableNeverClobbered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		c := b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/1/config", nil).want(t, http.StatusOK).object(t)
		if c["max_inflight"] != float64(50) || c["task_deadline_secs"] != float64(120) {
			t.Fatalf("config not seeded from the manifest policy: %v", c)
		}
		put := `{"max_inflight":7,"task_deadline_secs":30,"resync_interval_secs":0,"resync_recomposes":false,"orphan_grace_secs":5,"max_transient_attempts":3}`
		b.do(http.MethodPut, "/api/v1/kinds/vpc/versions/1/config", put).wantApply(t, "configured")
		b.do(http.MethodPut, "/api/v1/kinds/vpc/versions/1/config", put).wantApply(t, "unchanged")
		// Republishing the manifest (an additive change) leaves the live config alone.
		b.putManifest("vpc", fixture(t, "vpc-v1-additive.json")).wantApply(t, "configured")
		c = b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/1/config", nil).want(t, http.StatusOK).object(t)
		if c["max_inflight"] != float64(7) || c["orphan_grace_secs"] != float64(5) {
			t.Fatalf("republish clobbered the config: %v", c)
		}
		p := b.do(http.MethodPut, "/api/v1/kinds/vpc/versions/1/config", `{"max_inflight":-1}`).
			wantProblem(t, http.StatusUnprocessableEntity, "body.max_inflight")
		if e, _ := p.at("body.max_inflight"); e.Value != float64(-1) {
			t.Errorf("value %v, want -1 echoed", e.Value)
		}
		b.do(http.MethodPut, "/api/v1/kinds/vpc/versions/1/config", `{"task_deadline_seconds":30}`).
			wantProblem(t, http.StatusBadRequest, "body")
		b.do(http.MethodPut, "/api/v1/kinds/vpc/versions/9/config", put).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodPut, "/api/v1/kinds/vpc/versions/1/config", `{"kind":"vpc","kind_version":2}`).
			wantProblem(t, http.StatusUnprocessableEntity, "body.kind_version")
		b.do(http.MethodGet, "/api/v1/kinds/nope/versions/1/config", nil).wantProblem(t, http.StatusNotFound, "")
	})

	t.Run("DeleteBlockedWhileInUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		b.do(http.MethodPost, "/api/v1/resources", fixture(t, "resource-vpc-v1-tagged.json")).wantApply(t, "created")
		p := b.do(http.MethodDelete, "/api/v1/kinds/vpc/versions/1/manifest", nil).wantProblem(t, http.StatusConflict, "")
		if !strings.Contains(p.Detail, "sample-vpc-tagged") {
			t.Errorf("detail %q does not name the blocking resource", p.Detail)
		}
		b.exec(`DELETE FROM resources`)
		b.do(http.MethodPost, "/api/v1/providerconfigs", fixture(t, "providerconfig-vpc-v1-default.json")).wantApply(t, "created")
		p = b.do(http.MethodDelete, "/api/v1/kinds/vpc/versions/1/manifest", nil).wantProblem(t, http.StatusConflict, "")
		if !strings.Contains(p.Detail, "vpc-v1-default") {
			t.Errorf("detail %q does not name the blocking config", p.Detail)
		}
		b.do(http.MethodDelete, "/api/v1/providerconfigs/vpc-v1-default", nil).want(t, http.StatusNoContent)
		b.do(http.MethodDelete, "/api/v1/kinds/vpc/versions/1/manifest", nil).want(t, http.StatusNoContent)
		b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/1/manifest", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodGet, "/api/v1/kinds/vpc/versions/1/config", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodDelete, "/api/v1/kinds/vpc/versions/1/manifest", nil).wantProblem(t, http.StatusNotFound, "")
	})

	t.Run("ConcurrentPublishesSerialize", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			results = map[string]int{}
		)
		for range 8 {
			wg.Go(func() {
				r := b.putManifest("vpc", fixture(t, "vpc.kind.json"))
				mu.Lock()
				results[r.header.Get("X-Apply-Result")]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if results["created"] != 1 || results["unchanged"] != 7 {
			t.Fatalf("results %v, want 1 created and 7 unchanged", results)
		}
	})
}
