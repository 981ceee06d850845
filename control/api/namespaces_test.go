package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// nsResource is a resource answer with its namespace.
type nsResource struct {
	ID        string         `json:"id"`
	Namespace string         `json:"namespace"`
	Kind      string         `json:"kind"`
	Name      string         `json:"name"`
	Spec      map[string]any `json:"spec"`
}

// namespaced is a widget apply document in namespace ns ("" names none).
func namespaced(ns, name, image string) string {
	doc := `{"kind":"widget","kind_version":1,"name":"` + name + `","spec":{"image":"` + image + `"}`
	if ns != "" {
		doc += `,"namespace":"` + ns + `"`
	}
	return doc + "}"
}

// setupNamespaces serves the API with the widget kind and the namespaces
// team-a and team-b.
func setupNamespaces(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t, api.Config{Endpoints: endpointsConfig(t)})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	b.do(http.MethodPut, "/api/v1/namespaces/team-a", `{"labels":{"owner":"a"}}`).wantApply(t, "created")
	b.do(http.MethodPut, "/api/v1/namespaces/team-b", `{}`).wantApply(t, "created")
	return b
}

// TestNamespacesHoldTheSameName: one kind and name in three namespaces are
// three resources, each read, changed and deleted through its own
// namespace; a caller that never says namespace sees the default one's
// alone, as before namespaces; ?namespace=* lists them all.
func TestNamespacesHoldTheSameName(t *testing.T) {
	t.Parallel()
	b := setupNamespaces(t)
	ids := map[string]string{}
	for _, ns := range []string{"", "team-a", "team-b"} {
		path := "/api/v1/resources"
		if ns != "" {
			path += "?namespace=" + ns
		}
		var r nsResource
		b.do(http.MethodPost, path, namespaced(ns, "w1", "img-"+ns)).wantApply(t, "created").decode(t, &r)
		want := ns
		if want == "" {
			want = "default"
		}
		if r.Namespace != want {
			t.Fatalf("created in %q: answer says namespace %q", want, r.Namespace)
		}
		ids[want] = r.ID
	}
	if len(ids) != 3 || ids["default"] == ids["team-a"] || ids["team-a"] == ids["team-b"] {
		t.Fatalf("ids by namespace %v: want three resources", ids)
	}

	var a nsResource
	b.do(http.MethodGet, "/api/v1/resources/widget/w1?namespace=team-a", nil).want(t, http.StatusOK).decode(t, &a)
	if a.ID != ids["team-a"] || a.Spec["image"] != "img-team-a" {
		t.Errorf("GET in team-a = %+v; want team-a's w1", a)
	}
	var d nsResource
	b.do(http.MethodGet, "/api/v1/resources/widget/w1", nil).want(t, http.StatusOK).decode(t, &d)
	if d.ID != ids["default"] || d.Namespace != "default" {
		t.Errorf("GET without a namespace = %+v; want the default namespace's w1", d)
	}

	list := func(q string) []string {
		t.Helper()
		var l struct{ Items []nsResource }
		b.do(http.MethodGet, "/api/v1/resources"+q, nil).want(t, http.StatusOK).decode(t, &l)
		var out []string
		for _, r := range l.Items {
			out = append(out, r.Namespace+"/"+r.Name)
		}
		slices.Sort(out)
		return out
	}
	if got := list(""); strings.Join(got, ",") != "default/w1" {
		t.Errorf("list without a namespace = %v; want the default namespace's alone", got)
	}
	if got := list("?namespace=team-b"); strings.Join(got, ",") != "team-b/w1" {
		t.Errorf("list of team-b = %v", got)
	}
	if got := list("?namespace=*"); strings.Join(got, ",") != "default/w1,team-a/w1,team-b/w1" {
		t.Errorf("list of every namespace = %v", got)
	}

	// An update and a delete reach their own namespace's resource only.
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("", "w1", "img-2")).wantApply(t, "configured")
	b.do(http.MethodDelete, "/api/v1/resources/widget/w1?namespace=team-b", nil).want(t, http.StatusAccepted)
	if n := b.count(`SELECT count(*) FROM resources WHERE namespace = 'default' AND spec->>'image' = 'img-' AND deletion_requested_at IS NULL`); n != 1 {
		t.Errorf("the default namespace's w1 changed (%d unchanged rows)", n)
	}
	if n := b.count(`SELECT count(*) FROM resources WHERE namespace = 'team-b' AND deletion_requested_at IS NULL`); n != 0 {
		t.Errorf("team-b's w1 was not marked for deletion")
	}
	// The subroutes resolve in the namespace too.
	b.do(http.MethodGet, "/api/v1/resources/widget/w1/events?namespace=team-a", nil).want(t, http.StatusOK)
	b.do(http.MethodPost, "/api/v1/resources/widget/w1/reconcile?namespace=team-a", nil).want(t, http.StatusAccepted)
	var hist struct {
		Items []struct{ Spec map[string]any }
	}
	b.do(http.MethodGet, "/api/v1/resources/widget/w1/spec-history?namespace=team-b", nil).want(t, http.StatusOK).decode(t, &hist)
	if len(hist.Items) != 1 || hist.Items[0].Spec["image"] != "img-team-b" {
		t.Errorf("team-b's spec history = %+v; want its one revision", hist.Items)
	}
	b.do(http.MethodGet, "/api/v1/resources/widget/w1/ops?namespace=team-c", nil).wantProblem(t, http.StatusNotFound, "query.namespace")
}

