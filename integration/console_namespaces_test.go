package integration

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/convergeplane/converge/internal/testkit/browsertest"
)

// TestConsoleNamespaces drives the console's namespace switcher in a real
// Chromium against the whole product: the same resource name lives in
// two namespaces; each namespace shows its own (its detail page too, the
// namespace kept in the URL across links), "All namespaces" shows both
// with a namespace column, and a namespace's list hears of its changes
// live.
func TestConsoleNamespaces(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAll(t)
	s.leafManifest("widget")
	ids := map[string]string{}
	for _, ns := range []string{"team-a", "team-b"} {
		if code, body := s.call("PUT", "/namespaces/"+ns, map[string]any{}); code != 201 && code != 200 {
			t.Fatalf("namespace %s = %d %s", ns, code, body)
		}
		code, body := s.call("POST", "/resources?namespace="+ns, map[string]any{"kind": "widget", "kind_version": 1, "name": "twin",
			"labels": map[string]string{"team": ns}, "spec": map[string]any{}})
		if code != 201 {
			t.Fatalf("twin in %s = %d %s", ns, code, body)
		}
		var r struct{ ID string }
		must(t, json.Unmarshal(body, &r))
		ids[ns] = r.ID
	}
	if code, body := s.call("POST", "/resources?namespace=team-b", map[string]any{"kind": "widget", "kind_version": 1, "name": "only-b", "spec": map[string]any{}}); code != 201 {
		t.Fatalf("only-b = %d %s", code, body)
	}

	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})
	rows := `[...document.querySelectorAll("table.resources tbody tr")]`
	names := rows + `.map(r => r.dataset.resource).sort().join(",")`
	switcher := `[data-testid="namespace-switcher"]`

	t.Log("default: neither twin")
	b.Open("/resources", `table.resources`)
	b.WaitTrue("the namespaces in the switcher", `["team-a", "team-b", "default", "*"].every(v => [...document.querySelectorAll('`+switcher+` option')].some(o => o.value === v))`, 30*time.Second)
	b.WaitTrue("no resource in default", `document.body.innerText.includes("No resource matches.")`, 30*time.Second)

	t.Log("team-a: its twin, no namespace column; its detail in team-a")
	choose(b, switcher, "team-a")
	b.WaitTrue("team-a's list", `location.search === "?ns=team-a" && `+names+` === "widget/twin" && !document.querySelector("[data-namespace]")`, 30*time.Second)
	b.Do("open twin", chromedp.Click(chromedp.CSS(`tr[data-resource="widget/twin"] a`)))
	b.WaitTrue("team-a's twin", `location.pathname === "/resources/widget/twin" && location.search === "?ns=team-a" &&
		document.querySelector('[data-testid="namespace"]')?.textContent === "team-a" && document.body.innerText.includes(`+js(ids["team-a"])+`)`, 30*time.Second)
	b.Screenshot("namespace-detail")
	click(b, ".crumbs", "Resources")
	b.WaitTrue("back to team-a's list", `location.pathname === "/resources" && location.search === "?ns=team-a" && `+names+` === "widget/twin"`, 30*time.Second)

	t.Log("team-a hears of its own changes live")
	if code, body := s.call("POST", "/resources?namespace=team-a", map[string]any{"kind": "widget", "kind_version": 1, "name": "late-a", "spec": map[string]any{}}); code != 201 {
		t.Fatalf("late-a = %d %s", code, body)
	}
	b.WaitTrue("late-a, live", names+` === "widget/late-a,widget/twin"`, 30*time.Second)

	t.Log("team-b: its twin and only-b")
	choose(b, switcher, "team-b")
	b.WaitTrue("team-b's list", `location.search === "?ns=team-b" && `+names+` === "widget/only-b,widget/twin"`, 30*time.Second)
	b.Do("open twin", chromedp.Click(chromedp.CSS(`tr[data-resource="widget/twin"] a`)))
	b.WaitTrue("team-b's twin", `location.search === "?ns=team-b" && document.querySelector('[data-testid="namespace"]')?.textContent === "team-b" &&
		document.body.innerText.includes(`+js(ids["team-b"])+`)`, 30*time.Second)

	t.Log("all namespaces: both twins, each with its namespace, each opening its own")
	choose(b, switcher, "*")
	b.WaitTrue("every namespace's list", `location.pathname === "/resources" && new URLSearchParams(location.search).get("ns") === "*" &&
		`+names+` === "widget/late-a,widget/only-b,widget/twin,widget/twin" &&
		[...document.querySelectorAll("table.resources thead th")].some(th => th.textContent === "namespace") &&
		[...document.querySelectorAll('tr[data-resource="widget/twin"] [data-namespace]')].map(c => c.textContent).sort().join(",") === "team-a,team-b"`, 30*time.Second)
	b.Screenshot("namespace-all")
	b.Do("open team-a's twin", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('tr[data-resource="widget/twin"]')].find(r => r.querySelector('[data-namespace="team-a"]')).querySelector("a")`)))
	b.WaitTrue("team-a's twin from the All list", `location.search === "?ns=team-a" && document.querySelector('[data-testid="namespace"]')?.textContent === "team-a"`, 30*time.Second)
	b.CheckClean()
}
