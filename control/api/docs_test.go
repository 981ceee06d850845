package api_test

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/ui/apidocs"
)

// TestDocsServedFromTheBinary: GET /docs answers the viewer's page with a
// same-origin-only Content-Security-Policy, names no other host, and every
// file it loads is served by this server, without a token. With the viewer
// built (make docs-viewer, which make test runs when npm is present) that is
// Swagger UI loading /openapi.json; without it, the page saying how to build
// it.
func TestDocsServedFromTheBinary(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{ReadTokens: []string{"reader-token"}, AdminTokens: []string{"admin-token"}})
	_, built := apidocs.Files()

	page := b.do(http.MethodGet, "/docs", nil).want(t, http.StatusOK)
	if ct := page.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("/docs Content-Type %q, want text/html", ct)
	}
	csp := page.header.Get("Content-Security-Policy")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !slices.Contains(strings.Split(csp, "; "), d) {
			t.Errorf("/docs Content-Security-Policy %q lacks %q", csp, d)
		}
	}
	if strings.Contains(csp, "http") || strings.Contains(csp, "unsafe") {
		t.Errorf("/docs Content-Security-Policy %q allows another host or inline code", csp)
	}
	if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+`).FindString(string(page.body)); m != "" {
		t.Errorf("/docs names another host: %q\n%s", m, page.body)
	}

	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(page.body), -1)
	var loaded []string
	for _, m := range refs {
		ref := m[1]
		if !strings.HasPrefix(ref, "/") {
			t.Errorf("/docs loads %q: every file it loads is a path on this server", ref)
			continue
		}
		r := b.do(http.MethodGet, ref, nil).want(t, http.StatusOK)
		if len(r.body) == 0 {
			t.Errorf("%s is empty", ref)
		}
		loaded = append(loaded, ref)
	}
	if !built {
		t.Logf("the viewer is not built into this test binary (make docs-viewer): checked the placeholder page, which loads %v", loaded)
		if !strings.Contains(string(page.body), "make docs-viewer") {
			t.Errorf("the placeholder does not say how to build the viewer:\n%s", page.body)
		}
		return
	}
	for _, want := range []string{"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/docs/docs.js"} {
		if !slices.Contains(loaded, want) {
			t.Errorf("/docs does not load %s (it loads %v)", want, loaded)
		}
	}
	bundle := b.do(http.MethodGet, "/docs/swagger-ui-bundle.js", nil).want(t, http.StatusOK)
	if ct := bundle.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") || len(bundle.body) < 100_000 {
		t.Errorf("/docs/swagger-ui-bundle.js is %d bytes of %q, want Swagger UI's bundle", len(bundle.body), ct)
	}
	if init := b.do(http.MethodGet, "/docs/docs.js", nil).want(t, http.StatusOK); !strings.Contains(string(init.body), `"/openapi.json"`) {
		t.Errorf("/docs/docs.js does not load /openapi.json:\n%s", init.body)
	}
	// Unchanged files are revalidated, not sent again.
	etag := bundle.header.Get("ETag")
	if etag == "" {
		t.Fatal("/docs/swagger-ui-bundle.js has no ETag")
	}
	b.do(http.MethodGet, "/docs/swagger-ui-bundle.js", nil, "If-None-Match: "+etag).want(t, http.StatusNotModified)
	b.do(http.MethodGet, "/docs/nothing.js", nil).wantProblem(t, http.StatusNotFound, "")
}

// TestOpenAPISecurityAndServers: the document carries the three bearer
// schemes and a relative server, and each operation's security says what
// the server enforces: every operation is called with a read token, and a
// read one passes auth while a write (admin token only, with a 403
// documented) is refused 403; /livez, /readyz and /api/v1/auth/config take
// none.
func TestOpenAPISecurityAndServers(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{ReadTokens: []string{"reader-token"}, AdminTokens: []string{"admin-token"}, Endpoints: endpointsConfig(t)})
	var doc struct {
		Servers []struct {
			URL string `json:"url"`
		} `json:"servers"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type, Scheme, Description string
			} `json:"securitySchemes"`
		} `json:"components"`
		Paths map[string]map[string]struct {
			OperationID string                 `json:"operationId"`
			Security    *[]map[string][]string `json:"security"`
			Responses   map[string]any         `json:"responses"`
		} `json:"paths"`
	}
	b.do(http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK).decode(t, &doc)
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/" {
		t.Errorf("servers %+v, want one, the relative /", doc.Servers)
	}
	for _, name := range []string{"readToken", "adminToken", "oidcToken"} {
		s, ok := doc.Components.SecuritySchemes[name]
		if !ok || s.Type != "http" || s.Scheme != "bearer" || s.Description == "" {
			t.Errorf("securitySchemes.%s = %+v, want an http bearer scheme with a description", name, s)
		}
	}

	const read = "Authorization: Bearer reader-token"
	params := regexp.MustCompile(`\{[^}]+\}`)
	n := 0
	for p, item := range doc.Paths {
		for method, op := range item {
			n++
			what := strings.ToUpper(method) + " " + p
			if op.Security == nil {
				t.Errorf("%s has no security requirement", what)
				continue
			}
			var schemes []string
			for _, req := range *op.Security {
				for name := range req {
					schemes = append(schemes, name)
				}
			}
			slices.Sort(schemes)
			isRead := method == "get" || method == "head"
			want := []string{"adminToken", "oidcToken"}
			switch {
			case !strings.HasPrefix(p, api.Prefix) || p == api.Prefix+"/auth/config":
				want = nil
			case isRead && op.OperationID == "list-audit":
				want = []string{"adminToken", "oidcToken"} // an admin's to read
			case isRead:
				want = []string{"adminToken", "oidcToken", "readToken"}
			}
			if !slices.Equal(schemes, want) {
				t.Errorf("%s: security %v, want %v", what, schemes, want)
			}
			if want == nil {
				continue
			}
			if _, ok := op.Responses["401"]; !ok {
				t.Errorf("%s documents no 401", what)
			}
			if _, ok := op.Responses["403"]; !ok && !isRead {
				t.Errorf("%s (a write) documents no 403", what)
			}
			r := b.do(strings.ToUpper(method), params.ReplaceAllString(p, "x"), nil, read)
			switch {
			case isRead && slices.Contains(want, "readToken") && (r.status == http.StatusUnauthorized || r.status == http.StatusForbidden):
				t.Errorf("%s with a read token: %d, but the document lets a read token call it", what, r.status)
			case !slices.Contains(want, "readToken") && r.status != http.StatusForbidden:
				t.Errorf("%s with a read token: %d, want 403 (the document says admin only)", what, r.status)
			}
		}
	}
	if n < 40 {
		t.Errorf("the document has %d operations: the walk is broken", n)
	}
}
