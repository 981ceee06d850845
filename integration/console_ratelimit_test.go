package integration

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/convergeplane/converge/internal/testkit/browsertest"
)

// TestConsoleEndpointRateLimit: the endpoint page shows a rate limit with
// the shared bucket's state (effective rate, waits, throttles) and edits
// it; a bad value shows the server's problem naming the field and changes
// nothing.
func TestConsoleEndpointRateLimit(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAllWith(t, nil)
	s.stdPost("/endpoints", map[string]any{"name": "limited", "kinds": []map[string]any{{"kind": "box", "kind_version": 1}},
		"target": map[string]any{"type": "https", "url": "http://127.0.0.1:9/limited"}, "rate_limit": 20, "rate_adaptive": true}, 201)
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t)})
	b.Open("/endpoints/limited", `[data-testid="rate-limit"]`)
	b.WaitTrue("the limit and the bucket's state", `document.querySelector('[data-testid="rate-limit"]')?.textContent === "20/s, burst 20, adaptive" &&
		document.querySelector('[data-testid="effective-rate"]')?.textContent === "20/s" &&
		document.querySelector('[data-testid="rate-waited"]')?.textContent === "0" &&
		document.querySelector('[data-testid="rate-throttles"]')?.textContent === "0"`, 30*time.Second)
	b.Screenshot("endpoint-rate-limit")

	fill(b, `form[aria-label="Rate limit"] input[name="rate_limit"]`, "5")
	fill(b, `form[aria-label="Rate limit"] input[name="burst"]`, "2")
	click(b, `form[aria-label="Rate limit"]`, "Save rate limit")
	b.WaitTrue("the new limit", `document.querySelector('[data-testid="rate-limit"]')?.textContent === "5/s, burst 2, adaptive"`, 30*time.Second)
	var ep struct {
		RateLimit    float64 `json:"rate_limit"`
		Burst        int     `json:"burst"`
		RateAdaptive bool    `json:"rate_adaptive"`
		Target       struct {
			URL string `json:"url"`
		} `json:"target"`
	}
	get := func() {
		t.Helper()
		_, body := s.call("GET", "/endpoints/limited", nil)
		must(t, json.Unmarshal(body, &ep))
	}
	get()
	if ep.RateLimit != 5 || ep.Burst != 2 || !ep.RateAdaptive || ep.Target.URL != "http://127.0.0.1:9/limited" {
		t.Fatalf("after the console's save: %+v, want 5/s, burst 2, adaptive, the target unchanged", ep)
	}

	fill(b, `form[aria-label="Rate limit"] input[name="rate_limit"]`, "0")
	click(b, `form[aria-label="Rate limit"]`, "Save rate limit")
	b.WaitTrue("the problem naming the field", `document.querySelector("#main .problem")?.textContent.includes("body.rate_limit")`, 30*time.Second)
	get()
	if ep.RateLimit != 5 || ep.Burst != 2 {
		t.Errorf("a refused save changed the endpoint: %+v", ep)
	}
	b.CheckClean()
}