// TestNamespaceAddressingRefusals: a body naming another namespace than the
// query is 422 naming body.namespace (or the batch item's namespace); an
// unknown namespace is 404 naming query.namespace; * is for lists; and
// nothing is written.
func TestNamespaceAddressingRefusals(t *testing.T) {
	t.Parallel()
	b := setupNamespaces(t)
	p := b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("team-b", "w1", "x")).
		wantProblem(t, http.StatusUnprocessableEntity, "body.namespace")
	if e, _ := p.at("body.namespace"); e.Value != "team-b" {
		t.Errorf("mismatch error = %+v; want the body's value echoed", e)
	}
	b.do(http.MethodPost, "/api/v1/resources", namespaced("team-a", "w1", "x")).
		wantProblem(t, http.StatusUnprocessableEntity, "body.namespace")
	b.do(http.MethodPost, "/api/v1/resources?namespace=nope", namespaced("", "w1", "x")).
		wantProblem(t, http.StatusNotFound, "query.namespace")
	b.do(http.MethodGet, "/api/v1/resources/widget/w1?namespace=nope", nil).wantProblem(t, http.StatusNotFound, "query.namespace")
	b.do(http.MethodGet, "/api/v1/resources?namespace=nope", nil).wantProblem(t, http.StatusNotFound, "query.namespace")
	b.do(http.MethodGet, "/api/v1/resources?namespace=Not_A_Name", nil).wantProblem(t, http.StatusUnprocessableEntity, "query.namespace")
	b.do(http.MethodGet, "/api/v1/resources/widget/w1?namespace=*", nil).wantProblem(t, http.StatusUnprocessableEntity, "query.namespace")
	b.do(http.MethodGet, "/api/v1/providerconfigs?namespace=nope", nil).wantProblem(t, http.StatusNotFound, "query.namespace")
	b.do(http.MethodGet, "/api/v1/deliveries?namespace=nope", nil).wantProblem(t, http.StatusNotFound, "query.namespace")

	var batch struct {
		Results []struct {
			Namespace string
			Result    string
			Errors    []struct{ Location string }
		}
	}
	b.do(http.MethodPost, "/api/v1/resources:batch?namespace=team-a",
		`{"items":[`+namespaced("team-a", "w2", "x")+`,`+namespaced("default", "w3", "x")+`]}`).
		want(t, http.StatusOK).decode(t, &batch)
	if len(batch.Results) != 2 || batch.Results[0].Result != "created" || batch.Results[0].Namespace != "team-a" || batch.Results[1].Result != "invalid" ||
		len(batch.Results[1].Errors) == 0 || batch.Results[1].Errors[0].Location != "items[1].namespace" {
		t.Errorf("batch results = %+v; want the first created in team-a, the second refused at items[1].namespace", batch.Results)
	}
	if n := b.count(`SELECT count(*) FROM resources WHERE name IN ('w1', 'w3') OR namespace <> 'team-a'`); n != 0 {
		t.Errorf("the refused writes wrote %d resources", n)
	}
}

