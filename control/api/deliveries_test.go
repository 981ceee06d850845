package api_test

import (
	"net/http"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestDeliveriesAuth: with tokens on, a read token lists the delivery log
// but cannot replay; an admin token can (here: 404, no such delivery), and
// a refused replay writes no event. A test delivery, a POST, needs an
// admin token too, and a server with no dispatcher refuses it (503).
func TestDeliveriesAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{ReadTokens: []string{"reader-token"}, AdminTokens: []string{"admin-token"},
		Endpoints: endpointsConfig(t)})
	const (
		read  = "Authorization: Bearer reader-token"
		admin = "Authorization: Bearer admin-token"
	)
	if items := b.do(http.MethodGet, "/api/v1/deliveries?failed=true", nil, read).want(t, http.StatusOK).object(t)["items"]; items == nil {
		t.Errorf("a read token's list has no items array")
	}
	b.do(http.MethodPost, "/api/v1/deliveries/1/replay", nil, read).wantProblem(t, http.StatusForbidden, "")
	b.do(http.MethodPost, "/api/v1/deliveries/1/replay", nil).wantProblem(t, http.StatusUnauthorized, "")
	b.do(http.MethodPost, "/api/v1/deliveries/1/replay", nil, admin).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodPost, "/api/v1/deliveries/-3/replay", nil, admin).wantProblem(t, http.StatusUnprocessableEntity, "path.id")
	b.do(http.MethodPost, "/api/v1/endpoints/nope/test-delivery", nil, read).wantProblem(t, http.StatusForbidden, "")
	b.do(http.MethodPost, "/api/v1/endpoints/nope/test-delivery", nil, admin).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodPost, "/api/v1/endpoints", map[string]any{"name": "ep", "kinds": []map[string]any{{"kind": "box", "kind_version": 1}},
		"target": map[string]any{"type": "https", "url": "https://p.example/"}}, admin).want(t, http.StatusCreated)
	// No dispatcher runs in this server: nothing can send it.
	b.do(http.MethodPost, "/api/v1/endpoints/ep/test-delivery", nil, admin).wantProblem(t, http.StatusServiceUnavailable, "")
	if n := b.count(`SELECT count(*) FROM resource_events`); n != 0 {
		t.Errorf("refused replays wrote %d events", n)
	}
}
