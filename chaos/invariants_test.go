package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/chaos/internal/calllog"
)

// Each checker passes good data and reports each kind of violation it
// exists for: the suite's green runs mean something only if these fail.

func wantViolations(t *testing.T, name string, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d violations %q, want %d containing %q", name, len(got), got, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("%s: violation %d = %q, want it to contain %q", name, i, got[i], w)
		}
	}
}

func TestCheckSynced(t *testing.T) {
	rs := []Resource{{Kind: "leaf", Name: "a", Generation: 2, SyncedGen: 2}, {Kind: "leaf", Name: "b", Generation: 2, SyncedGen: 1}}
	wantViolations(t, "good", CheckSynced(rs))
	rs = append(rs, Resource{Kind: "leaf", Name: "c", Generation: 1, SyncedGen: 2})
	wantViolations(t, "synced past", CheckSynced(rs), "leaf/c synced_gen 2, generation 1")
}

func TestCheckConverged(t *testing.T) {
	rs := []Resource{{Kind: "leaf", Name: "a", Phase: "Ready", Generation: 1, SyncedGen: 1}}
	wantViolations(t, "good", CheckConverged(rs, 1))
	wantViolations(t, "missing", CheckConverged(rs, 2), "1 resources, want 2")
	rs[0].Phase = "Reconciling"
	wantViolations(t, "not ready", CheckConverged(rs, 1), "leaf/a is Reconciling")
}

func TestCheckApplies(t *testing.T) {
	calls := []calllog.Record{
		{Type: calllog.Delivery, WebhookID: "w1", TaskID: "t1", ClaimEpoch: 1, Success: true, Answer: "200 outcome"},
		{Type: calllog.Work, WebhookID: "w1", TaskID: "t1", ClaimEpoch: 1, Success: true},
		{Type: calllog.Delivery, WebhookID: "w2", TaskID: "t2", ClaimEpoch: 3, Answer: "202"},
		{Type: calllog.Work, WebhookID: "w2", TaskID: "t2", ClaimEpoch: 3, Success: true},
		{Type: calllog.Callback, TaskID: "t2", ClaimEpoch: 3, Success: true, Answer: "200"},
		// A restarted provider (boot 1) ran a re-delivered claim again: allowed.
		{Type: calllog.Work, WebhookID: "w2", TaskID: "t2", ClaimEpoch: 3, Success: true, Boot: 1},
	}
	good := []Applied{
		{ResourceID: "r1", TaskID: "t1", Trigger: "specChange", Generation: 1, ClaimEpoch: 1, Success: true, StatusTask: "t1", StatusEpoch: 1},
		{ResourceID: "r2", TaskID: "t2", Trigger: "specChange", Generation: 1, ClaimEpoch: 3, Success: true, StatusTask: "t2", StatusEpoch: 3},
		// A failure the dispatcher recorded (no provider answer) is not an apply.
		{ResourceID: "r2", TaskID: "t2", Trigger: "specChange", Generation: 1, ClaimEpoch: 2},
	}
	wantViolations(t, "good", CheckApplies(good, calls))

	// The same (resource, generation) accepted at a second claim.
	dup := append(slices.Clone(good), Applied{ResourceID: "r1", TaskID: "t1", Trigger: "specChange", Generation: 1, ClaimEpoch: 2,
		Success: true, StatusTask: "t1", StatusEpoch: 2})
	dupCalls := append(slices.Clone(calls), calllog.Record{Type: calllog.Delivery, WebhookID: "w3", TaskID: "t1", ClaimEpoch: 2, Success: true},
		calllog.Record{Type: calllog.Work, WebhookID: "w3", TaskID: "t1", ClaimEpoch: 2, Success: true})
	wantViolations(t, "double apply", CheckApplies(dup, dupCalls), "double apply: resource r1 generation 1 applied 2 times (claim_epochs [1 2])")

	// A stale result (produced under epoch 3) accepted for claim_epoch 4:
	// what a missing claim_epoch fence lets through.
	stale := []Applied{{ResourceID: "r2", TaskID: "t2", Trigger: "specChange", Generation: 1, ClaimEpoch: 4, Success: true, StatusTask: "t2", StatusEpoch: 3}}
	wantViolations(t, "stale", CheckApplies(stale, calls),
		"applied outcome without a provider Work run: task t2 claim_epoch 4",
		"applied outcome without a provider answer: task t2 claim_epoch 4",
		"stale outcome applied: task t2 applied at claim_epoch 4")

	// An answer only by a dropped callback is no answer; two Work runs of
	// one claim in one provider start break the SDK's once per webhook-id.
	dropped := []calllog.Record{
		{Type: calllog.Work, WebhookID: "w9", TaskID: "t9", ClaimEpoch: 1, Success: true},
		{Type: calllog.Work, WebhookID: "w9", TaskID: "t9", ClaimEpoch: 1, Success: true},
		{Type: calllog.Callback, TaskID: "t9", ClaimEpoch: 1, Success: true, Fault: "drop", Answer: "dropped"},
	}
	acc := []Applied{{ResourceID: "r9", TaskID: "t9", Trigger: "specChange", Generation: 1, ClaimEpoch: 1, Success: true, StatusTask: "t9", StatusEpoch: 1}}
	wantViolations(t, "dropped", CheckApplies(acc, dropped),
		"Work ran 2 times for task t9 claim_epoch 1 in provider start 0",
		"applied outcome without a provider answer: task t9 claim_epoch 1")
}

func TestCheckClaims(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bound := 10 * time.Second
	samples := []ClaimSample{
		{At: t0.Add(5 * time.Second), LeaseUntil: t0, TaskID: "a", ClaimEpoch: 1},
		{At: t0.Add(25 * time.Second), LeaseUntil: t0, TaskID: "b", ClaimEpoch: 1},
	}
	// b outlived its lease by 25s, but the reaper was down until t0+20s.
	down := []Window{{From: t0.Add(-time.Second), To: t0.Add(20 * time.Second)}}
	wantViolations(t, "excused", CheckClaims(samples, bound, down))
	wantViolations(t, "stale", CheckClaims(samples, bound, nil), "stale claim: task b claim_epoch 1 still claimed 25s")
	// A window that began after the sample excuses nothing.
	later := []Window{{From: t0.Add(30 * time.Second), To: t0.Add(40 * time.Second)}}
	wantViolations(t, "later window", CheckClaims(samples, bound, later), "task b")
	// A claim sampled stale many times is reported once.
	again := append(slices.Clone(samples), ClaimSample{At: t0.Add(26 * time.Second), LeaseUntil: t0, TaskID: "b", ClaimEpoch: 1})
	wantViolations(t, "once", CheckClaims(again, bound, nil), "task b")
}

func TestCheckEvents(t *testing.T) {
	rs := []Resource{{ID: "r1", Kind: "leaf", Name: "a", Phase: "Ready", Generation: 1, SyncedGen: 1},
		{ID: "r2", Kind: "leaf", Name: "b", Phase: "Reconciling", Generation: 1}}
	evs := []Event{{ID: 1, ResourceID: "r1", Type: "succeeded", Generation: 1}, {ID: 7, ResourceID: "r2", Type: "failed", Generation: 1}}
	wantViolations(t, "good", CheckEvents(rs, evs))
	wantViolations(t, "missing", CheckEvents(rs, evs[1:]), "lost event: leaf/a is Ready")
	wantViolations(t, "future", CheckEvents(rs, append(evs, Event{ID: 9, ResourceID: "r2", Type: "applied", Generation: 2})),
		"event 9 (applied) of leaf/b at generation 2")
}
