package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/internal/testkit/oidctest"
)

// whoami is GET /api/v1/auth/whoami's answer.
type whoami struct {
	Subject   string   `json:"subject"`
	Groups    []string `json:"groups"`
	TokenName string   `json:"token_name"`
	Anonymous bool     `json:"anonymous"`
	Bindings  []struct {
		Name string `json:"name"`
	} `json:"bindings"`
}

func bearer(token string) string { return "Authorization: Bearer " + token }

// wantInvalidToken checks a 401 for a refused OIDC token: the RFC 6750
// challenge with error="invalid_token" and an error_description holding
// why, the same reason in the problem's detail.
func wantInvalidToken(t *testing.T, r response, why string) {
	t.Helper()
	p := r.wantProblem(t, http.StatusUnauthorized, "")
	c := r.header.Get("WWW-Authenticate")
	if !strings.HasPrefix(c, "Bearer ") || !strings.Contains(c, `error="invalid_token"`) || !strings.Contains(c, "error_description=") || !strings.Contains(c, why) {
		t.Errorf("WWW-Authenticate %q, want error=\"invalid_token\" and an error_description with %q", c, why)
	}
	if !strings.Contains(p.Detail, why) {
		t.Errorf("detail %q does not say %q", p.Detail, why)
	}
}

// TestOIDC runs the API with a local issuer and static tokens beside it,
// over real HTTP.
func TestOIDC(t *testing.T) {
	t.Parallel()
	is := oidctest.New(t, oidctest.Options{TLS: true})
	b := setup(t, api.Config{ReadTokens: []string{"reader-token-0123"}, AdminTokens: []string{"admin-token-01234", "ci.deploy.token-0123"},
		OIDC:    &api.OIDCConfig{IssuerURL: is.URL(), Audience: is.Audience(), ClockSkew: time.Minute, HTTPClient: is.Client()},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) })})
	me := func(t *testing.T, token string) whoami {
		t.Helper()
		var w whoami
		b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(token)).want(t, http.StatusOK).decode(t, &w)
		return w
	}

	t.Run("ValidTokenNamesTheCaller", func(t *testing.T) {
		c := is.Claims("alice")
		c["groups"] = []string{"team-a", "team-b"}
		got := me(t, is.Sign(c))
		if got.Subject != "alice" || !slices.Equal(got.Groups, []string{"team-a", "team-b"}) || got.TokenName != "" || got.Anonymous {
			t.Errorf("whoami = %+v, want alice in team-a and team-b", got)
		}
		// A role comes from a binding, here of one of the caller's groups.
		b.do(http.MethodGet, "/api/v1/kinds", nil, bearer(is.Sign(c))).wantProblem(t, http.StatusForbidden, "")
		b.do(http.MethodPut, "/api/v1/role-bindings/team-a-viewers", `{"role":"viewer","group":"team-a"}`,
			bearer("admin-token-01234")).want(t, http.StatusCreated)
		b.do(http.MethodGet, "/api/v1/kinds", nil, bearer(is.Sign(c))).want(t, http.StatusOK)
		if got := me(t, is.Sign(c)); len(got.Bindings) != 1 || got.Bindings[0].Name != "team-a-viewers" {
			t.Errorf("whoami bindings = %+v, want team-a-viewers", got.Bindings)
		}
	})
	t.Run("GroupsClaimMayBeAString", func(t *testing.T) {
		c := is.Claims("bob")
		c["groups"] = "ops"
		if got := me(t, is.Sign(c)); got.Subject != "bob" || !slices.Equal(got.Groups, []string{"ops"}) {
			t.Errorf("whoami = %+v, want bob in ops", got)
		}
		if got := me(t, is.Sign(is.Claims("carol"))); got.Groups == nil || len(got.Groups) != 0 {
			t.Errorf("a token without groups: whoami groups %#v, want []", got.Groups)
		}
	})
	t.Run("OIDCCallersWithoutTheRoleWriteNothing", func(t *testing.T) {
		b.do(http.MethodPut, "/api/v1/kinds/noop/manifest", `{"kind":"noop","kind_version":1,"reactions":[]}`,
			bearer(is.Sign(is.Claims("alice")))).wantProblem(t, http.StatusForbidden, "")
		if n := b.count(`SELECT count(*) FROM kind_manifest`); n != 0 {
			t.Fatalf("an OIDC caller wrote %d manifests", n)
		}
	})
	t.Run("Expired", func(t *testing.T) {
		c := is.Claims("alice")
		c["iat"], c["exp"] = time.Now().Add(-time.Hour).Unix(), time.Now().Add(-2*time.Minute).Unix()
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(c))), "expired")
	})
	t.Run("ExpiredWithinSkew", func(t *testing.T) {
		c := is.Claims("alice")
		c["iat"], c["exp"] = time.Now().Add(-time.Hour).Unix(), time.Now().Add(-20*time.Second).Unix()
		if got := me(t, is.Sign(c)); got.Subject != "alice" {
			t.Errorf("whoami = %+v", got)
		}
		c = is.Claims("alice")
		c["nbf"] = time.Now().Add(20 * time.Second).Unix()
		if got := me(t, is.Sign(c)); got.Subject != "alice" {
			t.Errorf("a token whose nbf is within the skew: whoami = %+v", got)
		}
	})
	t.Run("NotYetValid", func(t *testing.T) {
		c := is.Claims("alice")
		c["nbf"] = time.Now().Add(5 * time.Minute).Unix()
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(c))), "not valid yet")
	})
	t.Run("WrongAudience", func(t *testing.T) {
		c := is.Claims("alice")
		c["aud"] = "another-api"
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(c))), "audience")
	})
	t.Run("WrongIssuer", func(t *testing.T) {
		c := is.Claims("alice")
		c["iss"] = "https://elsewhere.example.com"
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(c))), "issuer")
	})
	t.Run("BadSignature", func(t *testing.T) {
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Forge(is.Claims("alice")))), "signature")
		// A valid token with its payload swapped for another's.
		good, other := strings.Split(is.Sign(is.Claims("alice")), "."), strings.Split(is.Sign(is.Claims("mallory")), ".")
		spliced := good[0] + "." + other[1] + "." + good[2]
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(spliced)), "signature")
	})
	t.Run("NoSubject", func(t *testing.T) {
		c := is.Claims("")
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(c))), "sub claim")
	})
	t.Run("ReservedSubjects", func(t *testing.T) {
		for _, sub := range []string{"token:admin-0", "anonymous"} {
			wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(is.Claims(sub)))), "reserved")
		}
	})
	t.Run("StaticTokensBesideOIDC", func(t *testing.T) {
		if got := me(t, "admin-token-01234"); got.Subject != "token:admin-0" || got.TokenName != "admin-0" {
			t.Errorf("whoami with the admin token = %+v", got)
		}
		if got := me(t, "reader-token-0123"); got.Subject != "token:read-0" || got.TokenName != "read-0" {
			t.Errorf("whoami with the read token = %+v", got)
		}
		// Dots do not make a static token a JWT.
		if got := me(t, "ci.deploy.token-0123"); got.TokenName != "admin-1" {
			t.Errorf("whoami with a dotted static token = %+v", got)
		}
		b.do(http.MethodPut, "/api/v1/kinds/noop/manifest", `{"kind":"noop","kind_version":1,"reactions":[]}`,
			bearer("admin-token-01234")).wantApply(t, "created")
		b.do(http.MethodDelete, "/api/v1/kinds/noop/versions/1/manifest", nil, bearer("admin-token-01234")).want(t, http.StatusNoContent)
		r := b.do(http.MethodGet, "/api/v1/kinds", nil, bearer("not-a-known-token"))
		r.wantProblem(t, http.StatusUnauthorized, "")
		if c := r.header.Get("WWW-Authenticate"); !strings.Contains(c, `error="invalid_token"`) {
			t.Errorf("WWW-Authenticate %q", c)
		}
		b.do(http.MethodGet, "/api/v1/auth/whoami", nil).wantProblem(t, http.StatusUnauthorized, "")
	})
	t.Run("AuthConfigNeedsNoToken", func(t *testing.T) {
		var got struct {
			OIDC *struct {
				Issuer   string   `json:"issuer"`
				ClientID string   `json:"client_id"`
				Scopes   []string `json:"scopes"`
				Token    string   `json:"token"`
			} `json:"oidc"`
		}
		b.do(http.MethodGet, "/api/v1/auth/config", nil).want(t, http.StatusOK).decode(t, &got)
		if got.OIDC == nil || got.OIDC.Issuer != is.URL() || got.OIDC.ClientID != is.Audience() ||
			!slices.Equal(got.OIDC.Scopes, []string{"openid", "profile", "email"}) || got.OIDC.Token != "id_token" {
			t.Errorf("auth config = %+v", got.OIDC)
		}
		b.do(http.MethodHead, "/api/v1/auth/config", nil).want(t, http.StatusOK)
	})
	t.Run("MetricsTakeOIDCTokens", func(t *testing.T) {
		b.do(http.MethodPut, "/api/v1/role-bindings/prometheus", `{"role":"viewer","user":"prometheus","cluster_wide":true}`,
			bearer("admin-token-01234")).want(t, http.StatusCreated)
		b.do(http.MethodGet, "/metrics", nil, bearer(is.Sign(is.Claims("prometheus")))).want(t, http.StatusOK)
		c := is.Claims("prometheus")
		c["aud"] = "another-api"
		wantInvalidToken(t, b.do(http.MethodGet, "/metrics", nil, bearer(is.Sign(c))), "audience")
	})
	t.Run("ReadinessReportsTheIssuer", func(t *testing.T) {
		if got := b.do(http.MethodGet, "/readyz", nil).want(t, http.StatusOK).object(t)["checks"].(map[string]any)["oidc"]; got != "ok" {
			t.Errorf("readyz checks.oidc = %v", got)
		}
	})
	t.Run("ECKey", func(t *testing.T) {
		is.AddKey(jose.ES256)
		if got := me(t, is.Sign(is.Claims("ec-signed"))); got.Subject != "ec-signed" {
			t.Errorf("a token signed with ES256: whoami = %+v", got)
		}
	})
	// Last: it retires the key the other subtests sign with.
	t.Run("KeyRotation", func(t *testing.T) {
		old := is.KeyIDs()[0]
		oldKey := is.Signer(old)
		if got := me(t, is.Sign(is.Claims("alice"))); got.Subject != "alice" {
			t.Fatalf("whoami = %+v", got)
		}
		fetches := is.JWKSFetches()
		fresh := is.Rotate()
		if got := me(t, is.Sign(is.Claims("after-rotation"))); got.Subject != "after-rotation" {
			t.Errorf("a token of the new key %s: whoami = %+v", fresh, got)
		}
		if is.JWKSFetches() == fetches {
			t.Error("the new key was accepted without fetching the JWKS again")
		}
		wantInvalidToken(t, b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.SignWith(old, oldKey, is.Claims("alice")))), "signature")
	})
}

