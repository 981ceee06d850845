package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// manifestBOM publishes bom/1, a composite that rolls its children up; and
// manifestBoxOnly box/1 with one reaction, so a box stays Reconciling until
// the test completes its task.
const (
	manifestBOM = `{"kind": "bom", "kind_version": 1, "reactions": [
  {"name": "compose", "trigger": "specChange", "emits": ["children", "status"]},
  {"name": "rollup", "trigger": "childrenSettled", "emits": ["status"]}]}`
	manifestBoxOnly = `{"kind": "box", "kind_version": 1, "reactions": [
  {"name": "work", "trigger": "specChange", "emits": ["status"]}]}`
)

// claim claims the pending tasks of kind/version as a provider would,
// failing the test unless there are n.
func claim(t *testing.T, b *testBundle, pair string, n int) []model.Task {
	t.Helper()
	tasks, err := b.api.eng.TaskClaim(t.Context(), engine.TaskClaimParams{Claimer: "test", Lo: 0, Hi: 255, Pairs: []string{pair}, Limit: 100, Lease: time.Minute})
	if err != nil || len(tasks) != n {
		t.Fatalf("claim %s = %d tasks, %v; want %d", pair, len(tasks), err, n)
	}
	return tasks
}

// complete completes a claimed task and applies its outcome, as the
// engine's drain loop would.
func complete(t *testing.T, b *testBundle, task model.Task, r webhooksdk.Result) {
	t.Helper()
	r.TaskID, r.ClaimEpoch = task.ID, task.ClaimEpoch
	if _, err := b.api.eng.TaskComplete(t.Context(), task, r); err != nil {
		t.Fatalf("complete %s: %v", task.ID, err)
	}
	p := engine.DrainParams{Lo: 0, Hi: 255, Limit: 100}
	if _, err := b.api.eng.OutboxDrain(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if _, err := b.api.eng.RollupRecheckDrain(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

var succeeded = webhooksdk.Result{Outcome: &webhooksdk.Outcome{Status: []byte(`{}`)}}

func TestWatchResource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, "manifest", "["+manifestPlain+","+manifestBoxOnly+","+manifestBOM+"]")
	b.seed(t, "res", `{"kind":"bom","kind_version":1,"name":"a"}`)

	// The composite's compose: two plain children (Ready at once) and three
	// boxes; one box fails for good, one succeeds, one stays pending.
	var kids []webhooksdk.Child
	for _, c := range []struct{ kind, name string }{{"plain", "p1"}, {"plain", "p2"}, {"box", "b1"}, {"box", "b2"}, {"box", "b3"}} {
		kids = append(kids, webhooksdk.Child{Kind: c.kind, KindVersion: 1, Name: c.name, Spec: []byte(`{}`)})
	}
	complete(t, b, claim(t, b, "bom/1", 1)[0], webhooksdk.Result{Outcome: &webhooksdk.Outcome{Children: kids}})
	boxes := claim(t, b, "box/1", 3)
	byName := map[string]model.Task{}
	for _, name := range []string{"b1", "b2", "b3"} {
		id, err := b.api.st.ResourceID(t.Context(), "", "box", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range boxes {
			if task.ResourceID == id {
				byName[name] = task
			}
		}
	}
	complete(t, b, byName["b1"], webhooksdk.Result{Error: &webhooksdk.Error{Message: "disk on fire", Terminal: true}})
	complete(t, b, byName["b2"], succeeded)

	t.Run("TimeoutShowsTheTally", func(t *testing.T) {
		r := b.run(t, "", "watch", "resource", "bom/a", "--timeout", "1500ms")
		wantCode(t, r, ExitFailure)
		// Not a terminal: one line, the tally unchanged across polls.
		if got, want := strings.TrimSpace(strings.SplitN(r.stdout, "] ", 2)[1]), "bom/a Reconciling: Ready 3 · Reconciling 1 · Failed 1 (3/5 ready)"; got != want || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("stdout = %q, want one line ending %q", r.stdout, want)
		}
		wantOutput(t, r.stderr, "Error: watch timed out after 1.5s: bom/a is Reconciling, children Ready 3 · Reconciling 1 · Failed 1\n")
		if n := b.count("GET", "/resources/bom/a/graph"); n < 2 {
			t.Errorf("read the graph %d times, want at least 2", n)
		}
	})

	t.Run("ExitsOnReady", func(t *testing.T) {
		done := make(chan result, 1)
		go func() { done <- b.run(t, "", "watch", "resource", "bom/a", "--timeout", "30s") }()
		time.Sleep(1500 * time.Millisecond) // a first view while b3 is pending
		complete(t, b, byName["b3"], succeeded)
		complete(t, b, claim(t, b, "bom/1", 1)[0], succeeded) // the rollup, once every child settled
		r := <-done
		wantCode(t, r, ExitOK)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if last := lines[len(lines)-1]; len(lines) < 2 || !strings.HasSuffix(last, "bom/a Ready: Ready 4 · Failed 1 (4/5 ready)") {
			t.Errorf("stdout = %q, want a last line with the root Ready", r.stdout)
		}
	})
}
