package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// manifestPlain publishes plain/1: no reactions, so its resources are
// synced on apply and, having no finalizer, removed as soon as deleted.
const manifestPlain = `{"kind": "plain", "kind_version": 1, "reactions": []}`

// manifestBox publishes box/1 with a snapshot verb. No provider runs in
// these tests, so its operations stay pending.
const manifestBox = `{"kind": "box", "kind_version": 1, "reactions": [
  {"name": "work", "trigger": "specChange", "emits": ["status"]},
  {"name": "snap", "trigger": "operation", "verb": "snapshot", "emits": ["operationOutput"],
   "input_schema": {"type": "object", "properties": {"label": {"type": "string"}}, "additionalProperties": false}}]}`

// teardownRunning is the teardown reason of a vpc whose delete task waits
// for a provider that never comes.
const teardownRunning = "its teardown (the deleteRequested reaction) is running"

// count counts the recorded requests with this method and path.
func (b *testBundle) count(method, path string) int {
	n := 0
	for _, r := range b.api.recorded() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

func TestDeleteResourceWaits(t *testing.T) {
	t.Parallel()

	t.Run("UntilGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestPlain)
		b.seed(t, "res", `[{"kind":"plain","kind_version":1,"name":"a"},{"kind":"plain","kind_version":1,"name":"b"}]`)
		r := b.run(t, "", "delete", "res", "plain/a", "plain/b")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/plain/a deletion requested\nresource/plain/b deletion requested\n"+
			"resource/plain/a deleted\nresource/plain/b deleted\n")
		// All deletions are requested before the wait asks about any.
		wantRequests(t, b, "DELETE /resources/plain/a", "DELETE /resources/plain/b",
			"GET /resources/plain/a", "GET /resources/plain/b")
	})

	t.Run("NoWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", resourceVPC)
		r := b.run(t, "", "delete", "res", "vpc/sample-vpc", "--wait=false")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc deletion requested\n")
		wantRequests(t, b, "DELETE /resources/vpc/sample-vpc")
	})

	t.Run("TimeoutNamesWhatBlocks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "manifest", manifestPlain)
		b.seed(t, "res", `[`+resourceVPC+`,{"kind":"plain","kind_version":1,"name":"a"}]`)
		r := b.run(t, "", "delete", "res", "vpc/sample-vpc", "plain/a", "--timeout", "1200ms")
		wantCode(t, r, ExitFailure)
		// Not a terminal: the unchanged teardown is reported once, not on
		// every poll.
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc deletion requested\nresource/plain/a deletion requested\n"+
			"resource/plain/a deleted\n"+
			"resource/vpc/sample-vpc deleting (0 remaining): "+teardownRunning+"\n")
		wantOutput(t, r.stderr, "Error: not deleted within 1.2s: resource/vpc/sample-vpc is still deleting (0 remaining): "+
			teardownRunning+"\n")
		if n := b.count("GET", "/resources/vpc/sample-vpc"); n < 2 {
			t.Errorf("polled %d times, want at least 2", n)
		}
		if n := b.count("GET", "/resources/plain/a"); n != 1 {
			t.Errorf("polled the deleted plain/a %d times, want 1", n)
		}
	})

	t.Run("UnknownIsNotAwaited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestPlain)
		r := b.run(t, "", "delete", "res", "plain/none")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: 404 Not Found: resource plain/none does not exist\n")
		wantRequests(t, b, "DELETE /resources/plain/none")
	})

	t.Run("NegativeTimeout", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		wantCode(t, b.run(t, "", "delete", "res", "vpc/a", "--timeout", "-1s"), ExitUsage)
		wantRequests(t, b)
	})
}

