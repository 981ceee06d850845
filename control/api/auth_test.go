package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{ReadTokens: []string{"reader-token"}, AdminTokens: []string{"admin-token"}})
	const (
		read  = "Authorization: Bearer reader-token"
		admin = "Authorization: Bearer admin-token"
	)
	manifest := `{"kind":"noop","kind_version":1,"reactions":[]}`

	t.Run("NoToken", func(t *testing.T) {
		r := b.do(http.MethodGet, "/api/v1/kinds", nil)
		r.wantProblem(t, http.StatusUnauthorized, "")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Error("401 without WWW-Authenticate")
		}
		b.do(http.MethodPut, "/api/v1/kinds/noop/manifest", manifest).wantProblem(t, http.StatusUnauthorized, "")
	})
	t.Run("WrongToken", func(t *testing.T) {
		b.do(http.MethodGet, "/api/v1/kinds", nil, "Authorization: Bearer guess").wantProblem(t, http.StatusUnauthorized, "")
		b.do(http.MethodGet, "/api/v1/kinds", nil, "Authorization: Basic YWRtaW46YWRtaW4=").wantProblem(t, http.StatusUnauthorized, "")
	})
	t.Run("ReadTokenReadsButCannotWrite", func(t *testing.T) {
		b.do(http.MethodGet, "/api/v1/kinds", nil, read).want(t, http.StatusOK)
		b.do(http.MethodPut, "/api/v1/kinds/noop/manifest", manifest, read).wantProblem(t, http.StatusForbidden, "")
		b.do(http.MethodPost, "/api/v1/resources", `{}`, read).wantProblem(t, http.StatusForbidden, "")
		if n := b.count(`SELECT count(*) FROM kind_manifest`); n != 0 {
			t.Fatalf("a read token wrote %d manifests", n)
		}
	})
	t.Run("AdminTokenDoesBoth", func(t *testing.T) {
		b.do(http.MethodPut, "/api/v1/kinds/noop/manifest", manifest, admin).wantApply(t, "created")
		b.do(http.MethodGet, "/api/v1/kinds/noop/versions/1/manifest", nil, admin).want(t, http.StatusOK)
		b.do(http.MethodDelete, "/api/v1/kinds/noop/versions/1/manifest", nil, admin).want(t, http.StatusNoContent)
	})
	t.Run("ProbesAndDocsAreOpen", func(t *testing.T) {
		for _, path := range []string{"/livez", "/readyz", "/openapi.json", "/docs"} {
			b.do(http.MethodGet, path, nil).want(t, http.StatusOK)
		}
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Version: "v1.2.3"})
	if got := b.do(http.MethodGet, "/livez", nil).want(t, http.StatusOK).object(t)["status"]; got != "ok" {
		t.Errorf("livez status %v", got)
	}
	b.do(http.MethodGet, "/readyz", nil).want(t, http.StatusOK)
	if got := b.do(http.MethodGet, "/api/v1/version", nil).want(t, http.StatusOK).object(t)["version"]; got != "v1.2.3" {
		t.Errorf("version %v", got)
	}
	// With the database gone, readiness fails and liveness does not.
	b.db.Pool.Close()
	b.do(http.MethodGet, "/readyz", nil).wantProblem(t, http.StatusServiceUnavailable, "")
	b.do(http.MethodGet, "/livez", nil).want(t, http.StatusOK)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   api.Config
		field string
	}{
		{api.Config{BodyLimit: -1}, "BodyLimit"},
		{api.Config{RequestTimeout: -1}, "RequestTimeout"},
		{api.Config{AdminTokens: []string{""}}, "AdminTokens[0]"},
		{api.Config{ReadTokens: []string{"a", ""}}, "ReadTokens[1]"},
	} {
		_, err := api.New(tc.cfg, nil, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}
