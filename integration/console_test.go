package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
	"github.com/convergeplane/converge/ui"
)

// consoleBrowser returns the Chromium to drive, or skips the test: the
// console's tests need a browser and a built console (`make test-ui`
// installs the one and builds the other).
func consoleBrowser(t *testing.T) string {
	t.Helper()
	chrome := browsertest.Chromium()
	if chrome == "" {
		t.Skip("no Chromium on PATH (or $CHROMIUM): the console's browser tests need one; make test-ui installs it")
	}
	if _, built := ui.Files(); !built {
		t.Skip("the console is not built into this test binary (ui/site/dist is missing): make test-ui builds it (make ui)")
	}
	return chrome
}

// consoleArtifacts is where the screenshots go: $CONSOLE_ARTIFACTS, else
// ui/screenshots (git ignores it).
func consoleArtifacts(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CONSOLE_ARTIFACTS"); d != "" {
		return d
	}
	d, err := filepath.Abs(filepath.Join("..", "ui", "screenshots"))
	must(t, err)
	return d
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fill sets a React-controlled field's value the way typing does: through
// the element's native value setter, then an input event.
func fill(b *browsertest.Browser, sel, value string) {
	browsertest.Eval[bool](b, `(() => {
		const el = document.querySelector(`+js(sel)+`);
		const set = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(el), "value").set;
		set.call(el, `+js(value)+`);
		el.dispatchEvent(new Event("input", {bubbles: true}));
		return true;
	})()`)
}

