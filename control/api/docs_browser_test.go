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
// every operation of the document and offer both token schemes, and runs
// one operation with a read token (Try it out), with no
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

	// Try it out with the read token: the call goes to this server, with it.
	browsertest.Eval[bool](br, `(() => {
		const box = [...document.querySelectorAll(".swagger-ui .dialog-ux .auth-container")].find(e => e.innerText.includes("readToken"));
		const input = box.querySelector("input");
		Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(input, "reader-token");
		input.dispatchEvent(new Event("input", {bubbles: true}));
		[...box.querySelectorAll("button")].find(e => e.textContent.trim() === "Authorize").click();
		return true;
	})()`)
	br.Do("close the dialog", chromedp.Click(chromedp.CSS(".swagger-ui .dialog-ux .close-modal")))
	br.Do("open GET /api/v1/version", chromedp.Click(chromedp.CSS("#operations-Health-get-version .opblock-summary-control")))
	br.Do("try it out", chromedp.Click(chromedp.CSS("#operations-Health-get-version .try-out__btn")))
	br.Do("execute", chromedp.Click(chromedp.CSS("#operations-Health-get-version .execute")))
	// The server has tokens configured: its 200 says the token went with the call.
	br.WaitTrue("the server's answer", `(() => { const t = document.querySelector("#operations-Health-get-version")?.innerText ?? "";
		return /Server response\s+Code\s+Details\s+200\b/.test(t) && t.includes('"version": "dev"'); })()`, 20*time.Second)
	br.CheckClean()
}