// TestNamespaceQuotaMaxObjects: a namespace at max_objects refuses one
// more resource with 403 quota-exceeded naming the namespace, the quota
// and its use, and writes nothing; an update of a resource it holds, and
// creations in other namespaces, go through.
func TestNamespaceQuotaMaxObjects(t *testing.T) {
	t.Parallel()
	b := setupNamespaces(t)
	b.do(http.MethodPut, "/api/v1/namespaces/team-a", `{"max_objects":2}`).wantApply(t, "configured")
	for _, name := range []string{"w1", "w2"} {
		b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("", name, "x")).wantApply(t, "created")
	}
	p := b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("", "w3", "x")).
		wantProblem(t, http.StatusForbidden, "query.namespace")
	if !strings.HasSuffix(p.Type, ":quota-exceeded") || !strings.Contains(p.Detail, "team-a") ||
		!strings.Contains(p.Detail, "max_objects") || !strings.Contains(p.Detail, "2 of 2") {
		t.Errorf("quota problem = %+v; want quota-exceeded naming team-a, max_objects and 2 of 2 used", p)
	}
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("", "w2", "y")).wantApply(t, "configured")
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-b", namespaced("", "w3", "x")).wantApply(t, "created")

	var batch struct{ Results []struct{ Result string } }
	b.do(http.MethodPost, "/api/v1/resources:batch?namespace=team-a",
		`{"items":[`+namespaced("", "w1", "z")+`,`+namespaced("", "w4", "x")+`]}`).want(t, http.StatusOK).decode(t, &batch)
	if len(batch.Results) != 2 || batch.Results[0].Result != "updated" || batch.Results[1].Result != "invalid" {
		t.Errorf("batch at the quota = %+v; want the update through and the creation refused", batch.Results)
	}
	if n := b.count(`SELECT count(*) FROM resources WHERE namespace = 'team-a'`); n != 2 {
		t.Errorf("team-a holds %d resources; want its quota, 2", n)
	}
	var ns struct {
		Objects    int `json:"objects"`
		MaxObjects int `json:"max_objects"`
	}
	b.do(http.MethodGet, "/api/v1/namespaces/team-a", nil).want(t, http.StatusOK).decode(t, &ns)
	if ns.Objects != 2 || ns.MaxObjects != 2 {
		t.Errorf("GET team-a = %+v; want 2 objects of 2", ns)
	}
	// Lifting the quota lets the creation through.
	b.do(http.MethodPut, "/api/v1/namespaces/team-a", `{}`).wantApply(t, "configured")
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("", "w3", "x")).wantApply(t, "created")
}

// TestNamespaceLifecycle: namespaces are listed, read and updated; default
// cannot be deleted, nor a namespace that holds anything (409 counting
// it); an empty one can; a dry run of either changes nothing.
func TestNamespaceLifecycle(t *testing.T) {
	t.Parallel()
	b := setupNamespaces(t)
	var l struct {
		Items []struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		}
	}
	b.do(http.MethodGet, "/api/v1/namespaces", nil).want(t, http.StatusOK).decode(t, &l)
	var names []string
	for _, n := range l.Items {
		names = append(names, n.Name)
	}
	if strings.Join(names, ",") != "default,team-a,team-b" || l.Items[1].Labels["owner"] != "a" {
		t.Errorf("namespaces = %+v", l.Items)
	}
	b.do(http.MethodPut, "/api/v1/namespaces/team-a", `{"labels":{"owner":"a"}}`).wantApply(t, "unchanged")
	b.do(http.MethodPut, "/api/v1/namespaces/team-a", `{"name":"team-b"}`).wantProblem(t, http.StatusUnprocessableEntity, "body.name")
	b.do(http.MethodPut, "/api/v1/namespaces/Team_A", `{}`).wantProblem(t, http.StatusUnprocessableEntity, "path.name")
	b.do(http.MethodPut, "/api/v1/namespaces/team-c", `{"max_objects":-1}`).wantProblem(t, http.StatusUnprocessableEntity, "body.max_objects")
	b.do(http.MethodGet, "/api/v1/namespaces/team-c", nil).wantProblem(t, http.StatusNotFound, "")

	b.do(http.MethodDelete, "/api/v1/namespaces/default", nil).wantProblem(t, http.StatusConflict, "")
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", namespaced("", "w1", "x")).wantApply(t, "created")
	p := b.do(http.MethodDelete, "/api/v1/namespaces/team-a", nil).wantProblem(t, http.StatusConflict, "")
	if len(p.Errors) != 1 || p.Errors[0].Message != "1 resources" {
		t.Errorf("delete of a namespace holding a resource = %+v; want its resource counted", p)
	}
	b.do(http.MethodDelete, "/api/v1/namespaces/team-b?dry_run=true", nil).want(t, http.StatusNoContent)
	b.do(http.MethodGet, "/api/v1/namespaces/team-b", nil).want(t, http.StatusOK)
	b.do(http.MethodDelete, "/api/v1/namespaces/team-b", nil).want(t, http.StatusNoContent)
	b.do(http.MethodGet, "/api/v1/namespaces/team-b", nil).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodGet, "/api/v1/resources?namespace=team-b", nil).wantProblem(t, http.StatusNotFound, "query.namespace")
}

