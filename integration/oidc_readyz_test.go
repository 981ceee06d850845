package integration

import (
	"net/http"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/internal/testkit/oidctest"
)

// TestReadyzReportsTheIssuer: with OIDC on a pod that serves the API, the
// advisory oidc check is on HEALTH_ADDR's /readyz too: not ok while the
// issuer is down (the pod stays ready), ok once discovery succeeded.
func TestReadyzReportsTheIssuer(t *testing.T) {
	t.Parallel()
	is := oidctest.New(t, oidctest.Options{})
	is.SetAvailable(false)
	srv, _ := startOps(t, t.Context(), convergecli.RoleControl, func(c *convergecli.Config) {
		c.OIDC = api.OIDCConfig{IssuerURL: is.URL(), Audience: is.Audience()}
	})
	url := "http://" + srv.HealthAddr() + "/readyz"
	r := getReadyz(t, url)
	if r.code != http.StatusOK || r.checks["oidc"] == "" || r.checks["oidc"] == "ok" {
		t.Fatalf("readyz with the issuer down = %d %+v, want 200 with the oidc check not ok", r.code, r)
	}
	is.SetAvailable(true)
	waitFor(t, 30*time.Second, "the oidc check to pass once the issuer is back", func() bool {
		r := getReadyz(t, url)
		return r.code == http.StatusOK && r.checks["oidc"] == "ok"
	})
}
