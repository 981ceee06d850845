package integration

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/testkit/browsertest"
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
