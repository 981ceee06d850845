package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
)

// choose sets a React-controlled select's value the way a person's choice
// does: through the native setter, then a change event.
func choose(b *browsertest.Browser, sel, value string) {
	browsertest.Eval[bool](b, `(() => {
		const el = document.querySelector(`+js(sel)+`);
		const set = Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, "value").set;
		set.call(el, `+js(value)+`);
		el.dispatchEvent(new Event("change", {bubbles: true}));
		return el.value === `+js(value)+`;
	})()`)
}

// TestConsoleDeliveries drives the console's Deliveries page in a real
// Chromium against the whole product, with an SDK provider over real
// HTTP: the log lists every attempt, the filters (outcome, kind, endpoint,
// time) narrow it server-side, keyset pages go forward and back, the
// detail view shows the claim, the classification, the excerpt and links
// to the resource and the endpoint; Replay re-drives the resource under a
// new claim, logged in its events; Send test delivery on the endpoint
// page shows the round trip of a signed health request.
func TestConsoleDeliveries(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAll(t)
	s.leafManifest("flaky")
	s.leafManifest("steady")
	flaky := &runProvider{kind: "flaky"}
	flaky.fail.Store(true)
	s.serveProvider("deliv-ep", flaky, &runProvider{kind: "steady"})
	s.applyLeaf("steady", "s1")
	s.applyLeaf("steady", "s2")
	s.waitPhase("steady", "s1", string(model.PhaseReady), 30*time.Second)
	s.waitPhase("steady", "s2", string(model.PhaseReady), 30*time.Second)
	s.applyLeaf("flaky", "f1")
	var failed deliveryView
	waitFor(t, 30*time.Second, "a task_error of f1 in the log", func() bool {
		p := s.deliveries("kind=flaky&name=f1&classification=task_error")
		if len(p.Items) > 0 {
			failed = p.Items[len(p.Items)-1]
		}
		return len(p.Items) > 0
	})
	waitFor(t, 10*time.Second, "s1 and s2 in the log", func() bool { return len(s.deliveries("kind=steady").Items) >= 2 })

	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})
	rows := `[...document.querySelectorAll('table[aria-label="Deliveries"] tbody tr')]`

	t.Log("the page, from the nav: every attempt")
	b.Open("/resources", `nav[aria-label="Console"]`)
	click(b, "nav", "Deliveries")
	b.WaitTrue("both outcomes listed", rows+`.some(r => r.dataset.classification === "task_error") &&
		`+rows+`.some(r => r.dataset.classification === "ok")`, 30*time.Second)
	b.Screenshot("deliveries")

	t.Log("filters: outcome, kind, endpoint, time, each in the URL")
	choose(b, `select[name="outcome"]`, "task_error")
	click(b, "#main", "Filter")
	b.WaitTrue("only task errors", `location.search.includes("outcome=task_error") && `+rows+`.length > 0 &&
		`+rows+`.every(r => r.dataset.classification === "task_error")`, 30*time.Second)
	choose(b, `select[name="outcome"]`, "")
	b.WaitTrue("the kinds in the select", `[...document.querySelectorAll('select[name="kind"] option')].some(o => o.textContent === "steady")`, 30*time.Second)
	choose(b, `select[name="kind"]`, "steady")
	click(b, "#main", "Filter")
	b.WaitTrue("only steady's attempts", `location.search.includes("kind=steady") && !location.search.includes("outcome") && `+rows+`.length >= 2 &&
		`+rows+`.every(r => r.dataset.resource.startsWith("steady/") && r.dataset.classification === "ok")`, 30*time.Second)
	b.WaitTrue("the endpoints in the select", `[...document.querySelectorAll('select[name="endpoint"] option')].some(o => o.textContent === "deliv-ep")`, 30*time.Second)
	choose(b, `select[name="endpoint"]`, "deliv-ep")
	fill(b, `input[name="until"]`, "2001-01-01T00:00")
	click(b, "#main", "Filter")
	b.WaitTrue("nothing before 2001", `location.search.includes("until=2001") && location.search.includes("endpoint=deliv-ep") &&
		document.body.innerText.includes("No attempt matches.")`, 30*time.Second)

	// Paged over steady's attempts: f1 keeps failing and retrying, so the
	// newest attempts of the whole log move while the pages are turned.
	t.Log("keyset pages: one attempt a page, forward and back")
	b.Open("/deliveries?kind=steady&limit=1", `table[aria-label="Deliveries"] tbody tr`)
	first := browsertest.Eval[string](b, rows+`[0].dataset.delivery`)
	click(b, "#main", "Next →")
	b.WaitTrue("page 2, another attempt", `document.querySelector('[data-testid="page-summary"]').textContent.includes("page 2") &&
		`+rows+`.length === 1 && `+rows+`[0].dataset.delivery !== `+js(first), 30*time.Second)
	second, err := strconv.Atoi(browsertest.Eval[string](b, rows+`[0].dataset.delivery`))
	must(t, err)
	if f, _ := strconv.Atoi(first); second >= f {
		t.Errorf("page 2 shows attempt %d after %d: the log pages newest first", second, f)
	}
	click(b, "#main", "← Previous")
	b.WaitTrue("page 1 again", `document.querySelector('[data-testid="page-summary"]').textContent.includes("page 1") &&
		`+rows+`[0].dataset.delivery === `+js(first), 30*time.Second)

	t.Log("detail: the claim, the answer, the links")
	b.Open("/deliveries?kind=flaky&name=f1&outcome=task_error", `table[aria-label="Deliveries"] tbody tr`)
	b.Do("open the attempt", chromedp.Click(chromedp.CSS(`tr[data-delivery="`+strconv.FormatInt(failed.ID, 10)+`"] a`)))
	b.WaitTrue("the detail", `document.querySelector("h1")?.textContent === "Attempt #`+strconv.FormatInt(failed.ID, 10)+`" &&
		document.querySelector('[data-testid="classification"]')?.textContent === "task_error" &&
		document.querySelector('[data-testid="claim-epoch"]')?.textContent === "`+strconv.FormatInt(failed.ClaimEpoch, 10)+`" &&
		document.querySelector('[data-testid="excerpt"]')?.textContent.includes("disk on fire") &&
		document.querySelector('[data-testid="resource-link"]')?.getAttribute("href") === "/resources/flaky/f1" &&
		!!document.querySelector('a[href="/endpoints/deliv-ep"]') &&
		document.querySelector('pre[aria-label="Request envelope"]')?.textContent.includes(`+js(failed.TaskID)+`)`, 30*time.Second)
	b.Screenshot("delivery-detail")

	t.Log("replay: a new claim on today's desired state, logged in the resource's events")
	flaky.fail.Store(false)
	click(b, "#main", "Replay") // the page asks to confirm; the browser accepts
	b.WaitTrue("the replay's answer", `document.querySelector('[data-testid="replay-result"]')?.textContent.includes("new claim")`, 30*time.Second)
	if n := s.count(`SELECT count(*) FROM resource_events e JOIN resources r ON r.id = e.resource_id
		WHERE r.name = 'f1' AND e.type = 'delivery_replayed' AND e.message LIKE $1`, fmt.Sprintf("replayed delivery %d %%", failed.ID)); n != 1 {
		t.Errorf("%d replay events for delivery %d, want 1", n, failed.ID)
	}
	s.waitPhase("flaky", "f1", string(model.PhaseReady), 30*time.Second)
	waitFor(t, 10*time.Second, "an ok attempt of f1 under a newer claim", func() bool {
		for _, d := range s.deliveries("kind=flaky&name=f1&classification=ok").Items {
			if d.ClaimEpoch > failed.ClaimEpoch {
				return true
			}
		}
		return false
	})

	t.Log("send test delivery: the round trip of a signed health request")
	b.Open("/endpoints/deliv-ep", `[data-testid="inflight"]`)
	click(b, "#main", "Send test delivery")
	b.WaitTrue("the round trip", `(() => {
		const c = document.querySelector('[data-testid="test-delivery"]');
		return c?.dataset.classification === "ok" && c.innerText.includes("200") && c.innerText.includes("flaky/1: ready") && c.innerText.includes(" ms");
	})()`, 30*time.Second)
	b.Screenshot("endpoint-test-delivery")

	b.CheckClean()
}
