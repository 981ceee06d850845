// Package chaos is the chaos suite (make chaos, make chaos-short): real
// converge processes, PostgreSQL and a faulty provider process, with
// processes killed, the database restarted and network paths cut while a
// few thousand resources converge, then the invariants below checked.
// chaos_test.go runs it (only with CHAOS=1); this file holds the checkers,
// pure functions over what the run read back, so each is unit-tested
// against data that breaks it.
package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/convergeplane/converge/chaos/internal/calllog"
)

// Resource is a resource row as the run ends.
type Resource struct {
	ID, Kind, Name, Phase string
	Generation, SyncedGen int64
}

// Applied is one outcome the engine applied to its resource (its claimed
// work row finished and the resource written, naming the claim, in one
// transaction), with the claim the provider said, in the outcome's status,
// that it produced it under.
type Applied struct {
	ResourceID, TaskID, Trigger string
	Generation, ClaimEpoch      int64
	Success                     bool
	StatusTask                  string // the outcome's status.task ("" when no status)
	StatusEpoch                 int64  // the outcome's status.epoch
}

// ClaimSample is a claimed work row whose lease had lapsed when sampled.
type ClaimSample struct {
	At, LeaseUntil time.Time
	TaskID         string
	ClaimEpoch     int64
}

// Event is one resource_events row.
type Event struct {
	ID         int64
	ResourceID string
	Type       string
	Generation int64
}

// Window is a span in which the reaper could not run everywhere (a control
// process down, its database path cut, the database restarting), plus the
// time a returning process takes to rejoin.
type Window struct{ From, To time.Time }

// CheckSynced reports every resource synced past its generation.
func CheckSynced(rs []Resource) []string {
	var out []string
	for _, r := range rs {
		if r.SyncedGen > r.Generation {
			out = append(out, fmt.Sprintf("synced_gen > generation: %s/%s synced_gen %d, generation %d", r.Kind, r.Name, r.SyncedGen, r.Generation))
		}
	}
	return out
}

// CheckConverged reports unless there are want resources, every one Ready
// at its generation.
func CheckConverged(rs []Resource, want int) []string {
	var out []string
	if len(rs) != want {
		out = append(out, fmt.Sprintf("converged: %d resources, want %d", len(rs), want))
	}
	for _, r := range rs {
		if r.Phase != "Ready" || r.SyncedGen != r.Generation {
			out = append(out, fmt.Sprintf("converged: %s/%s is %s at synced_gen %d of %d", r.Kind, r.Name, r.Phase, r.SyncedGen, r.Generation))
		}
	}
	return out
}

