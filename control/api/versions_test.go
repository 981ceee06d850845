package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// version reads an answer's ETag and checks it names the body's
// resource_version.
func (r response) version(t *testing.T) int64 {
	t.Helper()
	tag := r.header.Get("ETag")
	v, err := strconv.ParseInt(strings.Trim(tag, `"`), 10, 64)
	if err != nil || tag != strconv.Quote(strconv.FormatInt(v, 10)) {
		t.Fatalf("ETag %q, want a quoted resource_version", tag)
	}
	var body struct {
		ResourceVersion int64 `json:"resource_version"`
	}
	r.decode(t, &body)
	if body.ResourceVersion != v {
		t.Fatalf("ETag %s but body.resource_version %d", tag, body.ResourceVersion)
	}
	return v
}

func ifMatch(v int64) string { return fmt.Sprintf(`If-Match: "%d"`, v) }

// TestResourceVersions is the HTTP contract of optimistic concurrency on a
// resource: the ETag of every read and write, 412 for a stale If-Match, 409
// for a stale resource_version in the body, and nothing written by either.
func TestResourceVersions(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	apply := func(image string, hdr ...string) response {
		t.Helper()
		return b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"`+image+`"}}`, hdr...)
	}
	const get = "/api/v1/resources/widget/w"

	v1 := apply("a:1").wantApply(t, "created").version(t)
	if v := b.do(http.MethodGet, get, nil).want(t, http.StatusOK).version(t); v != v1 {
		t.Fatalf("GET at v%d, the apply answered v%d", v, v1)
	}
	if v := apply("a:1", ifMatch(v1)).wantApply(t, "unchanged").version(t); v != v1 {
		t.Fatalf("an unchanged re-apply moved the version: v%d -> v%d", v1, v)
	}
	v2 := apply("a:2", ifMatch(v1)).wantApply(t, "configured").version(t)
	if v2 <= v1 {
		t.Fatalf("a change kept the version: v%d -> v%d", v1, v2)
	}
	events := b.count(`SELECT count(*) FROM resource_events`)

	t.Run("a stale If-Match is 412 and writes nothing", func(t *testing.T) {
		r := apply("a:3", ifMatch(v1))
		p := r.wantProblem(t, http.StatusPreconditionFailed, "header.If-Match")
		if p.Type != "urn:converge:problem:precondition-failed" || r.header.Get("ETag") != strconv.Quote(strconv.FormatInt(v2, 10)) {
			t.Fatalf("problem %+v with ETag %q, want precondition-failed naming v%d", p, r.header.Get("ETag"), v2)
		}
		if got := b.do(http.MethodGet, get, nil).object(t)["spec"].(map[string]any)["image"]; got != "a:2" {
			t.Fatalf("image %v after a refused apply", got)
		}
		if n := b.count(`SELECT count(*) FROM resource_events`); n != events {
			t.Fatalf("the refused apply logged %d events", n-events)
		}
	})
	t.Run("a stale resource_version in the body is 409", func(t *testing.T) {
		p := b.do(http.MethodPost, "/api/v1/resources",
			fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a:3"},"resource_version":%d}`, v1)).
			wantProblem(t, http.StatusConflict, "body.resource_version")
		if p.Type != "urn:converge:problem:version-conflict" {
			t.Fatalf("type %q", p.Type)
		}
	})
	t.Run("If-Match forms", func(t *testing.T) {
		for _, tc := range []struct {
			name, header string
			status       int
		}{
			{"a list naming the current version", fmt.Sprintf(`If-Match: "%d", "%d"`, v1, v2), http.StatusOK},
			{"any version", `If-Match: *`, http.StatusOK},
			{"a weak tag never matches", fmt.Sprintf(`If-Match: W/"%d"`, v2), http.StatusPreconditionFailed},
			{"a tag this server never issued", `If-Match: "abc"`, http.StatusPreconditionFailed},
			{"not an entity tag", `If-Match: 42`, http.StatusBadRequest},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := apply("a:2", tc.header)
				if tc.status == http.StatusOK {
					r.wantApply(t, "unchanged")
					return
				}
				r.wantProblem(t, tc.status, "header.If-Match")
			})
		}
		b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"nope","spec":{"image":"x"}}`, `If-Match: *`).
			wantProblem(t, http.StatusPreconditionFailed, "header.If-Match")
		b.do(http.MethodGet, "/api/v1/resources/widget/nope", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodPost, "/api/v1/resources",
			fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a:2"},"resource_version":%d}`, v1), ifMatch(v2)).
			wantProblem(t, http.StatusBadRequest, "body.resource_version")
		b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a:2"},"resource_version":-1}`).
			wantProblem(t, http.StatusUnprocessableEntity, "body.resource_version")
	})
	t.Run("delete", func(t *testing.T) {
		b.do(http.MethodDelete, get, nil, ifMatch(v1)).wantProblem(t, http.StatusPreconditionFailed, "header.If-Match")
		if ph := b.do(http.MethodGet, get, nil).object(t)["phase"]; ph == "Deleting" {
			t.Fatal("a refused delete marked the resource")
		}
		// widget has a finalizer: the mark is a write, with a new version.
		if v := b.do(http.MethodDelete, get, nil, ifMatch(v2)).want(t, http.StatusAccepted).version(t); v <= v2 {
			t.Fatalf("marked at v%d, want past v%d", v, v2)
		}
	})
}

