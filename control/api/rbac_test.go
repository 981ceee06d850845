package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
	problemdoc "github.com/convergeplane/converge/internal/problem"
)

// testIdP is the tests' Authenticator, standing in for an OIDC verifier:
// the token "user:<subject>" or "user:<subject>:<group>,<group>" names that
// caller; "issuer-down" gets the 503 of an issuer that cannot be reached;
// any other token is refused.
type testIdP struct{}

func (testIdP) Authenticate(_ context.Context, token string) (api.Principal, error) {
	if token == "issuer-down" {
		return api.Principal{}, problemdoc.New(http.StatusServiceUnavailable, problemdoc.TypeUnavailable, "the issuer cannot be reached")
	}
	rest, ok := strings.CutPrefix(token, "user:")
	if !ok || rest == "" {
		return api.Principal{}, errors.New("not a test identity")
	}
	sub, groups, _ := strings.Cut(rest, ":")
	p := api.Principal{Subject: sub}
	if groups != "" {
		p.Groups = strings.Split(groups, ",")
	}
	return p, nil
}

// rbacAdminToken is the static admin token of the route-by-role servers.
const rbacAdminToken = "root-token"

// newRBACMutator is a mutator whose server authenticates with a static
// admin token (the mutator's own, for its seeds and restores) and testIdP.
func newRBACMutator(t *testing.T) *mutator {
	t.Helper()
	m := newMutatorConfig(t, 1, func(c *api.Config) {
		c.AdminTokens = []string{rbacAdminToken}
		c.ReadTokens = []string{"read-token"}
		c.Authenticator = testIdP{}
	})
	m.token = rbacAdminToken
	for _, ns := range []string{"team-a", "team-b"} {
		r := request{method: http.MethodPut, path: "/api/v1/namespaces/" + ns, contentType: "application/json", body: []byte(`{}`)}
		if a := m.send(r); a.err != nil || a.status != http.StatusCreated {
			t.Fatalf("create namespace: %s", a.dump(r))
		}
	}
	return m
}

// putBinding creates a role binding as the static admin.
func (m *mutator) putBinding(t *testing.T, name, body string) {
	t.Helper()
	r := request{method: http.MethodPut, path: "/api/v1/role-bindings/" + name, contentType: "application/json", body: []byte(body)}
	if a := m.send(r); a.err != nil || a.status >= 300 {
		t.Fatalf("put binding: %s", a.dump(r))
	}
}

// Where an operation's role must be held (docs/api.md, the route-by-role
// table).
const (
	inNS      = "namespace"    // the request's namespace
	inCluster = "cluster-wide" // by a cluster-wide binding
	anyNS     = "anywhere"     // in some namespace
	open      = "open"         // any authenticated caller
	ofBinding = "binding"      // the named role binding's namespace (default here)
)

type needs struct{ role, where string }

