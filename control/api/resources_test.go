package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// resource is the decoded resource answer.
type resource struct {
	ID                string            `json:"id"`
	Kind              string            `json:"kind"`
	KindVersion       int               `json:"kind_version"`
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels"`
	Spec              map[string]any    `json:"spec"`
	ProviderConfigRef string            `json:"provider_config_ref"`
	OwnerID           string            `json:"owner_id"`
	Generation        int64             `json:"generation"`
	Phase             string            `json:"phase"`
	Conditions        []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"conditions"`
}

type resourceList struct {
	Items      []resource `json:"items"`
	NextCursor string     `json:"next_cursor"`
}

func (b *testBundle) apply(body any) response {
	b.t.Helper()
	return b.do(http.MethodPost, "/api/v1/resources", body)
}

func (b *testBundle) get(t *testing.T, kind, name string) resource {
	t.Helper()
	var r resource
	b.do(http.MethodGet, "/api/v1/resources/"+kind+"/"+name, nil).want(t, http.StatusOK).decode(t, &r)
	return r
}

func TestApplyResource(t *testing.T) {
	t.Parallel()

	setupWidget := func(t *testing.T) *testBundle {
		t.Helper()
		b := setup(t, api.Config{})
		b.putManifest("widget", widgetKind).wantApply(t, "created")
		return b
	}

	t.Run("CreatedConfiguredUnchanged", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t)
		var first resource
		b.apply(`{"kind":"widget","kind_version":1,"name":"w1","labels":{"team":"a"},"spec":{"image":"nginx","replicas":2}}`).
			wantApply(t, "created").decode(t, &first)
		if first.ID == "" || first.Generation != 1 || first.Phase != "Reconciling" {
			t.Fatalf("created resource %+v", first)
		}
		// Byte-different, JSON-equal: no write, no generation bump.
		var again resource
		b.apply("{ \"spec\": {\"replicas\": 2.0, \"image\" : \"nginx\"}, \"name\":\"w1\", \"kind_version\":1, \"kind\":\"widget\",\n \"labels\":{\"team\":\"a\"} }").
			wantApply(t, "unchanged").decode(t, &again)
		if again.ID != first.ID || again.Generation != 1 {
			t.Fatalf("unchanged apply moved the resource: %+v", again)
		}
		// A label change is configured but not a new generation.
		var relabeled resource
		b.apply(`{"kind":"widget","kind_version":1,"name":"w1","labels":{"team":"b"},"spec":{"image":"nginx","replicas":2}}`).
			wantApply(t, "configured").decode(t, &relabeled)
		if relabeled.Generation != 1 || relabeled.Labels["team"] != "b" {
			t.Fatalf("label change: %+v", relabeled)
		}
		// A spec change is a new generation.
		var changed resource
		b.apply(`{"kind":"widget","kind_version":1,"name":"w1","labels":{"team":"b"},"spec":{"image":"nginx","replicas":3}}`).
			wantApply(t, "configured").decode(t, &changed)
		if changed.ID != first.ID || changed.Generation != 2 {
			t.Fatalf("spec change: %+v", changed)
		}
		if n := b.count(`SELECT count(*) FROM resource_events WHERE resource_id = $1 AND type = 'applied'`, first.ID); n != 3 {
			t.Errorf("%d applied events, want 3 (created, configured, configured)", n)
		}
		// The apply scheduled it: a reconcile task is queued.
		if n := b.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND generation = 2`, first.ID); n != 1 {
			t.Errorf("%d queued tasks at generation 2, want 1", n)
		}
	})

	t.Run("VersionFlipKeepsIDAndIsRefusedWhenInvalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
		b.putManifest("vpc", fixture(t, "vpc-v2.kind.json")).wantApply(t, "created")
		var v1 resource
		b.apply(fixture(t, "resource-vpc-v1-tagged.json")).wantApply(t, "created").decode(t, &v1)

		p := b.apply(fixture(t, "resource-vpc-flip-to-v2-incomplete.json")).wantProblem(t, http.StatusBadRequest, "body.spec")
		if e, _ := p.at("body.spec"); e.Keyword != "required" || e.Pointer != "/spec" {
			t.Errorf("flip refusal error %+v, want required at /spec", e)
		}
		if got := b.get(t, "vpc", "sample-vpc-tagged"); got.KindVersion != 1 || got.Generation != 1 {
			t.Fatalf("refused flip changed the resource: %+v", got)
		}

		var v2 resource
		b.apply(fixture(t, "resource-vpc-flip-to-v2.json")).wantApply(t, "configured").decode(t, &v2)
		if v2.ID != v1.ID || v2.KindVersion != 2 || v2.Generation != 2 || v2.Spec["region"] != "us-west-2" {
			t.Fatalf("flip: %+v, want same id %s at v2, generation 2", v2, v1.ID)
		}
	})

	t.Run("GetHasPhaseAndConditions", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t)
		var r resource
		b.apply(`{"kind":"widget","kind_version":1,"name":"w1","spec":{"image":"x"}}`).wantApply(t, "created").decode(t, &r)
		b.exec(`INSERT INTO resource_conditions (resource_id, type, status, reason) VALUES ($1, 'Ready', 'False', 'Waiting')`, r.ID)
		got := b.get(t, "widget", "w1")
		if got.Phase != "Reconciling" || len(got.Conditions) != 1 || got.Conditions[0].Reason != "Waiting" {
			t.Fatalf("get: %+v", got)
		}
		b.do(http.MethodGet, "/api/v1/resources/widget/nope", nil).wantProblem(t, http.StatusNotFound, "")
	})

	t.Run("DeleteMarksDeleting", func(t *testing.T) {
		t.Parallel()
		b := setupWidget(t)
		b.apply(`{"kind":"widget","kind_version":1,"name":"w1","spec":{"image":"x"}}`).wantApply(t, "created")
		var r resource
		b.do(http.MethodDelete, "/api/v1/resources/widget/w1", nil).want(t, http.StatusAccepted).decode(t, &r)
		if r.Phase != "Deleting" {
			t.Fatalf("phase %q after delete, want Deleting", r.Phase)
		}
		b.do(http.MethodDelete, "/api/v1/resources/widget/w1", nil).want(t, http.StatusAccepted)
		if got := b.get(t, "widget", "w1"); got.Phase != "Deleting" {
			t.Fatalf("phase %q, want Deleting", got.Phase)
		}
		b.apply(`{"kind":"widget","kind_version":1,"name":"w1","spec":{"image":"y"}}`).wantProblem(t, http.StatusConflict, "")
		b.do(http.MethodDelete, "/api/v1/resources/widget/nope", nil).wantProblem(t, http.StatusNotFound, "")
		if n := b.count(`SELECT count(*) FROM resource_events WHERE type = 'deletion_requested'`); n != 1 {
			t.Errorf("%d deletion events, want 1", n)
		}
	})

	t.Run("ReactorKindIsNotApplicable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, api.Config{})
		b.putManifest("statussink", fixture(t, "statussink.kind.json")).wantApply(t, "created")
		b.apply(`{"kind":"statussink","kind_version":1,"name":"s"}`).wantProblem(t, http.StatusUnprocessableEntity, "body.kind")
	})
}