// TestNamespacedConfigsBindingsEndpoints: provider configs, reactor
// bindings and endpoints belong to a namespace and are read in it; their
// names stay unique across the plane (409 naming the holder); a resource
// resolves a provider config in its namespace or default, never another;
// a default config lives in default.
func TestNamespacedConfigsBindingsEndpoints(t *testing.T) {
	t.Parallel()
	b := setupNamespaces(t)
	b.do(http.MethodPost, "/api/v1/providerconfigs?namespace=team-a", `{"name":"pc-a","kind":"widget","kind_version":1}`).wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/providerconfigs", `{"name":"pc-shared","kind":"widget","kind_version":1}`).wantApply(t, "created")
	p := b.do(http.MethodPost, "/api/v1/providerconfigs?namespace=team-b", `{"name":"pc-a","kind":"widget","kind_version":1}`).
		wantProblem(t, http.StatusConflict, "")
	if !strings.Contains(p.Detail, `"team-a"`) {
		t.Errorf("a name another namespace holds: %s; want the holder named", p.Detail)
	}
	b.do(http.MethodPost, "/api/v1/providerconfigs?namespace=team-a", `{"name":"pc-d","kind":"widget","kind_version":1,"is_default":true}`).
		wantProblem(t, http.StatusUnprocessableEntity, "body.is_default")
	b.do(http.MethodGet, "/api/v1/providerconfigs/pc-a", nil).wantProblem(t, http.StatusNotFound, "")
	var pc struct{ Namespace string }
	b.do(http.MethodGet, "/api/v1/providerconfigs/pc-a?namespace=team-a", nil).want(t, http.StatusOK).decode(t, &pc)
	if pc.Namespace != "team-a" {
		t.Errorf("pc-a's namespace = %q", pc.Namespace)
	}

	withRef := func(name, ref string) string {
		return `{"kind":"widget","kind_version":1,"name":"` + name + `","spec":{"image":"x"},"provider_config_ref":"` + ref + `"}`
	}
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", withRef("r1", "pc-a")).wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-a", withRef("r2", "pc-shared")).wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/resources?namespace=team-b", withRef("r1", "pc-a")).
		wantProblem(t, http.StatusNotFound, "body.provider_config_ref")
	b.do(http.MethodPost, "/api/v1/resources", withRef("r1", "pc-a")).
		wantProblem(t, http.StatusNotFound, "body.provider_config_ref")

	b.do(http.MethodPost, "/api/v1/endpoints?namespace=team-a",
		`{"name":"ep-a","kinds":[{"kind":"widget","kind_version":1}],"target":{"type":"https","url":"https://p.example/"}}`).wantApply(t, "created")
	b.do(http.MethodGet, "/api/v1/endpoints/ep-a", nil).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodPost, "/api/v1/endpoints/ep-a/rotate-secret", nil).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodGet, "/api/v1/endpoints/ep-a/deliveries?namespace=team-a", nil).want(t, http.StatusOK)
	var eps struct {
		Items []struct{ Name, Namespace string }
	}
	b.do(http.MethodGet, "/api/v1/endpoints?namespace=*", nil).want(t, http.StatusOK).decode(t, &eps)
	if len(eps.Items) != 1 || eps.Items[0].Namespace != "team-a" {
		t.Errorf("every namespace's endpoints = %+v", eps.Items)
	}
	b.do(http.MethodGet, "/api/v1/endpoints", nil).want(t, http.StatusOK).decode(t, &eps)
	if len(eps.Items) != 0 {
		t.Errorf("the default namespace's endpoints = %+v; want none", eps.Items)
	}
	b.do(http.MethodDelete, "/api/v1/endpoints/ep-a", nil).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodDelete, "/api/v1/endpoints/ep-a?namespace=team-a", nil).want(t, http.StatusNoContent)

	b.do(http.MethodPut, "/api/v1/kinds/sink/manifest", `{"kind":"sink","kind_version":1,"reactions":[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]}`).
		wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/reactor-bindings?namespace=team-a", `{"name":"bind","watch_kind":"widget","transition":"failed","reactor":"sink"}`).
		wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/reactor-bindings", `{"name":"bind","watch_kind":"widget","transition":"synced","reactor":"sink"}`).
		wantProblem(t, http.StatusConflict, "")
	var bindings struct {
		Items []struct{ Name, Namespace string }
	}
	b.do(http.MethodGet, "/api/v1/reactor-bindings?namespace=team-a", nil).want(t, http.StatusOK).decode(t, &bindings)
	if len(bindings.Items) != 1 || bindings.Items[0].Namespace != "team-a" {
		t.Errorf("team-a's bindings = %+v", bindings.Items)
	}
	p = b.do(http.MethodDelete, "/api/v1/namespaces/team-a", nil).wantProblem(t, http.StatusConflict, "")
	if len(p.Errors) != 3 {
		t.Errorf("delete of team-a = %+v; want its resources, provider config and binding counted", p.Errors)
	}
}