func TestProgress(t *testing.T) {
	t.Parallel()
	states := func(key string) []waitState {
		return []waitState{{id: "resource/vm/a", key: key, text: "deleting (" + key + " remaining)"},
			{id: "resource/vm/b", key: "0", text: "deleting (0 remaining)"}}
	}

	t.Run("Terminal", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		p := &progress{w: &buf, tty: true, width: 40}
		p.update(states("2"))
		p.update(states("2"))
		p.println("resource/vm/a deleted")
		wantOutput(t, buf.String(), "\r\x1b[K[2 left] resource/vm/a deleting (2 rem…"+
			"\r\x1b[K[2 left] resource/vm/a deleting (2 rem…"+
			"\r\x1b[Kresource/vm/a deleted\n")
	})

	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		p := &progress{w: &buf, last: map[string]string{}}
		p.update(states("2"))
		p.update(states("2"))
		p.update(states("1"))
		p.println("resource/vm/a deleted")
		wantOutput(t, buf.String(), "resource/vm/a deleting (2 remaining)\nresource/vm/b deleting (0 remaining)\n"+
			"resource/vm/a deleting (1 remaining)\nresource/vm/a deleted\n")
	})
}

func TestWaitResource(t *testing.T) {
	t.Parallel()

	t.Run("Ready", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestPlain)
		b.seed(t, "res", `{"kind":"plain","kind_version":1,"name":"a"}`)
		r := b.run(t, "", "wait", "res", "plain/a", "--for=ready", "--timeout", "5s")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/plain/a ready\n")
		wantRequests(t, b, "GET /resources/plain/a")
	})

	t.Run("ReadyTimesOutWithPhaseAndReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", resourceVPC)
		r := b.run(t, "", "wait", "res", "--kind", "vpc", "sample-vpc", "--for", "ready", "--timeout", "1s")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc in phase Reconciling: its reconcile task is pending\n")
		wantOutput(t, r.stderr, "Error: not ready within 1s: resource/vpc/sample-vpc is still in phase Reconciling: "+
			"its reconcile task is pending\n")
	})

	t.Run("DeletedTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seedKinds(t)
		b.seed(t, "res", resourceVPC)
		wantCode(t, b.run(t, "", "delete", "res", "vpc/sample-vpc", "--wait=false"), ExitOK)
		r := b.run(t, "", "wait", "res", "vpc/sample-vpc", "--for=deleted", "--timeout", "1s")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stdout, "resource/vpc/sample-vpc deleting (0 remaining): "+teardownRunning+"\n")
		wantOutput(t, r.stderr, "Error: not deleted within 1s: resource/vpc/sample-vpc is still deleting (0 remaining): "+
			teardownRunning+"\n")
	})

	t.Run("DeletedWhenGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestPlain)
		r := b.run(t, "", "wait", "res", "plain/none", "--for=deleted")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "resource/plain/none deleted\n")
	})

	t.Run("ReadyNeedsTheResource", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestPlain)
		r := b.run(t, "", "wait", "res", "plain/none", "--for=ready")
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: resource/plain/none: 404 Not Found: resource plain/none does not exist\n")
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, args := range [][]string{
			{"wait", "res", "plain/a"},
			{"wait", "res", "plain/a", "--for=gone"},
			{"wait", "res", "--for=ready"},
			{"wait", "res", "plain", "--for=ready"},
		} {
			wantCode(t, b.run(t, "", args...), ExitUsage)
		}
		wantRequests(t, b)
	})
}

