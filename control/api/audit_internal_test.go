package api

import (
	"strings"
	"testing"
)

// TestObjectOf: what a request addressed, read from its path alone, so that
// routes added later are covered.
func TestObjectOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, kind, name string }{
		{"/api/v1/resources", "resources", ""},
		{"/api/v1/resources:batch", "resources", ""},
		{"/api/v1/resources:reconcile", "resources", ""},
		{"/api/v1/resources/vpc/web", "vpc", "web"},
		{"/api/v1/resources/vpc/web/rollback", "vpc", "web"},
		{"/api/v1/resources/vpc/web/ops/0b6d", "vpc", "web"},
		{"/api/v1/resources/vpc", "resources", "vpc"},
		{"/api/v1/resources/vpc/a%2Fb", "vpc", "a/b"},
		{"/api/v1/endpoints/quickstart/rotate-secret", "endpoints", "quickstart"},
		{"/api/v1/kinds/vpc/versions/2/config", "kinds", "vpc"},
		{"/api/v1/deliveries/42/replay", "deliveries", "42"},
		{"/api/v1/namespaces/team-a", "namespaces", "team-a"},
		{"/api/v1/role-bindings/", "role-bindings", ""},
		{"/api/v1/", "", ""},
		{"/livez", "", ""},
	} {
		if kind, name := objectOf(c.path); kind != c.kind || name != c.name {
			t.Errorf("objectOf(%q) = %q, %q; want %q, %q", c.path, kind, name, c.kind, c.name)
		}
	}
}

// TestRequestID: a client's id is kept when it is safe to log, else
// replaced by a fresh one.
func TestRequestID(t *testing.T) {
	t.Parallel()
	for _, keep := range []string{"deploy-7f3a", "a", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k8s/ns:pod.1+x=y_z", strings.Repeat("x", 128)} {
		if got := requestID(keep); got != keep {
			t.Errorf("requestID(%q) = %q, want it kept", keep, got)
		}
	}
	seen := map[string]bool{}
	for _, replace := range []string{"", "bad token!", "line\nbreak", "quote\"", strings.Repeat("x", 129), "ünicode"} {
		got := requestID(replace)
		if got == replace || len(got) != 36 || seen[got] {
			t.Errorf("requestID(%q) = %q, want a fresh UUID", replace, got)
		}
		seen[got] = true
	}
}