func TestListResources(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	b.putManifest("noop", noopKind).wantApply(t, "created")
	b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
	b.putManifest("vpc", fixture(t, "vpc-v2.kind.json")).wantApply(t, "created")

	// 7 widgets (Reconciling), 2 noops (synced at once: Ready), 1 deleting
	// widget, one vpc per version.
	var names []string
	for i := range 7 {
		name := fmt.Sprintf("w%d", i)
		names = append(names, name)
		team := "a"
		if i%2 == 1 {
			team = "b"
		}
		b.apply(fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":%q,"labels":{"team":%q,"env":"prod"},"spec":{"image":"x"}}`, name, team)).
			wantApply(t, "created")
	}
	var root resource
	b.apply(`{"kind":"noop","kind_version":1,"name":"n0","labels":{"team":"a"}}`).wantApply(t, "created").decode(t, &root)
	b.apply(`{"kind":"noop","kind_version":1,"name":"n1"}`).wantApply(t, "created")
	b.apply(`{"kind":"widget","kind_version":1,"name":"gone","spec":{"image":"x"}}`).wantApply(t, "created")
	b.do(http.MethodDelete, "/api/v1/resources/widget/gone", nil).want(t, http.StatusAccepted)
	b.apply(fixture(t, "resource-vpc-v1-tagged.json")).wantApply(t, "created")
	b.apply(fixture(t, "resource-vpc-v2.json")).wantApply(t, "created")
	// n1 and w0 are children of n0 (composers set owner_id; no route does).
	b.exec(`UPDATE resources SET owner_id = $1 WHERE name IN ('n1', 'w0')`, root.ID)

	list := func(t *testing.T, query string) resourceList {
		t.Helper()
		var l resourceList
		r := b.do(http.MethodGet, "/api/v1/resources?"+query, nil).want(t, http.StatusOK)
		r.decode(t, &l)
		if got := r.header.Get("X-Next-Cursor"); got != l.NextCursor {
			t.Fatalf("X-Next-Cursor %q, body next_cursor %q", got, l.NextCursor)
		}
		return l
	}
	namesOf := func(l resourceList) []string {
		out := make([]string, len(l.Items))
		for i, r := range l.Items {
			out[i] = r.Name
		}
		return out
	}

	t.Run("PagesWithoutDuplicatesOrGaps", func(t *testing.T) {
		t.Parallel()
		var seen []string
		cursor := ""
		pages := 0
		for {
			q := url.Values{"kind": {"widget"}, "limit": {"3"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			l := list(t, q.Encode())
			pages++
			seen = append(seen, namesOf(l)...)
			if l.NextCursor == "" {
				break
			}
			cursor = l.NextCursor
		}
		want := append(slices.Clone(names), "gone")
		if pages != 3 || !slices.Equal(seen, want) {
			t.Fatalf("%d pages of %v, want 3 pages of %v in creation order", pages, seen, want)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name, query string
			want        []string
		}{
			{"KindVersion", "kind=vpc&kind_version=2", []string{"sample-vpc-v2"}},
			{"OnePhase", "phase=Ready", []string{"n0", "n1"}},
			{"RepeatedPhasesUnion", "phase=Ready&phase=Deleting", []string{"n0", "n1", "gone"}},
			{"CommaPhases", "phase=Ready,Deleting", []string{"n0", "n1", "gone"}},
			{"LabelSelector", "kind=widget&label_selector=team=b", []string{"w1", "w3", "w5"}},
			{"LabelSelectorAllPairs", "label_selector=" + url.QueryEscape("team=a,env=prod"), []string{"w0", "w2", "w4", "w6"}},
			{"SelectorDoubleEquals", "label_selector=" + url.QueryEscape("team==b"), []string{"w1", "w3", "w5"}},
			{"SelectorNotEqualsMatchesWithoutTheLabel", "label_selector=" + url.QueryEscape("team!=a"),
				[]string{"w1", "w3", "w5", "n1", "gone", "sample-vpc-tagged", "sample-vpc-v2"}},
			{"SelectorIn", "label_selector=" + url.QueryEscape("team in (b, payments)"),
				[]string{"w1", "w3", "w5", "sample-vpc-tagged", "sample-vpc-v2"}},
			{"SelectorNotInMatchesWithoutTheLabel", "label_selector=" + url.QueryEscape("team notin (a,b)"),
				[]string{"n1", "gone", "sample-vpc-tagged", "sample-vpc-v2"}},
			{"SelectorExists", "label_selector=env", []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "sample-vpc-tagged"}},
			{"SelectorDoesNotExist", "label_selector=" + url.QueryEscape("!team"), []string{"n1", "gone"}},
			{"SelectorAllRequirements", "label_selector=" + url.QueryEscape("team in (a,payments), env ,env!=prod"), []string{"sample-vpc-tagged"}},
			{"SelectorConflictingEqualities", "label_selector=" + url.QueryEscape("team=a,team=b"), []string{}},
			{"Owner", "owner=" + root.ID, []string{"w0", "n1"}},
			{"NamePrefix", "name_prefix=n", []string{"n0", "n1"}},
			{"NamePrefixIsLiteral", "name_prefix=" + url.QueryEscape("w_"), []string{}},
			{"NoMatch", "kind=nope", []string{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := namesOf(list(t, tc.query))
				if !slices.Equal(got, tc.want) {
					t.Errorf("?%s gave %v, want %v", tc.query, got, tc.want)
				}
			})
		}
	})

	t.Run("OwnerIsReported", func(t *testing.T) {
		t.Parallel()
		if got := b.get(t, "noop", "n1"); got.OwnerID != root.ID {
			t.Errorf("owner_id %q, want %q", got.OwnerID, root.ID)
		}
	})

	t.Run("BadQueries", func(t *testing.T) {
		t.Parallel()
		// A cursor, whatever is wrong with it, is a 400 (see
		// TestBadInput/QueryParameters); these break a rule.
		for _, tc := range []struct{ name, query, loc string }{
			{"LimitZero", "limit=0", "query.limit"},
			{"LimitTooBig", "limit=1001", "query.limit"},
			{"Phase", "phase=Sleeping", "query.phase"},
			{"Owner", "owner=nope", "query.owner"},
			{"SelectorKeyTooLong", "label_selector=" + strings.Repeat("k", 254) + "=v", "query.label_selector"},
			{"SelectorSetTooLarge", "label_selector=" + url.QueryEscape("k in ("+strings.Repeat("v,", 64)+"v)"), "query.label_selector"},
			{"UnknownParameter", "knd=vpc", "query.knd"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b.do(http.MethodGet, "/api/v1/resources?"+tc.query, nil).wantProblem(t, http.StatusUnprocessableEntity, tc.loc)
			})
		}
		// A selector the grammar cannot read is malformed: a 400 naming
		// the term, never a selector that silently matches nothing.
		for _, sel := range []string{"team in (a", "team in ()", "team in (a,,b)", "env in a", "team notin", "!team=a", "a,,b", "=b", " ,a=b",
			"team in (a(b))", "f(x)=1", "team! =a", "team! in (a)"} {
			t.Run("Malformed "+sel, func(t *testing.T) {
				b.do(http.MethodGet, "/api/v1/resources?label_selector="+url.QueryEscape(sel), nil).
					wantProblem(t, http.StatusBadRequest, "query.label_selector")
			})
		}
	})
}
