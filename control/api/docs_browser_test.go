package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
	"github.com/convergeplane/converge/ui/apidocs"
)

// TestDocsViewerOffline opens /docs in a real headless Chromium that can
// resolve no host name (as without internet) and sees Swagger UI render
// every operation of the document and offer both token schemes, with no
// request to another host and nothing logged as an error (a CSP violation
// included). make test-ui runs it; it skips without Chromium or a built
// viewer (make docs-viewer).
func TestDocsViewerOffline(t *testing.T) {
	t.Parallel()
	chrome := browsertest.Chromium()
	if chrome == "" {
		t.Skip("no Chromium on PATH (or $CHROMIUM): make test-ui installs it")
	}
	if _, built := apidocs.Files(); !built {
		t.Skip("the /docs viewer is not built into this test binary (ui/apidocs/site/dist is missing): make docs-viewer builds it")
	}
	b := setup(t, api.Config{ReadTokens: []string{"reader-token"}, AdminTokens: []string{"admin-token"}, Endpoints: endpointsConfig(t)})
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	b.do(http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK).decode(t, &doc)
	ops := 0
	for _, item := range doc.Paths {
		ops += len(item)
	}

	br := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: b.base, Offline: true, Timeout: 45 * time.Second})
	br.Open("/docs", ".swagger-ui .information-container")
	br.WaitTrue("every operation rendered", `document.querySelectorAll(".swagger-ui .opblock").length === `+strconv.Itoa(ops), 45*time.Second)
	br.Do("open the Authorize dialog", chromedp.Click(chromedp.CSS(".swagger-ui .auth-wrapper .authorize")))
	br.WaitTrue("both token schemes offered", `(() => { const t = document.querySelector(".swagger-ui .dialog-ux")?.innerText ?? "";
		return t.includes("readToken") && t.includes("adminToken"); })()`, 10*time.Second)
	br.CheckClean()
}