func TestQuarantineAndReconcile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	b.seed(t, "res", resourceVPC)

	r := b.run(t, "", "quarantine", "vpc/sample-vpc")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc quarantined: phase Quarantined\n")
	r = b.run(t, "", "get", "res", "vpc/sample-vpc")
	if !strings.Contains(r.stdout, " Quarantined ") {
		t.Errorf("after quarantine: %q", r.stdout)
	}
	r = b.run(t, "", "reconcile", "vpc/sample-vpc")
	wantCode(t, r, ExitFailure)
	if !strings.HasPrefix(r.stderr, "Error: 409 Conflict: ") {
		t.Errorf("reconcile while quarantined: stderr = %q", r.stderr)
	}

	r = b.run(t, "", "unquarantine", "--kind", "vpc", "sample-vpc", "-o", "json")
	wantCode(t, r, ExitOK)
	var res struct{ Phase string }
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Phase != "Reconciling" {
		t.Errorf("unquarantine -o json: %v %q", err, r.stdout)
	}

	b.api.forget()
	r = b.run(t, "", "reconcile", "vpc/sample-vpc")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc reconcile requested\n")
	wantRequests(t, b, "POST /resources/vpc/sample-vpc/reconcile")
	if got := b.api.recorded()[0].Status; got != 202 {
		t.Errorf("reconcile answered %d", got)
	}

	wantCode(t, b.run(t, "", "delete", "res", "vpc/sample-vpc", "--wait=false"), ExitOK)
	r = b.run(t, "", "quarantine", "vpc/sample-vpc")
	wantCode(t, r, ExitFailure)
	if !strings.HasPrefix(r.stderr, "Error: 409 Conflict: ") {
		t.Errorf("quarantine while deleting: stderr = %q", r.stderr)
	}
	wantCode(t, b.run(t, "", "unquarantine", "vpc"), ExitUsage)
}

var opLine = regexp.MustCompile(`^resource/box/b1: operation ([0-9a-f-]{36}) \(snapshot\) pending\n$`)