// click clicks, with a real mouse event, the first button or link whose
// text is text inside the element sel.
func click(b *browsertest.Browser, sel, text string) {
	b.Do("click "+text, chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll(`+js(sel+` button, `+sel+` a`)+`)].find(e => e.textContent.trim() === `+js(text)+`)`)))
}

// legend reads the graph page's legend: the nodes in phase, and in all.
func legend(b *browsertest.Browser, phase string) (int, int) {
	var got struct{ N, Total int }
	raw := browsertest.Eval[string](b, `JSON.stringify({
		n: Number(document.querySelector('[data-testid="legend"] [data-phase=`+js(phase)+`]')?.dataset.count ?? -1),
		total: Number(document.querySelector('[data-testid="legend"]')?.dataset.total ?? -1)})`)
	must(b.T(), json.Unmarshal([]byte(raw), &got))
	return got.N, got.Total
}

// TestConsole drives the console in a real Chromium against the whole
// product (ROLE all) on a real database, with the classic demo's provider
// as its own process: it applies a kind through the console and sees the
// stability gate refuse a breaking republish field by field, watches the
// small BOM converge on the graph page, filters the list by phase, opens a
// detail page, rotates an endpoint secret (shown once), creates and deletes
// a reactor binding, visits every page in both themes and a narrow window,
// and checks that the console sent nothing to another origin, logged no
// error, and sends nothing while it sits idle.
func TestConsole(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAll(t)
	bin := buildClassicProvider(t)
	o := classicObjectsOf(t, bin, "small")
	// Each leaf takes 300 ms, and a tenth of the calls fail transiently: the
	// tree takes seconds to converge, so the graph is seen converging, and
	// the endpoint has failed deliveries to show.
	s.startClassicProvider(bin, o.Manifests, "FAKE_WORK_DELAY=300ms", "FAKE_FAULT_RATE=0.1")
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})

	var bomKind map[string]any
	for _, m := range o.Manifests {
		if m["kind"] == "classicbom" {
			bomKind = m
			continue
		}
		if code, body := s.call("PUT", "/kinds/"+m["kind"].(string)+"/manifest", m); code != 201 {
			t.Fatalf("manifest %s = %d %s", m["kind"], code, body)
		}
	}
	for _, pc := range o.ProviderConfigs {
		s.stdPost("/providerconfigs", pc, 201)
	}

	t.Log("kinds: the BOM's kind is applied through the console")
	b.Open("/kinds", `[data-kind="account"]`)
	bomJSON, err := json.MarshalIndent(bomKind, "", "  ")
	must(t, err)
	fill(b, `[data-testid="manifest-text"]`, string(bomJSON))
	click(b, "#main", "Apply manifest")
	b.WaitTrue("the apply's result", `document.querySelector('[data-testid="apply-result"]').textContent === "classicbom/1: created"`, 30*time.Second)
	// The kinds table hears of it through the change stream, no reload.
	b.WaitTrue("classicbom in the kinds table", `!!document.querySelector('[data-kind="classicbom"]')`, 30*time.Second)
	b.Screenshot("kinds")

	t.Log("kinds: a breaking republish is refused, change by change")
	b.Open("/kinds/classicbom/1", `[data-testid="manifest-text"]`)
	b.WaitTrue("the schema table", `!!document.querySelector('table[aria-label="spec schema"]')`, 30*time.Second)
	breaking := map[string]any{}
	must(t, json.Unmarshal(bomJSON, &breaking))
	spec := breaking["spec_schema"].(map[string]any)
	spec["properties"].(map[string]any)["cost_center"] = map[string]any{"type": "string"}
	spec["required"] = append(spec["required"].([]any), "cost_center")
	breakingJSON, err := json.Marshal(breaking)
	must(t, err)
	fill(b, `[data-testid="manifest-text"]`, string(breakingJSON))
	click(b, "#main", "Apply manifest")
	b.WaitTrue("the stability gate's refusal", `!!document.querySelector('.problem[data-problem-type="urn:converge:problem:breaking-change"] tr[data-location^="body.spec_schema"]')`, 30*time.Second)
	// The comma discards what scrollIntoView returns: undefined, or a
	// Promise in newer Chromium, which does not decode as a bool.
	browsertest.Eval[bool](b, `(document.querySelector(".problem").scrollIntoView({block: "center"}), true)`)
	b.Screenshot("kind-refused")

	t.Log("graph: the small BOM converges live")
	bom := o.Resources[0]
	root := bom["name"].(string)
	want := len(bomChildren(bom)) + 1
	s.applyResource(bom)
	b.Open("/graph/classicbom/"+root, `[data-graph-ready="true"]`)
	readyMS, err := strconv.Atoi(browsertest.Eval[string](b, `document.querySelector('[data-testid="graph"]').dataset.readyMs`))
	must(t, err)
	sawConverging := false
	deadline := time.Now().Add(90 * time.Second)
	for {
		ready, total := legend(b, "Ready")
		if ready < total || total < want {
			if !sawConverging {
				b.Screenshot("graph-converging")
			}
			sawConverging = true
		}
		if ready == want && total == want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the graph shows %d of %d nodes Ready after 90s, want %d of %d", ready, total, want, want)
		}
		time.Sleep(100 * time.Millisecond) // the page updates itself; this only watches it
	}
	if !sawConverging {
		t.Error("the graph was never seen converging: it showed the tree Ready from its first render, so live updates went untested")
	}
	t.Logf("graph of %d nodes interactive %d ms after navigation; converged live", want, readyMS)
	b.Screenshot("graph")

	t.Log("resources: phase chips filter server-side")
	b.Open("/resources", `table.resources`)
	b.Do("chip Ready", chromedp.Click(chromedp.CSS(`[data-chip="Ready"]`)))
	b.WaitTrue("only Ready rows", `location.search.includes("phase=Ready") && document.querySelectorAll("table.resources tbody tr").length > 0 &&
		[...document.querySelectorAll("table.resources tbody tr [data-phase]")].every(e => e.dataset.phase === "Ready")`, 30*time.Second)
	b.Do("chip Reconciling", chromedp.Click(chromedp.CSS(`[data-chip="Reconciling"]`)))
	b.WaitTrue("the union", `location.search.includes("phase=Ready&phase=Reconciling")`, 30*time.Second)
	b.Do("chip Ready off", chromedp.Click(chromedp.CSS(`[data-chip="Ready"]`)))
	b.WaitTrue("no Reconciling row", `!location.search.includes("Ready") && document.body.innerText.includes("No resource matches.")`, 30*time.Second)
	b.Do("chip Reconciling off", chromedp.Click(chromedp.CSS(`[data-chip="Reconciling"]`)))
	b.WaitTrue("every row again", `document.querySelectorAll("table.resources tbody tr").length > 0`, 30*time.Second)
	b.Screenshot("resources")

	t.Log("resource detail")
	b.Do("open the root", chromedp.Click(chromedp.CSS(`tr[data-resource="classicbom/`+root+`"] a`)))
	b.WaitTrue("the detail", `document.querySelector("h1")?.textContent.includes("classicbom/`+root+`") &&
		document.querySelector('[data-testid="generation"]')?.textContent.includes("(synced)") &&
		[...document.querySelectorAll("h2")].some(h => /^Children \([1-9]/.test(h.textContent))`, 30*time.Second)
	b.Screenshot("resource-detail")

	t.Log("endpoints: rotate a secret, shown once")
	b.Open("/endpoints", `tr[data-endpoint="classic"]`)
	b.WaitTrue("the endpoint's health per kind", `!!document.querySelector('tr[data-endpoint="classic"] [data-pair="account/1"][data-ready="true"]')`, 30*time.Second)
	b.Screenshot("endpoints")
	click(b, `tr[data-endpoint="classic"]`, "classic")
	click(b, "#main", "Rotate secret") // the page asks to confirm; the browser accepts
	b.WaitTrue("the new secret", `document.querySelector('[data-testid="new-secret"] .secret-value')?.textContent.startsWith("whsec_")`, 30*time.Second)
	secret := browsertest.Eval[string](b, `document.querySelector('[data-testid="new-secret"] .secret-value').textContent`)
	if _, body := s.call("GET", "/endpoints/classic", nil); strings.Contains(string(body), secret) {
		t.Error("the API shows the rotated secret again")
	}
	b.Screenshot("endpoint")

	t.Log("reactor bindings: create and delete through the console")
	b.Open("/bindings", `table[aria-label="Reactor bindings"]`)
	click(b, "#main", "New reactor binding")
	fill(b, `[data-testid="doc-text"]`, `{"name":"console-made","watch_kind":"account","transition":"synced","reactor":"statussink","label_match":{"team":"nobody"},"enabled":false}`)
	click(b, "#main", "Apply")
	b.WaitTrue("the new binding", `!!document.querySelector('tr[data-binding="console-made"]')`, 30*time.Second)
	b.Screenshot("bindings")

	t.Log("reactor bindings: an edit made from a version someone has since changed is refused, not applied over theirs")
	click(b, `tr[data-binding="console-made"]`, "Edit")
	b.WaitTrue("the editor, with the version it read", `document.querySelector('[data-testid="doc-text"]')?.value.includes('"resource_version"')`, 30*time.Second)
	theirs := map[string]any{"name": "console-made", "watch_kind": "account", "transition": "synced", "reactor": "statussink",
		"label_match": map[string]string{"team": "theirs"}, "enabled": false}
	s.stdPost("/reactor-bindings", theirs, 200)
	edited := browsertest.Eval[string](b, `document.querySelector('[data-testid="doc-text"]').value.replace('"nobody"', '"mine"')`)
	fill(b, `[data-testid="doc-text"]`, edited)
	click(b, "#main", "Apply")
	b.WaitTrue("the conflict, explained", `!!document.querySelector('.problem[data-problem-type="urn:converge:problem:version-conflict"] [data-testid="stale-version"]')`, 30*time.Second)
	if _, body := s.call("GET", "/reactor-bindings/console-made", nil); !strings.Contains(string(body), `"theirs"`) {
		t.Errorf("the console's stale edit overwrote the other change: %s", body)
	}
	b.Screenshot("binding-conflict")
	click(b, "#main", "Cancel")
	b.WaitTrue("their change in the table", `document.querySelector('tr[data-binding="console-made"]')?.textContent.includes("team=theirs")`, 30*time.Second)
	click(b, `tr[data-binding="console-made"]`, "Delete")
	b.WaitTrue("the binding gone", `!document.querySelector('tr[data-binding="console-made"]')`, 30*time.Second)
	if code, _ := s.call("GET", "/reactor-bindings/console-made", nil); code != 404 {
		t.Errorf("the deleted binding answers %d, want 404", code)
	}

	t.Log("provider configs, cluster")
	b.Open("/providerconfigs", `tr[data-config="vpc-v1-default"]`)
	b.Screenshot("providerconfigs")
	b.Open("/cluster", `tr[data-member="e2e-all"]`)
	b.Screenshot("cluster")

	t.Log("keyboard, themes, a narrow window")
	b.Open("/resources", `table.resources`)
	b.Do("tab", chromedp.KeyEvent("\t"))
	if got := browsertest.Eval[string](b, `document.activeElement.textContent`); got != "Skip to content" {
		t.Errorf("the first Tab focuses %q, want the skip link", got)
	}
	click(b, ".top", "Theme: system") // system -> dark
	b.WaitTrue("the dark theme", `document.documentElement.dataset.theme === "dark" &&
		getComputedStyle(document.body).backgroundColor === "rgb(13, 17, 23)"`, 15*time.Second)
	b.Screenshot("resources-dark")
	b.Open("/graph/classicbom/"+root, `[data-graph-ready="true"]`)
	b.Screenshot("graph-dark")
	click(b, ".top", "Theme: dark") // dark -> light
	b.Resize(390, 844)
	b.Open("/resources/classicbom/"+root, `[data-testid="generation"]`)
	if w := browsertest.Eval[int](b, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("at 390 px wide the detail page is %d px wide: it scrolls sideways", w)
	}
	b.Screenshot("narrow")
	b.Resize(1280, 800)

	t.Log("idle: an open console sends nothing while nothing changes")
	idle := consoleIdle(t, s, b, "/graph/classicbom/"+root, `[data-graph-ready="true"]`, 1, 8*time.Second)
	t.Logf("idle console: %d requests in %s; %.2f transactions/s open, %.2f/s without it (%+.2f/s)",
		idle.requests, idle.window, idle.open, idle.closed, idle.open-idle.closed)
	if idle.requests > int(idle.window.Seconds()) {
		t.Errorf("an idle console sent %d requests in %s, more than one a second", idle.requests, idle.window)
	}

	b.CheckClean()
}

// idleFigures is what consoleIdle measures.
type idleFigures struct {
	window       time.Duration
	requests     int     // the page's requests in its open windows
	open, closed float64 // transactions a second, the medians of the windows with the console open and without it
}

// consoleIdle measures pairs windows with the console open as it is, each
// followed by one with the page closed (about:blank), reopening path: the
// requests the page sent and the database's transactions a second. The
// server's own duties (drain and claim polls, heartbeats, health probes,
// autovacuum) commit ~15 transactions a second; medians of alternating
// windows keep their bursts out of the difference.
func consoleIdle(t *testing.T, s *server, b *browsertest.Browser, path, ready string, pairs int, window time.Duration) idleFigures {
	t.Helper()
	commits := func() int64 {
		var n int64
		must(t, s.db.Pool.QueryRow(t.Context(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
	settle := func() { time.Sleep(2 * time.Second) } // the page's first reads and its stream's open land
	rate := func() float64 {
		c0 := commits()
		time.Sleep(window) // the measurement is the window itself
		return float64(commits()-c0) / window.Seconds()
	}
	f := idleFigures{window: time.Duration(pairs) * window}
	var open, closed []float64
	for range pairs {
		b.Open(path, ready)
		settle()
		start := time.Now()
		open = append(open, rate())
		f.requests += len(b.Requests(start))
		b.Do("close the console", chromedp.Navigate("about:blank"))
		settle()
		closed = append(closed, rate())
	}
	slices.Sort(open)
	slices.Sort(closed)
	f.open, f.closed = open[pairs/2], closed[pairs/2]
	return f
}

// TestConsoleAsksForAToken: with API tokens on, the console loads, asks for
// a token when the API answers 401, and then reads with it, its change
// stream included.
func TestConsoleAsksForAToken(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	const token = "console-admin-token"
	s := startAllWith(t, func(c *convergecli.Config) { c.AdminTokens = []string{token} })
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t)})
	b.Open("/resources", `.token-prompt input[type="password"]`)
	b.Screenshot("token-prompt")
	fill(b, `.token-prompt input[type="password"]`, token)
	click(b, ".token-prompt", "Use token")
	b.WaitTrue("the list, with the token", `!!document.querySelector("table.resources") && !document.querySelector(".token-prompt")`, 30*time.Second)
	b.WaitTrue("the change stream, with the token", `document.querySelector(".live")?.textContent === "live"`, 30*time.Second)
	if got := browsertest.Eval[string](b, `sessionStorage.getItem("converge.token")`); got != token {
		t.Errorf("the token is kept as %q", got)
	}
	b.CheckClean()
}
