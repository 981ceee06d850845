package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestConsoleBindingsLive opens a tab on the reactor bindings page first:
// the header says live (the page opens the change stream), and a binding
// another client writes appears without a reload (the bindings topic).
func TestConsoleBindingsLive(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAll(t)
	s.leafManifest("watched")
	if code, body := s.call("PUT", "/kinds/notifier/manifest", map[string]any{"kind": "notifier", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]`)}); code != 201 {
		t.Fatalf("manifest notifier = %d %s", code, body)
	}
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})
	b.Open("/bindings", `table[aria-label="Reactor bindings"]`)
	b.WaitTrue("the header to say live", `document.querySelector('header .live')?.textContent === "live"`, 30*time.Second)
	s.bind(map[string]any{"name": "elsewhere-made", "watch_kind": "watched", "transition": "failed", "reactor": "notifier"})
	b.WaitTrue("the binding another client made", `!!document.querySelector('tr[data-binding="elsewhere-made"]')`, 30*time.Second)
	if code, body := s.call("DELETE", "/reactor-bindings/elsewhere-made", nil); code != 204 && code != 200 {
		t.Fatalf("delete binding = %d %s", code, body)
	}
	b.WaitTrue("the binding another client deleted gone", `!document.querySelector('tr[data-binding="elsewhere-made"]')`, 30*time.Second)
	b.Screenshot("bindings-live")
	b.CheckClean()
}

// TestConsoleRecoverFailed uses the Failed view's Recover action: the
// confirm dialog shows the server's dry-run count for the view's label
// filter, changes nothing until confirmed, and its confirmation re-drives
// exactly those resources (their provider now fixed) to Ready.
func TestConsoleRecoverFailed(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAll(t)
	s.leafManifest("quota")
	p := &brokenProvider{kind: "quota"}
	p.broken.Store(true)
	s.serveProvider("quota", p)
	for _, r := range []struct{ name, team string }{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}} {
		s.apply("quota", r.name, map[string]string{"team": r.team}, map[string]any{})
	}
	for _, n := range []string{"a1", "a2", "b1"} {
		s.waitPhase("quota", n, string(model.PhaseFailed), 30*time.Second)
	}
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})

	// Only the Failed view offers it.
	b.Open("/resources?phase=Ready", `table[aria-label="Resources"]`)
	if browsertest.Eval[bool](b, `!!document.querySelector('section[aria-label="Recover"]')`) {
		t.Error("the Ready view offers Recover")
	}
	b.Open("/resources?phase=Failed&label_selector="+url.QueryEscape("team=a"), `[data-resource="quota/a1"]`)
	click(b, `section[aria-label="Recover"]`, "Recover…")
	b.WaitTrue("the dry-run count", `document.querySelector('[data-testid="recover-count"]')?.dataset.count === "2"`, 30*time.Second)
	b.Screenshot("recover-confirm")
	for _, n := range []string{"a1", "a2"} {
		if r, _ := s.get("quota", n); r.Phase != string(model.PhaseFailed) {
			t.Fatalf("%s is %s before the dialog was confirmed", n, r.Phase)
		}
	}
	p.broken.Store(false)
	click(b, `[data-testid="recover-dialog"]`, "Re-drive 2")
	b.WaitTrue("the result", `document.querySelector('[data-testid="recover-result"]')?.textContent.trim() === "2 of 2 re-driven"`, 30*time.Second)
	for _, n := range []string{"a1", "a2"} {
		s.waitPhase("quota", n, string(model.PhaseReady), 30*time.Second)
	}
	if r, _ := s.get("quota", "b1"); r.Phase != string(model.PhaseFailed) {
		t.Errorf("b1, outside the view's filter, is %s", r.Phase)
	}
	b.WaitTrue("the Failed view emptied of team=a", `!document.querySelector('[data-resource="quota/a1"]')`, 30*time.Second)
	b.CheckClean()
}

// labelledTreeProvider composes a tree of nets and disks with long names: 14
// nets and 15 disks, 30 nodes with the root.
type labelledTreeProvider struct{}

func (labelledTreeProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: "stack", Version: 1}
}

func (labelledTreeProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var kids []webhooksdk.Child
	for i := range 29 {
		kind, what := "disk", "storage-volume"
		if i%2 == 1 {
			kind, what = "net", "network-interface"
		}
		kids = append(kids, webhooksdk.Child{Kind: kind, KindVersion: 1,
			Name: fmt.Sprintf("%s-%s-%02d", req.Resource.Name, what, i), Spec: json.RawMessage(`{}`)})
	}
	return webhooksdk.Outcome{Children: kids, Status: json.RawMessage(`{}`)}, nil
}

// TestConsoleGraphKindsLabelsNeighbourhood draws a tree of 30 nodes of
// three kinds: the kind legend counts each kind with its own colour and
// colour by kind recolours the nodes; at the default zoom no two drawn
// labels' boxes intersect (and several are drawn); selecting a node
// lights exactly its neighbourhood and dims the rest.
func TestConsoleGraphKindsLabelsNeighbourhood(t *testing.T) {
	t.Parallel()
	chrome := consoleBrowser(t)
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/stack/manifest", map[string]any{"kind": "stack", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"compose","trigger":"specChange","emits":["children","status"]}]`)}); code != 201 {
		t.Fatalf("manifest stack = %d %s", code, body)
	}
	s.leafManifest("net")
	s.leafManifest("disk")
	s.serveProvider("stack", labelledTreeProvider{}, &brokenProvider{kind: "net"}, &brokenProvider{kind: "disk"})
	s.apply("stack", "alpha", nil, map[string]any{})
	waitFor(t, 60*time.Second, "the stack's 29 children", func() bool {
		return s.count(`SELECT count(*) FROM resources WHERE owner_id IS NOT NULL`) == 29
	})
	b := browsertest.New(t, browsertest.Config{Exec: chrome, Origin: s.base, ArtifactDir: consoleArtifacts(t), Timeout: 45 * time.Second})
	b.Open("/graph/stack/alpha", `[data-graph-ready="true"]`)
	b.WaitTrue("30 nodes in the legend", `document.querySelector('[data-testid="legend"]')?.dataset.total === "30"`, 30*time.Second)

	t.Log("graph: a legend per kind, each kind its own colour")
	var kinds []struct{ Kind, Color, Count string }
	must(t, json.Unmarshal([]byte(browsertest.Eval[string](b, `JSON.stringify([...document.querySelectorAll('[data-testid="kind-legend"] [data-kind]')]
		.map(li => ({kind: li.dataset.kind, color: li.dataset.color, count: li.dataset.count})))`)), &kinds))
	want := map[string]string{"disk": "15", "net": "14", "stack": "1"}
	colors := map[string]bool{}
	for _, k := range kinds {
		if want[k.Kind] != k.Count {
			t.Errorf("kind legend %s: %s nodes, want %s", k.Kind, k.Count, want[k.Kind])
		}
		colors[k.Color] = true
	}
	if len(kinds) != 3 || len(colors) != 3 {
		t.Errorf("kind legend = %+v; want disk, net and stack, each its own colour", kinds)
	}

	t.Log("graph: no two labels overlap at the default zoom")
	labels := func() [][4]float64 {
		var boxes [][4]float64
		must(t, json.Unmarshal([]byte(browsertest.Eval[string](b, `document.querySelector('[data-testid="graph"]').dataset.labels ?? "[]"`)), &boxes))
		return boxes
	}
	b.WaitTrue("labels drawn", `JSON.parse(document.querySelector('[data-testid="graph"]').dataset.labels ?? "[]").length >= 3`, 30*time.Second)
	boxes := labels()
	for i := range boxes {
		for j := i + 1; j < len(boxes); j++ {
			a, c := boxes[i], boxes[j]
			if a[0] < c[0]+c[2] && c[0] < a[0]+a[2] && a[1] < c[1]+c[3] && c[1] < a[1]+a[3] {
				t.Errorf("labels %v and %v intersect", a, c)
			}
		}
	}
	t.Logf("%d of 30 labels drawn at the default zoom", len(boxes))
	b.Screenshot("graph-labels")

	t.Log("graph: the selected node's neighbourhood is lit, the rest dimmed")
	child := "net/alpha-network-interface-07"
	fill(b, `form[role="search"] input`, "alpha-network-interface-07")
	browsertest.Eval[bool](b, `(document.querySelector('form[role="search"]').requestSubmit(), true)`)
	b.WaitTrue("the selection's neighbourhood", `document.querySelector('[data-testid="graph"]').dataset.neighbourhood === `+js(`["`+child+`","stack/alpha"]`), 30*time.Second)
	b.WaitTrue("the selected node's panel", `document.querySelector('aside[aria-label="Selected node"] h2')?.textContent === `+js(child), 30*time.Second)
	b.Screenshot("graph-neighbourhood")

	t.Log("graph: colour by kind")
	browsertest.Eval[bool](b, `(() => { const el = document.querySelector('select[name="color-by"]');
		Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, "value").set.call(el, "kind");
		el.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`)
	b.WaitTrue("the kind swatches filled", `[...document.querySelectorAll('[data-testid="kind-legend"] .swatch')].every(s => s.style.background !== "transparent")`, 30*time.Second)
	b.Screenshot("graph-by-kind")
	b.CheckClean()
}