// routeRoles is the route-by-role table as docs/api.md states it, written
// apart from the server's own (control/api/rbac.go) so that each checks
// the other. Every operation of the OpenAPI document must be here.
var routeRoles = map[string]needs{
	"GET /livez":              {"", open},
	"GET /readyz":             {"", open},
	"GET /api/v1/version":     {"", open},
	"GET /api/v1/auth/config": {"", open},
	"GET /api/v1/auth/whoami": {"", open},

	"GET /api/v1/kinds":     {"viewer", anyNS},
	"GET /api/v1/manifests": {"viewer", anyNS},
	"GET /api/v1/kinds/{kind}/versions/{version}/manifest":    {"viewer", anyNS},
	"GET /api/v1/kinds/{kind}/versions/{version}/schema":      {"viewer", anyNS},
	"GET /api/v1/kinds/{kind}/versions/{version}/config":      {"viewer", anyNS},
	"PUT /api/v1/kinds/{kind}/manifest":                       {"admin", inCluster},
	"DELETE /api/v1/kinds/{kind}/versions/{version}/manifest": {"admin", inCluster},
	"PUT /api/v1/kinds/{kind}/versions/{version}/config":      {"admin", inCluster},

	"GET /api/v1/resources":                             {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}":               {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/children":      {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/dependencies":  {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/events":        {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/graph":         {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/spec-history":  {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/topology":      {"viewer", inNS},
	"POST /api/v1/resources":                            {"editor", inNS},
	"POST /api/v1/resources:batch":                      {"editor", inNS},
	"POST /api/v1/resources:reconcile":                  {"editor", inNS},
	"DELETE /api/v1/resources/{kind}/{name}":            {"editor", inNS},
	"POST /api/v1/resources/{kind}/{name}/reconcile":    {"editor", inNS},
	"POST /api/v1/resources/{kind}/{name}/rollback":     {"editor", inNS},
	"POST /api/v1/resources/{kind}/{name}/quarantine":   {"editor", inNS},
	"POST /api/v1/resources/{kind}/{name}/unquarantine": {"editor", inNS},
	"GET /api/v1/resources/{kind}/{name}/ops":           {"viewer", inNS},
	"GET /api/v1/resources/{kind}/{name}/ops/{id}":      {"viewer", inNS},
	"POST /api/v1/resources/{kind}/{name}/ops":          {"editor", inNS},
	"DELETE /api/v1/resources/{kind}/{name}/ops/{id}":   {"editor", inNS},
	"GET /api/v1/providerconfigs":                       {"viewer", inNS},
	"GET /api/v1/providerconfigs/{name}":                {"viewer", inNS},
	"POST /api/v1/providerconfigs":                      {"editor", inNS},
	"DELETE /api/v1/providerconfigs/{name}":             {"editor", inNS},
	"GET /api/v1/reactor-bindings":                      {"viewer", inNS},
	"GET /api/v1/reactor-bindings/{name}":               {"viewer", inNS},
	"POST /api/v1/reactor-bindings":                     {"editor", inNS},
	"DELETE /api/v1/reactor-bindings/{name}":            {"editor", inNS},
	"GET /api/v1/endpoints":                             {"viewer", inNS},
	"GET /api/v1/endpoints/{name}":                      {"viewer", inNS},
	"GET /api/v1/endpoints/{name}/deliveries":           {"viewer", inNS},
	"POST /api/v1/endpoints":                            {"operator", inNS},
	"DELETE /api/v1/endpoints/{name}":                   {"operator", inNS},
	"POST /api/v1/endpoints/{name}/rotate-secret":       {"operator", inNS},
	"POST /api/v1/endpoints/{name}/test-delivery":       {"operator", inNS},
	"GET /api/v1/deliveries":                            {"viewer", inNS},
	"GET /api/v1/deliveries/{id}":                       {"viewer", inNS},
	"POST /api/v1/deliveries/{id}/replay":               {"operator", inNS},
	"GET /api/v1/alert-events":                          {"viewer", inCluster},
	"GET /api/v1/alert-sinks":                           {"viewer", inCluster},
	"GET /api/v1/alert-sinks/{name}":                    {"viewer", inCluster},
	"POST /api/v1/alert-sinks":                          {"admin", inCluster},
	"DELETE /api/v1/alert-sinks/{name}":                 {"admin", inCluster},
	"GET /api/v1/cluster-members":                       {"viewer", inCluster},
	"GET /api/v1/audit":                                 {"admin", inNS},
	"GET /api/v1/namespaces":                            {"viewer", anyNS},
	"GET /api/v1/namespaces/{name}":                     {"viewer", anyNS},
	"PUT /api/v1/namespaces/{name}":                     {"admin", inCluster},
	"DELETE /api/v1/namespaces/{name}":                  {"admin", inCluster},
	"GET /api/v1/role-bindings":                         {"viewer", inNS},
	"GET /api/v1/role-bindings/{name}":                  {"viewer", ofBinding},
	"PUT /api/v1/role-bindings/{name}":                  {"admin", inNS},
	"DELETE /api/v1/role-bindings/{name}":               {"admin", ofBinding},
}

// rbacCaller is one caller of TestRouteByRole: the role it holds and where.
type rbacCaller struct {
	token   string
	role    string // "" holds none
	cluster bool   // held cluster-wide (by a group's binding), else in default only
}

var roleRank = map[string]int{"": 0, "viewer": 1, "editor": 2, "operator": 3, "admin": 4}

// allowed says whether c may call an operation that needs n, addressing
// namespace ns.
func (c rbacCaller) allowed(n needs, ns string) bool {
	enough := roleRank[c.role] >= roleRank[n.role]
	switch n.where {
	case open:
		return true
	case anyNS:
		return c.role != "" && enough
	case inCluster:
		return c.cluster && enough
	case ofBinding:
		// Addressed in another namespace than its own, the binding is not
		// found (404): no role is asked for.
		return ns != "default" || enough && (c.cluster || c.role != "")
	}
	return enough && (c.cluster || ns == "default")
}

// TestRouteByRole walks every operation of the served OpenAPI document with
// callers holding each role in the default namespace (by a user's
// binding), in every namespace (by a group's cluster-wide binding) and
// none, each addressing the default namespace and another one, and checks
// each answer against routeRoles: 403 (a problem document naming the role)
// where the caller lacks the role, anything else where it holds it; and a
// refused write must change nothing (the fingerprint of every table,
// TestDryRun's). An operation missing from routeRoles fails the test, as
// does an entry no operation has.
func TestRouteByRole(t *testing.T) {
	m := newRBACMutator(t)
	m.restore()
	m.seedDelivery(t)
	var callers []rbacCaller
	for _, r := range []string{"viewer", "editor", "operator", "admin"} {
		m.putBinding(t, "u-"+r, `{"role":"`+r+`","user":"u-`+r+`"}`)
		callers = append(callers, rbacCaller{token: "user:u-" + r, role: r})
	}
	for _, r := range []string{"viewer", "admin"} {
		m.putBinding(t, "g-"+r, `{"role":"`+r+`","group":"g-`+r+`","cluster_wide":true}`)
		callers = append(callers, rbacCaller{token: "user:someone:other,g-" + r, role: r, cluster: true})
	}
	callers = append(callers, rbacCaller{token: "user:nobody"})

	seen := map[string]bool{}
	for _, seed := range m.seeds() {
		key := seed.method + " " + seed.tmpl
		seen[key] = true
		n, ok := routeRoles[key]
		if !ok {
			t.Errorf("%s has no entry in the route-by-role table: add it to routeRoles, rbac.go's permissions and docs/api.md", key)
			continue
		}
		t.Run(key, func(t *testing.T) {
			for _, c := range callers {
				for _, ns := range []string{"default", "team-b"} {
					m.checkRole(t, seed, c, ns, c.allowed(n, ns))
				}
			}
		})
	}
	for key := range routeRoles {
		if !seen[key] {
			t.Errorf("routeRoles has %s, which the OpenAPI document does not", key)
		}
	}
}

// checkRole sends seed as c addressing namespace ns and checks the answer.
func (m *mutator) checkRole(t *testing.T, seed request, c rbacCaller, ns string, allowed bool) {
	t.Helper()
	req := seed
	req.path = m.fill(seed.tmpl)
	req.token = c.token
	if ns != "default" {
		req.query = strings.TrimPrefix(req.query+"&namespace="+ns, "&")
	}
	write := req.method != http.MethodGet
	before := m.fingerprint()
	a := m.send(req)
	if a.err != nil {
		t.Fatal(a.err)
	}
	who := c.token + " in " + ns
	switch {
	case allowed && a.status == http.StatusForbidden:
		t.Errorf("%s: refused, though allowed: %s", who, a.dump(req))
	case !allowed && a.status != http.StatusForbidden:
		t.Errorf("%s: not refused (want 403): %s", who, a.dump(req))
	case !allowed:
		if why := notProblem(a); why != "" {
			t.Errorf("%s: the 403 is not a problem document (%s)", who, why)
		}
		var p struct{ Detail string }
		if json.Unmarshal(a.body, &p) != nil || !strings.Contains(p.Detail, " role") {
			t.Errorf("%s: the 403 does not name the role needed: %s", who, a.body)
		}
		if after := m.fingerprint(); write && after != before {
			t.Errorf("%s: a refused write wrote:\n before %s\n after  %s\n%s", who, before, after, a.dump(req))
		}
	}
	if write && a.status < 300 {
		m.restore()
	}
}

// TestForbiddenNamesRoleAndNamespace: a refusal is a 403 problem document
// whose detail names the role needed and the namespace, and whose error
// points at query.namespace with its value.
func TestForbiddenNamesRoleAndNamespace(t *testing.T) {
	t.Parallel()
	m := newRBACMutator(t)
	m.restore()
	m.putBinding(t, "alice-view", `{"role":"viewer","user":"alice","namespace":"team-a"}`)
	r := request{method: http.MethodPost, path: "/api/v1/resources", query: "namespace=team-a", token: "user:alice",
		contentType: "application/json", body: []byte(boxApply)}
	a := m.send(r)
	var p struct {
		Detail string
		Errors []struct {
			Location string
			Value    string
		}
	}
	if a.status != http.StatusForbidden || json.Unmarshal(a.body, &p) != nil {
		t.Fatalf("%s", a.dump(r))
	}
	if !strings.Contains(p.Detail, "editor role") || !strings.Contains(p.Detail, `"team-a"`) || !strings.Contains(p.Detail, "alice holds viewer") {
		t.Errorf("detail %q does not name the role, the namespace and what alice holds", p.Detail)
	}
	if len(p.Errors) != 1 || p.Errors[0].Location != "query.namespace" || p.Errors[0].Value != "team-a" {
		t.Errorf("errors %+v, want query.namespace team-a", p.Errors)
	}
	r = request{method: http.MethodPut, path: "/api/v1/kinds/box/manifest", token: "user:alice", contentType: "application/json", body: []byte(boxManifest)}
	if a := m.send(r); a.status != http.StatusForbidden || !strings.Contains(string(a.body), "admin role cluster-wide") {
		t.Errorf("a kind write by a namespace viewer: %s", a.dump(r))
	}
	r = request{method: http.MethodGet, path: "/api/v1/resources", query: "namespace=*", token: "user:alice"}
	if a := m.send(r); a.status != http.StatusForbidden || !strings.Contains(string(a.body), "cluster-wide") {
		t.Errorf("namespace=* by a namespace viewer: %s", a.dump(r))
	}
}

// TestRoleBindingTakesEffect: a binding written through the API grants its
// role at the caller's next request and a deletion takes it back as
// promptly; a binding written by another process (straight into the
// table) takes effect within the cache's lifetime (polled, no sleep).
func TestRoleBindingTakesEffect(t *testing.T) {
	t.Parallel()
	m := newRBACMutator(t)
	m.restore()
	list := request{method: http.MethodGet, path: "/api/v1/resources", token: "user:bob:devs"}
	if a := m.send(list); a.status != http.StatusForbidden {
		t.Fatalf("bob before any binding: %s", a.dump(list))
	}
	m.putBinding(t, "devs", `{"role":"viewer","group":"devs"}`)
	if a := m.send(list); a.status != http.StatusOK {
		t.Fatalf("bob right after his group's binding: %s", a.dump(list))
	}
	del := request{method: http.MethodDelete, path: "/api/v1/role-bindings/devs"}
	if a := m.send(del); a.status != http.StatusNoContent {
		t.Fatalf("%s", a.dump(del))
	}
	if a := m.send(list); a.status != http.StatusForbidden {
		t.Fatalf("bob right after the binding's deletion: %s", a.dump(list))
	}
	if _, err := m.db.Pool.Exec(t.Context(), `INSERT INTO role_bindings (name, role, subject, namespace) VALUES ('bob', 'viewer', 'bob', 'default')`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for a := m.send(list); a.status != http.StatusOK; a = m.send(list) {
		if a.status != http.StatusForbidden || time.Now().After(deadline) {
			t.Fatalf("a binding written by another process never took effect: %s", a.dump(list))
		}
		time.Sleep(50 * time.Millisecond) // a poll's pace, not a wait for an outcome
	}
}

// TestRoleBindingsAPI: the bindings' own routes. Each field a body gets
// wrong is a 422 naming it, with nothing written; a namespace's admin
// writes its bindings but neither another namespace's nor cluster-wide
// ones; lists filter; GET and DELETE address a binding by name.
func TestRoleBindingsAPI(t *testing.T) {
	t.Parallel()
	m := newRBACMutator(t)
	put := func(name, query, body, token string) answer {
		return m.send(request{method: http.MethodPut, path: "/api/v1/role-bindings/" + name, query: query, token: token,
			contentType: "application/json", body: []byte(body)})
	}
	before := m.fingerprint()
	for _, c := range []struct{ name, query, body, loc string }{
		{"x", "", `{"role":"root","user":"a"}`, "body.role"},
		{"x", "", `{"role":"viewer"}`, "body.user"},
		{"x", "", `{"role":"viewer","user":"a","group":"g"}`, "body.user"},
		{"x", "", `{"role":"viewer","user":"a","cluster_wide":true,"namespace":"default"}`, "body.cluster_wide"},
		{"x", "namespace=team-a", `{"role":"viewer","user":"a","cluster_wide":true}`, "body.cluster_wide"},
		{"x", "namespace=team-a", `{"role":"viewer","user":"a","namespace":"team-b"}`, "body.namespace"},
		{"x", "", `{"role":"viewer","user":"a","namespace":"Team_B"}`, "body.namespace"},
		{"x", "namespace=Team_B", `{"role":"viewer","user":"a"}`, "query.namespace"},
		{"x", "", `{"name":"y","role":"viewer","user":"a"}`, "body.name"},
		{"-x", "", `{"role":"viewer","user":"a"}`, "path.name"},
		{"x", "", `{"role":"viewer","user":"a\u0001"}`, "body.user"},
	} {
		a := put(c.name, c.query, c.body, "")
		if a.status != http.StatusUnprocessableEntity || notProblem(a) != "" || !strings.Contains(string(a.body), `"location":"`+c.loc+`"`) {
			t.Errorf("%s ?%s: want 422 naming %s: %d %s", c.body, c.query, c.loc, a.status, a.body)
		}
	}
	if after := m.fingerprint(); after != before {
		t.Errorf("refused bindings wrote:\n before %s\n after  %s", before, after)
	}

	if a := put("ann-admin", "namespace=team-a", `{"role":"admin","user":"ann"}`, ""); a.status != http.StatusCreated || a.header.Get("X-Apply-Result") != "created" {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	if a := put("ann-admin", "namespace=team-a", `{"role":"admin","user":"ann"}`, ""); a.status != http.StatusOK || a.header.Get("X-Apply-Result") != "unchanged" {
		t.Fatalf("re-apply: %d %s", a.status, a.body)
	}
	ann := "user:ann"
	if a := put("team-a-dev", "namespace=team-a", `{"role":"editor","group":"team-a-devs"}`, ann); a.status != http.StatusCreated {
		t.Errorf("a namespace admin writing its namespace's binding: %d %s", a.status, a.body)
	}
	before = m.fingerprint()
	for _, c := range []struct{ name, query, body string }{
		{"elsewhere", "namespace=team-b", `{"role":"viewer","user":"ann"}`},
		{"everywhere", "", `{"role":"viewer","user":"ann","cluster_wide":true}`},
		// Moving a binding of another namespace into hers needs admin there too.
		{"ann-admin", "namespace=team-b", `{"role":"admin","user":"ann"}`},
	} {
		if a := put(c.name, c.query, c.body, ann); a.status != http.StatusForbidden || !strings.Contains(string(a.body), "admin role") {
			t.Errorf("ann writing %s ?%s: want 403: %d %s", c.body, c.query, a.status, a.body)
		}
	}
	if after := m.fingerprint(); after != before {
		t.Errorf("refused binding writes by a namespace admin wrote:\n before %s\n after  %s", before, after)
	}
	del := request{method: http.MethodDelete, path: "/api/v1/role-bindings/u", token: ann}
	m.putBinding(t, "u", `{"role":"viewer","user":"u","namespace":"team-b"}`)
	before = m.fingerprint()
	if a := m.send(del); a.status != http.StatusForbidden {
		t.Errorf("ann deleting team-b's binding: %s", a.dump(del))
	}
	if after := m.fingerprint(); after != before {
		t.Errorf("refused writes by a namespace admin wrote:\n before %s\n after  %s", before, after)
	}

	m.putBinding(t, "ops", `{"role":"operator","group":"ops","cluster_wide":true}`)
	names := func(query, token string) []string {
		t.Helper()
		r := request{method: http.MethodGet, path: "/api/v1/role-bindings", query: query, token: token}
		a := m.send(r)
		var l struct{ Items []struct{ Name string } }
		if a.status != http.StatusOK || json.Unmarshal(a.body, &l) != nil {
			t.Fatalf("%s", a.dump(r))
		}
		var out []string
		for _, b := range l.Items {
			out = append(out, b.Name)
		}
		return out
	}
	for _, c := range []struct {
		query, token string
		want         []string
	}{
		{"namespace=team-a", ann, []string{"ann-admin", "ops", "team-a-dev"}},
		{"namespace=team-a&role=admin", ann, []string{"ann-admin"}},
		{"namespace=team-a&group=ops", ann, []string{"ops"}},
		{"namespace=*&user=u", "", []string{"u"}},
		{"namespace=*", "", []string{"ann-admin", "ops", "team-a-dev", "u"}},
		{"", "", []string{"ops"}},
	} {
		if got := names(c.query, c.token); !slices.Equal(got, c.want) {
			t.Errorf("list ?%s: %v, want %v", c.query, got, c.want)
		}
	}

	get := request{method: http.MethodGet, path: "/api/v1/role-bindings/ops", token: ann}
	if a := m.send(get); a.status != http.StatusOK || !strings.Contains(string(a.body), `"cluster_wide":true`) {
		t.Errorf("a cluster-wide binding read by a namespace admin: %s", a.dump(get))
	}
	get = request{method: http.MethodGet, path: "/api/v1/role-bindings/team-a-dev", query: "namespace=team-b"}
	if a := m.send(get); a.status != http.StatusNotFound {
		t.Errorf("a binding addressed in another namespace: %s", a.dump(get))
	}
	del = request{method: http.MethodDelete, path: "/api/v1/role-bindings/team-a-dev", token: ann}
	if a := m.send(del); a.status != http.StatusNoContent {
		t.Errorf("ann deleting her namespace's binding: %s", a.dump(del))
	}
	if a := m.send(del); a.status != http.StatusNotFound {
		t.Errorf("deleting it again: %s", a.dump(del))
	}
}

// TestAuthenticator: a token neither static nor accepted by the
// Authenticator is a 401 naming why, a problem the Authenticator returns is
// answered as is; static tokens keep their roles.
func TestAuthenticator(t *testing.T) {
	t.Parallel()
	m := newRBACMutator(t)
	r := request{method: http.MethodGet, path: "/api/v1/version", token: "forged"}
	if a := m.send(r); a.status != http.StatusUnauthorized || !strings.Contains(string(a.body), "not a test identity") ||
		a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("an unknown token: %s", a.dump(r))
	}
	r = request{method: http.MethodGet, path: "/api/v1/version", token: "issuer-down"}
	if a := m.send(r); a.status != http.StatusServiceUnavailable || notProblem(a) != "" || a.header.Get("WWW-Authenticate") != "" {
		t.Errorf("a token the Authenticator cannot check: %s", a.dump(r))
	}
	r = request{method: http.MethodGet, path: "/api/v1/resources", token: "read-token"}
	if a := m.send(r); a.status != http.StatusOK {
		t.Errorf("a read token reading: %s", a.dump(r))
	}
	r = request{method: http.MethodGet, path: "/api/v1/alert-sinks", token: "read-token"}
	if a := m.send(r); a.status != http.StatusOK {
		t.Errorf("a read token reading a cluster-wide list (it is a cluster-wide viewer): %s", a.dump(r))
	}
	r = request{method: http.MethodGet, path: "/api/v1/version", token: "user:nobody"}
	if a := m.send(r); a.status != http.StatusOK {
		t.Errorf("a caller with no role asking the version: %s", a.dump(r))
	}
}

// TestFiberRoutesByRole: the routes that are not huma operations check
// roles too: the change stream needs the viewer role in its namespace, and
// /metrics (every namespace's endpoints and kinds) a cluster-wide one.
func TestFiberRoutesByRole(t *testing.T) {
	t.Parallel()
	b := setupEvents(t, api.Config{AdminTokens: []string{rbacAdminToken}, Authenticator: testIdP{},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up 1\n")) })}, api.EventHubConfig{})
	if _, err := b.db.Pool.Exec(t.Context(), `INSERT INTO role_bindings (name, role, subject, group_name, namespace) VALUES
	    ('v', 'viewer', 'v', NULL, 'default'), ('c', 'viewer', NULL, 'watchers', NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token, query string
		want         int
	}{
		{"user:v", "", http.StatusOK},
		{"user:v", "?namespace=team-b", http.StatusForbidden},
		{"user:nobody", "", http.StatusForbidden},
		{"user:x:watchers", "", http.StatusOK},
	} {
		s := b.open(t, "Authorization: Bearer "+c.token, c.query)
		if s.resp.StatusCode != c.want {
			t.Errorf("the stream for %s%s: %d, want %d", c.token, c.query, s.resp.StatusCode, c.want)
		}
		s.resp.Body.Close()
	}
	for _, c := range []struct {
		token string
		want  int
	}{{"user:v", http.StatusForbidden}, {"user:x:watchers", http.StatusOK}, {rbacAdminToken, http.StatusOK}} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("/metrics for %s: %d, want %d", c.token, resp.StatusCode, c.want)
		}
	}
}
