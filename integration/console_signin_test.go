package integration

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
	"github.com/convergeplane/converge/internal/testkit/oidctest"
)

// TestConsoleSignsInWithOIDC drives the console in a real Chromium against
// a server that takes OIDC tokens from a local issuer: the first refused
// call sends the tab through the issuer (authorization code with PKCE,
// approved at once), the console comes back signed in, shows the subject,
// calls the API and opens the change stream with the token; signed out it
// offers to sign in instead of doing it, and signs in again on a click; a
// token the API later refuses (expired) sends it through the issuer again.
// Only the server and the issuer are contacted, and nothing is logged as
// an error.
func TestConsoleSignsInWithOIDC(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	is := oidctest.New(t, oidctest.Options{Audience: "converge-console",
		User: map[string]any{"sub": "alice@example.com", "groups": []string{"team-a"}}})
	s := startAllWith(t, func(c *convergecli.Config) {
		c.OIDC = api.OIDCConfig{IssuerURL: is.URL(), Audience: is.Audience()}
		c.AdminTokens = []string{"bootstrap-admin-token"}
	})
	// The signed-in user reads what its group's binding grants.
	bind, err := http.NewRequestWithContext(t.Context(), http.MethodPut, s.base+"/api/v1/role-bindings/team-a-viewers",
		strings.NewReader(`{"role":"viewer","group":"team-a"}`))
	must(t, err)
	bind.Header.Set("Authorization", "Bearer bootstrap-admin-token")
	bind.Header.Set("Content-Type", "application/json")
	bound, err := http.DefaultClient.Do(bind)
	must(t, err)
	bound.Body.Close()
	if bound.StatusCode != http.StatusCreated {
		t.Fatalf("bind team-a as viewers: %d", bound.StatusCode)
	}
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t)})

	b.Open("/resources", `[data-testid="signed-in-as"]`)
	b.WaitTrue("the subject in the header", `document.querySelector('[data-testid="signed-in-as"]').textContent === "alice@example.com"`, 30*time.Second)
	b.WaitTrue("the list, read with the token", `!!document.querySelector("table.resources") && !document.querySelector(".token-prompt")`, 30*time.Second)
	b.WaitTrue("the change stream, with the token", `document.querySelector(".live")?.textContent === "live"`, 30*time.Second)
	if got := browsertest.Eval[string](b, `location.pathname + location.search`); got != "/resources" {
		t.Errorf("back from the issuer on %q, want /resources (the code and state removed)", got)
	}
	token := browsertest.Eval[string](b, `sessionStorage.getItem("converge.token")`)
	if strings.Count(token, ".") != 2 {
		t.Fatalf("the kept token %q is not a JWT", token)
	}
	// The API takes the console's token as alice.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+"/api/v1/auth/whoami", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)
	if code := resp.StatusCode; code != 200 || !strings.Contains(string(body), `"subject":"alice@example.com"`) || !strings.Contains(string(body), `"team-a"`) {
		t.Errorf("whoami with the console's token: %d %s", resp.StatusCode, body)
	}
	b.Screenshot("signed-in")

	t.Log("sign out: the console offers to sign in, and does on a click")
	click(b, ".top-right", "Sign out")
	b.WaitTrue("the sign-in prompt", `!!document.querySelector(".token-prompt button") && !document.querySelector('[data-testid="signed-in-as"]')`, 30*time.Second)
	if got := browsertest.Eval[string](b, `sessionStorage.getItem("converge.token") ?? ""`); got != "" {
		t.Errorf("signed out, the token is still kept: %q", got)
	}
	b.Screenshot("signed-out")
	issuer, err := url.Parse(is.URL())
	must(t, err)
	click(b, ".token-prompt", "Sign in with "+issuer.Host)
	b.WaitTrue("signed in again", `document.querySelector('[data-testid="signed-in-as"]')?.textContent === "alice@example.com"`, 30*time.Second)

	t.Log("a token the API refuses (expired) sends the tab through the issuer again")
	c := is.Claims("alice@example.com")
	c["iat"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
	expired := is.Sign(c)
	browsertest.Eval[bool](b, `(sessionStorage.setItem("converge.token", `+js(expired)+`), sessionStorage.setItem("converge.tokenKind", "oidc"),
		sessionStorage.setItem("converge.signedInAt", "0"), true)`)
	b.Open("/kinds", `[data-testid="signed-in-as"]`)
	b.WaitTrue("signed in again, on the page it was on", `location.pathname === "/kinds" && sessionStorage.getItem("converge.token") !== `+js(expired)+` &&
		document.querySelector('[data-testid="signed-in-as"]')?.textContent === "alice@example.com"`, 30*time.Second)

	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("the console logged %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for _, u := range b.Foreign() {
		if !strings.HasPrefix(u, is.URL()+"/") {
			t.Errorf("the console sent a request to %s, neither the server nor the issuer", u)
		}
	}
	if len(b.Foreign()) == 0 {
		t.Error("no request reached the issuer: the sign-in went untested")
	}
}