// TestNamespacedOperations: a verb invoked on a resource of one namespace
// runs on that one, its operation answers with the namespace, and the
// same name's resource in another namespace has none.
func TestNamespacedOperations(t *testing.T) {
	t.Parallel()
	b := setupNamespaces(t)
	b.putManifest("cam", `{"kind":"cam","kind_version":1,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]},
		{"name":"snap","trigger":"operation","verb":"snapshot","emits":["operationOutput"]}]}`).wantApply(t, "created")
	ids := map[string]string{}
	for _, ns := range []string{"default", "team-a"} {
		var r nsResource
		b.do(http.MethodPost, "/api/v1/resources?namespace="+ns, `{"kind":"cam","kind_version":1,"name":"c1"}`).
			wantApply(t, "created").decode(t, &r)
		ids[ns] = r.ID
	}
	var op struct {
		ID         string `json:"id"`
		ResourceID string `json:"resource_id"`
		Namespace  string `json:"namespace"`
	}
	b.do(http.MethodPost, "/api/v1/resources/cam/c1/ops?namespace=team-a", `{"verb":"snapshot"}`).want(t, http.StatusAccepted).decode(t, &op)
	if op.ResourceID != ids["team-a"] || op.Namespace != "team-a" {
		t.Errorf("operation = %+v; want team-a's c1 (%s) and its namespace", op, ids["team-a"])
	}
	b.do(http.MethodGet, "/api/v1/resources/cam/c1/ops/"+op.ID+"?namespace=team-a", nil).want(t, http.StatusOK)
	b.do(http.MethodGet, "/api/v1/resources/cam/c1/ops/"+op.ID, nil).wantProblem(t, http.StatusNotFound, "")
	var l struct{ Items []struct{ ID string } }
	b.do(http.MethodGet, "/api/v1/resources/cam/c1/ops", nil).want(t, http.StatusOK).decode(t, &l)
	if len(l.Items) != 0 {
		t.Errorf("the default namespace's c1 has operations %+v; want none", l.Items)
	}
}