func TestOps(t *testing.T) {
	t.Parallel()

	t.Run("InvokeListCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestBox)
		b.seed(t, "res", `{"kind":"box","kind_version":1,"name":"b1"}`)

		r := b.run(t, "", "op", "box/b1", "snapshot", "--input", `{"label": "a"}`)
		wantCode(t, r, ExitOK)
		m := opLine.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("stdout = %q", r.stdout)
		}
		id := m[1]
		jsonEqual(t, b.api.recorded()[0].Body, `{"verb": "snapshot", "input": {"label": "a"}}`)

		b.api.forget()
		f := b.file(t, "in.yaml", "label: b\n")
		wantCode(t, b.run(t, "", "op", "box/b1", "snapshot", "--input-file", f), ExitOK)
		jsonEqual(t, b.api.recorded()[0].Body, `{"verb": "snapshot", "input": {"label": "b"}}`)

		r = b.run(t, "", "ops", "box/b1")
		wantCode(t, r, ExitOK)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID VERB STATE AGE ERROR" ||
			!strings.HasSuffix(strings.Join(strings.Fields(lines[2]), " "), id+" snapshot pending 60m <none>") {
			t.Errorf("ops table:\n%s", r.stdout)
		}

		r = b.run(t, "", "ops", "box/b1", "--cancel", id)
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stdout, "operation "+id+" cancelled\n")
		r = b.run(t, "", "ops", "box/b1", "--cancel", id)
		wantCode(t, r, ExitFailure)
		if !strings.HasPrefix(r.stderr, "Error: 409 Conflict: ") {
			t.Errorf("second cancel: stderr = %q", r.stderr)
		}

		r = b.run(t, "", "ops", "box/b1", "-o", "json")
		wantCode(t, r, ExitOK)
		var list struct{ Items []struct{ ID, State string } }
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 2 || list.Items[1].State != "cancelled" {
			t.Errorf("ops -o json: %v %q", err, r.stdout)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestBox)
		b.seed(t, "res", `{"kind":"box","kind_version":1,"name":"b1"}`)
		r := b.run(t, "", "op", "box/b1", "reboot")
		wantCode(t, r, ExitFailure)
		if !strings.HasPrefix(r.stderr, "Error: 404 Not Found: ") || !strings.Contains(r.stderr, "reboot") {
			t.Errorf("unknown verb: stderr = %q", r.stderr)
		}
		r = b.run(t, "", "op", "box/b1", "snapshot", "--input", `{"label": 1}`)
		wantCode(t, r, ExitFailure)
		if !strings.Contains(r.stderr, "body.input.label") {
			t.Errorf("bad input: stderr = %q", r.stderr)
		}
		r = b.run(t, "", "ops", "box/b1")
		wantCode(t, r, ExitOK)
		wantOutput(t, r.stderr, "No operations found.\n")
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		b := setupNoAPI(t)
		for _, args := range [][]string{
			{"op", "box/b1"},
			{"op", "box/b1", "snapshot", "--input", "{nope"},
			{"op", "box/b1", "snapshot", "--input", "{}", "--input-file", "x.json"},
			{"ops", "box/b1", "--limit", "-1"},
			{"ops", "box/b1", "--cancel", "x", "--limit", "3"},
		} {
			wantCode(t, b.run(t, "", args...), ExitUsage)
		}
		wantCode(t, b.run(t, "", "op", "box/b1", "snapshot", "--input-file", b.dir+"/missing.json"), ExitFailure)
		wantRequests(t, b)
	})

	t.Run("WaitTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestBox)
		b.seed(t, "res", `{"kind":"box","kind_version":1,"name":"b1"}`)
		r := b.run(t, "", "op", "box/b1", "snapshot", "--wait", "--timeout", "1s")
		wantCode(t, r, ExitFailure)
		if !regexp.MustCompile(`^operation [0-9a-f-]{36} pending \(0 attempts\)\n$`).MatchString(r.stdout) {
			t.Errorf("stdout = %q", r.stdout)
		}
		if !regexp.MustCompile(`^Error: operation [0-9a-f-]{36} not finished within 1s: still pending \(0 attempts\)\n$`).MatchString(r.stderr) {
			t.Errorf("stderr = %q", r.stderr)
		}
	})

	t.Run("WaitSeesTheCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t, "manifest", manifestBox)
		b.seed(t, "res", `{"kind":"box","kind_version":1,"name":"b1"}`)
		var wg sync.WaitGroup
		var r result
		wg.Go(func() { r = b.run(t, "", "op", "box/b1", "snapshot", "--wait", "--timeout", "30s") })
		var id string
		for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); {
			var list struct{ Items []struct{ ID string } }
			_ = json.Unmarshal([]byte(b.run(t, "", "ops", "box/b1", "-o", "json").stdout), &list)
			if len(list.Items) > 0 {
				id = list.Items[0].ID
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if id == "" {
			t.Fatal("no operation was invoked")
		}
		wantCode(t, b.run(t, "", "ops", "box/b1", "--cancel", id), ExitOK)
		wg.Wait()
		wantCode(t, r, ExitFailure)
		wantOutput(t, r.stderr, "Error: operation "+id+" was cancelled\n")
		if !strings.HasSuffix(r.stdout, "operation "+id+" cancelled\n") {
			t.Errorf("stdout = %q", r.stdout)
		}
	})
}

func TestHistoryAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedKinds(t)
	for _, cidr := range []string{"10.0.0.0/16", "10.1.0.0/16", "10.2.0.0/16"} {
		b.seed(t, "res", strings.Replace(resourceVPC, "10.0.0.0/16", cidr, 1))
	}

	r := b.run(t, "", "history", "vpc/sample-vpc")
	wantCode(t, r, ExitOK)
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(l)
		rows = append(rows, strings.Join(append(f[:len(f)-2:len(f)-2], f[len(f)-1]), " ")) // all but APPLIED_AT
	}
	wantOutput(t, strings.Join(rows, "\n"), "REVISION GENERATION VERSION AUTHOR\n3 3 1 anonymous\n2 2 1 anonymous\n1 1 1 anonymous")

	r = b.run(t, "", "history", "vpc/sample-vpc", "-o", "json")
	wantCode(t, r, ExitOK)
	var h struct {
		Items []struct {
			Revision int
			Spec     struct{ CIDR string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h.Items) != 3 || h.Items[2].Spec.CIDR != "10.0.0.0/16" {
		t.Errorf("history -o json: %v %q", err, r.stdout)
	}

	r = b.run(t, "", "rollback", "vpc/sample-vpc", "--revision", "1")
	wantCode(t, r, ExitOK)
	wantOutput(t, r.stdout, "resource/vpc/sample-vpc rolled back to revision 1: configured (generation 4)\n")
	r = b.run(t, "", "get", "res", "vpc/sample-vpc", "-o", "json")
	var res struct {
		Generation int
		Spec       struct{ CIDR string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Generation != 4 || res.Spec.CIDR != "10.0.0.0/16" {
		t.Errorf("after rollback: %v %q", err, r.stdout)
	}
	if r := b.run(t, "", "history", "vpc/sample-vpc"); !strings.Contains(r.stdout, "\n4 ") {
		t.Errorf("no revision 4 after the rollback:\n%s", r.stdout)
	}

	r = b.run(t, "", "rollback", "vpc/sample-vpc", "--revision", "99")
	wantCode(t, r, ExitFailure)
	if !strings.HasPrefix(r.stderr, "Error: 404 Not Found: ") {
		t.Errorf("unknown revision: stderr = %q", r.stderr)
	}
	b.api.forget()
	wantCode(t, b.run(t, "", "rollback", "vpc/sample-vpc"), ExitUsage)
	wantCode(t, b.run(t, "", "rollback", "vpc/sample-vpc", "--revision", "0"), ExitUsage)
	wantRequests(t, b)
}

// TestOpsAndHistoryFollowPages: the server ends a page of operations or
// spec revisions at its byte budget; history reads every page, ops one
// (saying how to get the next) or, with --all, every page.
func TestOpsAndHistoryFollowPages(t *testing.T) {
	t.Parallel()
	b := setupWith(t, apiOptions{listPageBytes: 3000})
	b.seed(t, "manifest", manifestBox)
	for i := range 4 {
		b.seed(t, "res", fmt.Sprintf(`{"kind":"box","kind_version":1,"name":"b1","spec":{"n":%d,"pad":%q}}`, i, strings.Repeat("p", 1200)))
		wantCode(t, b.run(t, "", "op", "box/b1", "snapshot", "--input", fmt.Sprintf(`{"label": %q}`, strings.Repeat("l", 1200))), ExitOK)
	}
	b.api.forget()

	count := func(stdout string) int {
		t.Helper()
		var list struct{ Items []json.RawMessage }
		if err := json.Unmarshal([]byte(stdout), &list); err != nil {
			t.Fatalf("%v: %q", err, stdout)
		}
		return len(list.Items)
	}
	r := b.run(t, "", "history", "box/b1", "-o", "json")
	wantCode(t, r, ExitOK)
	if n, pages := count(r.stdout), len(b.api.recorded()); n != 4 || pages < 2 {
		t.Errorf("history listed %d revisions in %d pages, want 4 in several", n, pages)
	}

	b.api.forget()
	r = b.run(t, "", "ops", "box/b1", "--all", "-o", "json")
	wantCode(t, r, ExitOK)
	if n, pages := count(r.stdout), len(b.api.recorded()); n != 4 || pages < 2 {
		t.Errorf("ops --all listed %d operations in %d pages, want 4 in several", n, pages)
	}

	b.api.forget()
	r = b.run(t, "", "ops", "box/b1")
	wantCode(t, r, ExitOK)
	next := b.api.recorded()[0].NextCursor
	wantOutput(t, r.stderr, "More operations available: rerun with --all, or with --cursor "+next+" for the next page.\n")
	wantCode(t, b.run(t, "", "ops", "box/b1", "--cursor", next), ExitOK)
	wantCode(t, b.run(t, "", "ops", "box/b1", "--cancel", "x", "--all"), ExitUsage)
}
