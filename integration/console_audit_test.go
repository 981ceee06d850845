package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
)

// TestConsoleAudit drives the console's Audit page in a real Chromium
// against the whole product with API tokens on: the trail lists every write
// (a refused one with a bad token and a 422 included) with its subject,
// object and versions; the filters (outcome, object) narrow it server-side
// and live in the URL; keyset pages go forward and back; and a resource's
// events name who caused each.
func TestConsoleAudit(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	const token = "audit-admin-token"
	s := startAllWith(t, func(c *convergecli.Config) { c.AdminTokens = []string{token} })
	send := func(method, path, body, bearer string, want int) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, s.base+"/api/v1"+path, strings.NewReader(body))
		must(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, got, want)
		}
	}
	send("PUT", "/kinds/leafy/manifest", `{"kind":"leafy","kind_version":1,"reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`, token, 201)
	send("POST", "/resources", `{"kind":"leafy","kind_version":1,"name":"l1","spec":{"n":1}}`, token, 201)
	send("POST", "/resources", `{"kind":"leafy","kind_version":1,"name":"l1","spec":{"n":2}}`, token, 200)
	send("POST", "/resources", `{"kind":"leafy","kind_version":1,"name":"l2","spec":{}}`, "not-a-token", 401)
	send("POST", "/resources", `{"kind":"leafy","kind_version":1,"name":"Not Valid","spec":{}}`, token, 422)

	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})
	rows := `[...document.querySelectorAll('table[aria-label="Audit"] tbody tr')]`

	t.Log("the page, from the nav, with a token: every write, refusals included")
	b.Open("/resources", `.token-prompt input[type="password"]`)
	fill(b, `.token-prompt input[type="password"]`, token)
	click(b, ".token-prompt", "Use token")
	b.WaitTrue("the nav", `!!document.querySelector('nav[aria-label="Console"]') && !document.querySelector(".token-prompt")`, 30*time.Second)
	click(b, "nav", "Audit")
	b.WaitTrue("five requests: the manifest, two applies, a refusal, a 422", rows+`.length === 5 &&
		`+rows+`.some(r => r.dataset.outcome === "refused" && r.dataset.subject === "unauthenticated") &&
		`+rows+`.some(r => r.dataset.outcome === "error" && r.dataset.object === "leafy/Not Valid") &&
		`+rows+`.filter(r => r.dataset.subject === "token:admin-0").length === 4`, 30*time.Second)
	b.Screenshot("audit")

	t.Log("filters: outcome, then the object, each in the URL")
	choose(b, `select[name="outcome"]`, "refused")
	click(b, "#main", "Filter")
	b.WaitTrue("only the refusal", `location.search.includes("outcome=refused") && `+rows+`.length === 1 &&
		`+rows+`[0].dataset.outcome === "refused"`, 30*time.Second)
	choose(b, `select[name="outcome"]`, "")
	fill(b, `input[name="kind"]`, "leafy")
	fill(b, `input[name="name"]`, "l1")
	click(b, "#main", "Filter")
	b.WaitTrue("only l1's create and update, the update with both versions", `location.search.includes("name=l1") && !location.search.includes("outcome") &&
		`+rows+`.length === 2 && `+rows+`.every(r => r.dataset.object === "leafy/l1") &&
		/^\d+ → \d+$/.test(`+rows+`[0].cells[5].textContent.trim()) && /^– → \d+$/.test(`+rows+`[1].cells[5].textContent.trim())`, 30*time.Second)

	t.Log("keyset pages: one request a page, forward and back")
	b.Open("/audit?limit=1", `table[aria-label="Audit"] tbody tr`)
	first := browsertest.Eval[string](b, rows+`[0].dataset.audit`)
	click(b, "#main", "Next →")
	b.WaitTrue("page 2, an older request", `document.querySelector('[data-testid="page-summary"]').textContent.includes("page 2") &&
		`+rows+`.length === 1 && Number(`+rows+`[0].dataset.audit) < `+first, 30*time.Second)
	click(b, "#main", "← Previous")
	b.WaitTrue("page 1 again", `document.querySelector('[data-testid="page-summary"]').textContent.includes("page 1") &&
		`+rows+`[0].dataset.audit === `+js(first), 30*time.Second)

	t.Log("a resource's events name who caused them")
	b.Open("/resources/leafy/l1", `table[aria-label="Events"]`)
	b.WaitTrue("the applies by the token", `[...document.querySelectorAll('[data-testid="event-actor"]')].filter(td => td.textContent === "token:admin-0").length >= 2`, 30*time.Second)
	b.Screenshot("events-by")

	var trail struct {
		Items []json.RawMessage `json:"items"`
	}
	req, err := http.NewRequestWithContext(context.Background(), "GET", s.base+"/api/v1/audit?namespace=*", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	must(t, json.NewDecoder(bytes.NewReader(raw)).Decode(&trail))
	if len(trail.Items) != 5 {
		t.Errorf("the console's reads were recorded: %d entries, want the 5 writes", len(trail.Items))
	}
	b.CheckClean()
}