// CheckApplies is the no-double-apply invariant, checked against the
// provider's own log:
//   - no (resource, generation) has two applied successful specChange
//     outcomes;
//   - every applied success was produced under the claim it was applied
//     for (its status names that task and claim_epoch: a stale result
//     applied for a newer claim breaks this, the claim_epoch fence's job);
//   - every applied success matches a provider call at that claim_epoch
//     that answered it, inline (200 with an outcome) or by a callback that
//     was sent, and exactly one Work run of that claim per provider start
//     (the SDK runs Work once per webhook-id; its memory of them dies with
//     the process, so a restarted provider may run a re-delivered claim
//     again).
func CheckApplies(acc []Applied, calls []calllog.Record) []string {
	type claim struct {
		task       string
		claimEpoch int64
	}
	answered := map[claim]bool{}
	works := map[claim]map[int]int{} // successful Work runs by boot
	for _, c := range calls {
		k := claim{c.TaskID, c.ClaimEpoch}
		switch {
		case c.Type == calllog.Delivery && c.Success:
			answered[k] = true
		case c.Type == calllog.Callback && c.Success && c.Fault != "drop":
			answered[k] = true
		case c.Type == calllog.Work && c.Success:
			if works[k] == nil {
				works[k] = map[int]int{}
			}
			works[k][c.Boot]++
		}
	}
	var out []string
	type rg struct {
		id  string
		gen int64
	}
	applied := map[rg][]int64{}
	for _, a := range acc {
		if !a.Success {
			continue
		}
		if a.Trigger == "specChange" {
			applied[rg{a.ResourceID, a.Generation}] = append(applied[rg{a.ResourceID, a.Generation}], a.ClaimEpoch)
		}
		k := claim{a.TaskID, a.ClaimEpoch}
		if a.StatusTask != a.TaskID || a.StatusEpoch != a.ClaimEpoch {
			out = append(out, fmt.Sprintf("stale outcome applied: task %s applied at claim_epoch %d carries the result of task %q claim_epoch %d",
				a.TaskID, a.ClaimEpoch, a.StatusTask, a.StatusEpoch))
		}
		if !answered[k] {
			out = append(out, fmt.Sprintf("applied outcome without a provider answer: task %s claim_epoch %d (resource %s generation %d)",
				a.TaskID, a.ClaimEpoch, a.ResourceID, a.Generation))
		}
		if len(works[k]) == 0 {
			out = append(out, fmt.Sprintf("applied outcome without a provider Work run: task %s claim_epoch %d", a.TaskID, a.ClaimEpoch))
		}
		for boot, n := range works[k] {
			if n > 1 {
				out = append(out, fmt.Sprintf("Work ran %d times for task %s claim_epoch %d in provider start %d", n, a.TaskID, a.ClaimEpoch, boot))
			}
		}
	}
	for k, claimEpochs := range applied {
		if len(claimEpochs) > 1 {
			sort.Slice(claimEpochs, func(i, j int) bool { return claimEpochs[i] < claimEpochs[j] })
			out = append(out, fmt.Sprintf("double apply: resource %s generation %d applied %d times (claim_epochs %v)", k.id, k.gen, len(claimEpochs), claimEpochs))
		}
	}
	sort.Strings(out)
	return out
}

// CheckClaims reports each claim that outlived its lease by more than
// bound (one reaper pass and the sampling's slack), counting from the later
// of the lease's end and the end of any window in which the reaper could
// not run.
func CheckClaims(samples []ClaimSample, bound time.Duration, disrupted []Window) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range samples {
		from := s.LeaseUntil
		for _, w := range disrupted {
			if !w.From.After(s.At) && w.To.After(from) {
				from = w.To
			}
		}
		key := fmt.Sprintf("%s/%d", s.TaskID, s.ClaimEpoch)
		if over := s.At.Sub(from); over > bound && !seen[key] {
			seen[key] = true
			out = append(out, fmt.Sprintf("stale claim: task %s claim_epoch %d still claimed %s after its lease ended at %s (bound %s)",
				s.TaskID, s.ClaimEpoch, s.At.Sub(s.LeaseUntil).Round(time.Millisecond), s.LeaseUntil.Format(time.RFC3339Nano), bound))
		}
	}
	return out
}

// CheckEvents reports what the event log lost that a Ready resource must
// have, the phase transition that made it Ready ('succeeded'; the reaper
// keeps each resource's newest 100), and any event logged at a generation
// the resource never had. Event ids come from a sequence and
// are not checked for gaps: a rolled-back transaction or a restarted
// server (sequences cache ahead) skips ids, and the schema promises only
// that they increase.
func CheckEvents(rs []Resource, evs []Event) []string {
	byRes := map[string][]Event{}
	for _, e := range evs {
		byRes[e.ResourceID] = append(byRes[e.ResourceID], e)
	}
	var out []string
	for _, r := range rs {
		succeeded := false
		for _, e := range byRes[r.ID] {
			if e.Type == "succeeded" {
				succeeded = true
			}
			if e.Generation > r.Generation {
				out = append(out, fmt.Sprintf("event %d (%s) of %s/%s at generation %d, past the resource's %d", e.ID, e.Type, r.Kind, r.Name, e.Generation, r.Generation))
			}
		}
		if r.Phase == "Ready" && !succeeded {
			out = append(out, fmt.Sprintf("lost event: %s/%s is Ready but its log has no succeeded event", r.Kind, r.Name))
		}
	}
	return out
}