// TestOIDCIssuerUnreachable: a server whose issuer is down starts and
// serves static tokens; OIDC tokens get 503 and readiness says why (without
// failing); once the issuer is back, discovery is retried and tokens pass;
// down again, the cached keys still verify and a new key's token gets 503.
func TestOIDCIssuerUnreachable(t *testing.T) {
	t.Parallel()
	is := oidctest.New(t, oidctest.Options{})
	is.SetAvailable(false)
	b := setup(t, api.Config{AdminTokens: []string{"admin-token-01234"},
		OIDC: &api.OIDCConfig{IssuerURL: is.URL(), Audience: is.Audience()}})
	token := is.Sign(is.Claims("alice"))

	b.do(http.MethodGet, "/api/v1/kinds", nil, bearer("admin-token-01234")).want(t, http.StatusOK)
	r := b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(token))
	r.wantProblem(t, http.StatusServiceUnavailable, "")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	checks := b.do(http.MethodGet, "/readyz", nil).want(t, http.StatusOK).object(t)["checks"].(map[string]any)
	if got, _ := checks["oidc"].(string); got == "" || got == "ok" {
		t.Errorf("readyz checks.oidc = %q while the issuer is down", got)
	}

	is.SetAvailable(true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(token))
		if r.status == http.StatusOK {
			var w whoami
			if err := json.Unmarshal(r.body, &w); err != nil || w.Subject != "alice" {
				t.Fatalf("whoami = %s", r.body)
			}
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("after the issuer came back: %d %s", r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond) // polls until discovery is retried (every 5 s)
	}
	if got := b.do(http.MethodGet, "/readyz", nil).want(t, http.StatusOK).object(t)["checks"].(map[string]any)["oidc"]; got != "ok" {
		t.Errorf("readyz checks.oidc = %v once the issuer is back", got)
	}

	// Down again: tokens of the cached keys still pass; one of a key the
	// server has not fetched waits for the JWKS (503), not refused as forged.
	is.SetAvailable(false)
	b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(token)).want(t, http.StatusOK)
	is.Rotate()
	b.do(http.MethodGet, "/api/v1/auth/whoami", nil, bearer(is.Sign(is.Claims("alice")))).wantProblem(t, http.StatusServiceUnavailable, "")
}

// TestAuthRoutesWithoutOIDC: without OIDC, /auth/config says so and
// whoami names the anonymous caller of an open API.
func TestAuthRoutesWithoutOIDC(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	if got := strings.TrimSpace(string(b.do(http.MethodGet, "/api/v1/auth/config", nil).want(t, http.StatusOK).body)); got != `{"oidc":null}` {
		t.Errorf("auth config = %s", got)
	}
	var w whoami
	b.do(http.MethodGet, "/api/v1/auth/whoami", nil).want(t, http.StatusOK).decode(t, &w)
	if w.Subject != "anonymous" || !w.Anonymous || w.TokenName != "" {
		t.Errorf("whoami = %+v", w)
	}
}