// TestConcurrentAppliesOneWins: two clients that read the same version and
// apply their changes at once, each with If-Match; one lands, the other is
// told (412), and no change is silently lost.
func TestConcurrentAppliesOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	v := b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"base"}}`).
		wantApply(t, "created").version(t)
	for round := range 5 {
		var (
			wg     sync.WaitGroup
			status [2]int
			gate   = make(chan struct{})
		)
		for w := range status {
			wg.Go(func() {
				<-gate
				status[w] = b.do(http.MethodPost, "/api/v1/resources",
					fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"r%d-w%d"}}`, round, w), ifMatch(v)).status
			})
		}
		close(gate)
		wg.Wait()
		if one, other := min(status[0], status[1]), max(status[0], status[1]); one != http.StatusOK || other != http.StatusPreconditionFailed {
			t.Fatalf("round %d: statuses %v, want one 200 and one 412", round, status)
		}
		v = b.do(http.MethodGet, "/api/v1/resources/widget/w", nil).want(t, http.StatusOK).version(t)
	}
}

// TestObjectVersionsHTTP: kind configs, provider configs, reactor bindings
// and endpoints answer with their ETag and refuse stale writes and deletes.
func TestObjectVersionsHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Endpoints: endpointsConfig(t)})
	b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
	b.putManifest("statussink", fixture(t, "statussink.kind.json")).wantApply(t, "created")

	for _, tc := range []struct {
		name, path, method, get, del string
		body                         func(change int, version int64) string
	}{
		{name: "kind config", method: http.MethodPut, path: "/api/v1/kinds/vpc/versions/1/config", get: "/api/v1/kinds/vpc/versions/1/config",
			body: func(n int, v int64) string { return fmt.Sprintf(`{"max_inflight":%d%s}`, n, versionMember(v)) }},
		{name: "provider config", method: http.MethodPost, path: "/api/v1/providerconfigs", get: "/api/v1/providerconfigs/pc",
			del: "/api/v1/providerconfigs/pc",
			body: func(n int, v int64) string {
				return fmt.Sprintf(`{"name":"pc","kind":"vpc","kind_version":1,"spec":{"flow_logs_bucket":"s3://b%d"}%s}`, n, versionMember(v))
			}},
		{name: "reactor binding", method: http.MethodPost, path: "/api/v1/reactor-bindings", get: "/api/v1/reactor-bindings/rb",
			del: "/api/v1/reactor-bindings/rb",
			body: func(n int, v int64) string {
				return fmt.Sprintf(`{"name":"rb","watch_kind":"vpc","transition":"synced","reactor":"statussink","label_match":{"n":"%d"}%s}`, n, versionMember(v))
			}},
		{name: "endpoint", method: http.MethodPost, path: "/api/v1/endpoints", get: "/api/v1/endpoints/ep", del: "/api/v1/endpoints/ep",
			body: func(n int, v int64) string {
				return fmt.Sprintf(`{"name":"ep","kinds":[{"kind":"vpc","kind_version":1}],"target":{"type":"https","url":"https://p.example/%d"}%s}`, n, versionMember(v))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := b.do(tc.method, tc.path, tc.body(1, 0))
			if first.status != http.StatusOK && first.status != http.StatusCreated {
				t.Fatalf("first write: %d %s", first.status, first.body)
			}
			v1 := first.version(t)
			if v := b.do(http.MethodGet, tc.get, nil).want(t, http.StatusOK).version(t); v != v1 {
				t.Fatalf("GET at v%d, the write answered v%d", v, v1)
			}
			v2 := b.do(tc.method, tc.path, tc.body(2, v1)).wantApply(t, "configured").version(t)
			b.do(tc.method, tc.path, tc.body(3, v1)).wantProblem(t, http.StatusConflict, "body.resource_version")
			b.do(tc.method, tc.path, tc.body(3, 0), ifMatch(v1)).wantProblem(t, http.StatusPreconditionFailed, "header.If-Match")
			if v := b.do(http.MethodGet, tc.get, nil).want(t, http.StatusOK).version(t); v != v2 {
				t.Fatalf("a refused write moved the version: v%d, want v%d", v, v2)
			}
			if tc.del == "" {
				return
			}
			b.do(http.MethodDelete, tc.del, nil, ifMatch(v1)).wantProblem(t, http.StatusPreconditionFailed, "header.If-Match")
			b.do(http.MethodDelete, tc.del, nil, ifMatch(v2)).want(t, http.StatusNoContent)
		})
	}
}

// versionMember is the resource_version member of a body, or nothing for 0.
func versionMember(v int64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(`,"resource_version":%d`, v)
}

// TestBatchItemVersions: a batch item with a stale resource_version is
// refused alone, located at items[i].resource_version.
func TestBatchItemVersions(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	v := b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"a","spec":{"image":"x"}}`).
		wantApply(t, "created").version(t)
	b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"a","spec":{"image":"y"}}`).wantApply(t, "configured")
	var got struct {
		Results []struct {
			Result          string         `json:"result"`
			ResourceVersion int64          `json:"resource_version"`
			Errors          []problemError `json:"errors"`
		} `json:"results"`
	}
	b.do(http.MethodPost, "/api/v1/resources:batch", fmt.Sprintf(`{"items":[
		{"kind":"widget","kind_version":1,"name":"a","spec":{"image":"z"},"resource_version":%d},
		{"kind":"widget","kind_version":1,"name":"b","spec":{"image":"z"}}]}`, v)).want(t, http.StatusOK).decode(t, &got)
	if got.Results[0].Result != "invalid" || len(got.Results[0].Errors) != 1 || got.Results[0].Errors[0].Location != "items[0].resource_version" ||
		got.Results[1].Result != "created" || got.Results[1].ResourceVersion < 1 {
		t.Fatalf("results %+v", got.Results)
	}
}
