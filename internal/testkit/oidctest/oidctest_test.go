package oidctest_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/convergeplane/converge/internal/testkit/oidctest"
)

// authorize runs the authorize endpoint for a PKCE challenge of verifier
// and returns the code it redirected with.
func authorize(t *testing.T, is *oidctest.Issuer, verifier string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {"console"}, "redirect_uri": {"http://console.test/"},
		"state": {"s1"}, "nonce": {"n1"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	c := is.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(is.URL() + "/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || loc.Host != "console.test" || loc.Query().Get("state") != "s1" || loc.Query().Get("code") == "" {
		t.Fatalf("authorize answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query().Get("code")
}

func exchange(t *testing.T, is *oidctest.Issuer, code, verifier string) (int, map[string]any) {
	t.Helper()
	resp, err := is.Client().PostForm(is.URL()+"/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"client_id": {"console"}, "redirect_uri": {"http://console.test/"}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// TestAuthorizationCodeWithPKCE: a code is exchanged once, with the
// verifier of its challenge only, for tokens go-oidc verifies through the
// issuer's discovery.
func TestAuthorizationCodeWithPKCE(t *testing.T) {
	t.Parallel()
	is := oidctest.New(t, oidctest.Options{TLS: true, User: map[string]any{"sub": "alice", "groups": []string{"a"}}})
	const verifier = "a-verifier-of-forty-three-characters-at-least"

	code := authorize(t, is, verifier)
	if status, body := exchange(t, is, code, verifier+"x"); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("a wrong verifier: %d %v", status, body)
	}
	code = authorize(t, is, verifier)
	status, body := exchange(t, is, code, verifier)
	if status != http.StatusOK {
		t.Fatalf("exchange: %d %v", status, body)
	}
	if status, _ := exchange(t, is, code, verifier); status != http.StatusBadRequest {
		t.Errorf("a code used twice: %d", status)
	}

	ctx := oidc.ClientContext(context.Background(), is.Client())
	p, err := oidc.NewProvider(ctx, is.URL())
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.VerifierContext(ctx, &oidc.Config{ClientID: "console"}).Verify(ctx, body["id_token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Groups []string `json:"groups"`
	}
	if err := id.Claims(&claims); err != nil || id.Subject != "alice" || id.Nonce != "n1" || !slices.Equal(claims.Groups, []string{"a"}) {
		t.Errorf("ID token: sub %q nonce %q groups %v (%v)", id.Subject, id.Nonce, claims.Groups, err)
	}
	if _, err := p.VerifierContext(ctx, &oidc.Config{ClientID: is.Audience()}).Verify(ctx, body["access_token"].(string)); err != nil {
		t.Errorf("access token: %v", err)
	}
}

// TestRotate: after a rotation the JWKS publishes the new key alone, and
// tokens are signed with it.
func TestRotate(t *testing.T) {
	t.Parallel()
	is := oidctest.New(t, oidctest.Options{})
	old := is.KeyIDs()[0]
	fresh := is.Rotate()
	if got := is.KeyIDs(); !slices.Equal(got, []string{fresh}) || fresh == old {
		t.Fatalf("keys after rotation %v, want [%s] (old %s)", got, fresh, old)
	}
	head, _, _ := strings.Cut(is.Sign(is.Claims("x")), ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"kid":"`+fresh+`"`) {
		t.Errorf("a token's header %s does not name the new key %s", raw, fresh)
	}
}
