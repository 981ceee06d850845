package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// brokenProvider fails terminally while broken is set, else succeeds.
type brokenProvider struct {
	kind   string
	broken atomic.Bool
	runs   atomic.Int32
}

func (p *brokenProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}

func (p *brokenProvider) Work(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.runs.Add(1)
	if p.broken.Load() {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("quota exceeded"))
	}
	return webhooksdk.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
}

type recoverAnswer struct {
	Matched    int  `json:"matched"`
	Reconciled int  `json:"reconciled"`
	More       bool `json:"more"`
	Items      []struct {
		Kind, Name string
		Reconciled bool
	} `json:"items"`
}

// recover posts body to /resources:reconcile (query q) and wants a 200.
func (s *server) recover(q string, body map[string]any) recoverAnswer {
	s.t.Helper()
	code, raw := s.call("POST", "/resources:reconcile"+q, body)
	var a recoverAnswer
	if code != 200 || json.Unmarshal(raw, &a) != nil {
		s.t.Fatalf("POST /resources:reconcile%s %v = %d %s", q, body, code, raw)
	}
	return a
}

// eventTypes lists a resource's event types, newest first.
func (s *server) eventTypes(kind, name string) []string {
	s.t.Helper()
	code, raw := s.call("GET", "/resources/"+kind+"/"+name+"/events", nil)
	var l struct {
		Items []struct{ Type, Message string }
	}
	if code != 200 || json.Unmarshal(raw, &l) != nil {
		s.t.Fatalf("events of %s/%s = %d %s", kind, name, code, raw)
	}
	out := make([]string, len(l.Items))
	for i, e := range l.Items {
		out[i] = e.Type
	}
	return out
}

// TestRecoverFailedSince drives POST /resources:reconcile and conctl
// reconcile --failed-since over a real server whose HTTP provider fails
// terminally: bad input is a 400 naming the field and changes nothing; a
// dry run counts and changes nothing; limit bounds a call and says more
// remain; since and the selector select; a real call re-drives each match
// as a new claim that reaches the provider (now fixed) and makes it
// Ready, logs a recovered event on each, and a second call right after
// re-drives nothing.
func TestRecoverFailedSince(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.leafManifest("quota")
	p := &brokenProvider{kind: "quota"}
	p.broken.Store(true)
	s.serveProvider("quota", p)

	t0 := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)
	for _, r := range []struct{ name, team string }{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}} {
		s.apply("quota", r.name, map[string]string{"team": r.team}, map[string]any{})
	}
	for _, n := range []string{"a1", "a2", "b1"} {
		s.waitPhase("quota", n, string(model.PhaseFailed), 30*time.Second)
	}
	// A resource that failed after t1: since tells it from the others.
	t1 := time.Now().UTC().Add(time.Second).Format(time.RFC3339)
	waitFor(t, 10*time.Second, "the clock to pass t1", func() bool { return time.Now().UTC().Format(time.RFC3339) > t1 })
	s.apply("quota", "a3", map[string]string{"team": "a"}, map[string]any{})
	s.waitPhase("quota", "a3", string(model.PhaseFailed), 30*time.Second)
	runs := p.runs.Load()

	// Bad input: 400 naming the field; nothing re-driven.
	for _, c := range []struct {
		body  any
		field string
	}{
		{map[string]any{"label_selector": "team=a"}, "body.since"},
		{map[string]any{"since": "yesterday"}, "body.since"},
		{map[string]any{"since": t0, "phase": "Ready"}, "body.phase"},
		{map[string]any{"since": t0, "limit": 5000}, "body.limit"},
		{map[string]any{"since": t0, "limit": -1}, "body.limit"},
		{map[string]any{"since": t0, "label_selector": "team in a"}, "body.label_selector"},
		{map[string]any{"since": t0, "selector": "team=a"}, "body"}, // an unknown field
	} {
		code, raw := s.call("POST", "/resources:reconcile", c.body)
		var prob struct {
			Errors []struct{ Location string } `json:"errors"`
		}
		if code != 400 || json.Unmarshal(raw, &prob) != nil || len(prob.Errors) == 0 || prob.Errors[0].Location != c.field {
			t.Errorf("%v = %d %s; want 400 at %s", c.body, code, raw, c.field)
		}
	}
	// Dry runs: counts, a bound, nothing changed.
	if a := s.recover("?dry_run=true", map[string]any{"since": t0, "label_selector": "team=a"}); a.Matched != 3 || a.Reconciled != 3 || a.More {
		t.Errorf("dry run team=a since t0 = %+v; want 3 matched, 3 that would be re-driven", a)
	}
	if a := s.recover("?dry_run=true", map[string]any{"since": t0, "limit": 2}); a.Matched != 2 || !a.More {
		t.Errorf("dry run limit 2 = %+v; want 2 matched and more", a)
	}
	if a := s.recover("?dry_run=true", map[string]any{"since": t1, "label_selector": "team=a"}); a.Matched != 1 || a.Items[0].Name != "a3" {
		t.Errorf("dry run since t1 = %+v; want a3 alone", a)
	}
	if a := s.recover("?dry_run=true", map[string]any{"since": t0, "phase": "Degraded"}); a.Matched != 0 {
		t.Errorf("dry run Degraded = %+v; want none", a)
	}
	for _, n := range []string{"a1", "a2", "a3", "b1"} {
		if r, _ := s.get("quota", n); r.Phase != string(model.PhaseFailed) {
			t.Errorf("%s is %s after refused calls and dry runs; want Failed", n, r.Phase)
		}
		if types := s.eventTypes("quota", n); strings.Contains(strings.Join(types, ","), "reconcile_requested") {
			t.Errorf("%s was re-driven by a refused call or a dry run: %v", n, types)
		}
	}
	if got := p.runs.Load(); got != runs {
		t.Errorf("the provider ran %d more times after refused calls and dry runs", got-runs)
	}

	// The provider is fixed; team=a since t0 is re-driven, bounded by 2 a call.
	p.broken.Store(false)
	first := s.recover("", map[string]any{"since": t0, "label_selector": "team=a", "limit": 2})
	if first.Matched != 2 || first.Reconciled != 2 || !first.More {
		t.Fatalf("first call = %+v; want 2 of 3 re-driven and more", first)
	}
	second := s.recover("", map[string]any{"since": t0, "label_selector": "team=a", "limit": 2})
	if second.Matched != 1 || second.Reconciled != 1 || second.More {
		t.Fatalf("second call = %+v; want the third one alone re-driven", second)
	}
	// Right after, nothing of team=a is left to re-drive.
	if again := s.recover("", map[string]any{"since": t0, "label_selector": "team=a"}); again.Matched != 0 || again.Reconciled != 0 {
		t.Errorf("a call right after = %+v; want nothing re-driven", again)
	}
	for _, n := range []string{"a1", "a2", "a3"} {
		s.waitPhase("quota", n, string(model.PhaseReady), 30*time.Second)
		types := strings.Join(s.eventTypes("quota", n), ",")
		if strings.Count(types, "recovered") != 1 || strings.Count(types, "reconcile_requested") != 1 {
			t.Errorf("%s's events = %s; want one recovered and one reconcile_requested", n, types)
		}
	}
	if r, _ := s.get("quota", "b1"); r.Phase != string(model.PhaseFailed) {
		t.Errorf("b1 (team=b) is %s; want it left Failed", r.Phase)
	}

	// conctl: the dry-run count, then the re-drive of b1.
	code, out, errs := s.conctl("reconcile", "--selector", "team=b", "--failed-since", t0, "--dry-run")
	if code != 0 || !strings.Contains(out, "1 matched, 1 would be re-driven (server dry run)") {
		t.Fatalf("conctl reconcile --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := s.conctl("reconcile", "--selector", "team=b", "--failed-since", "yesterday"); code != 2 || !strings.Contains(errs, "--failed-since") {
		t.Errorf("conctl reconcile --failed-since yesterday: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := s.conctl("reconcile", "--selector", "team=b"); code != 2 || !strings.Contains(errs, "need --failed-since") {
		t.Errorf("conctl reconcile --selector alone: exit %d\n%s%s", code, out, errs)
	}
	if r, _ := s.get("quota", "b1"); r.Phase != string(model.PhaseFailed) {
		t.Errorf("b1 is %s after a dry run and refused commands; want Failed", r.Phase)
	}
	code, out, errs = s.conctl("reconcile", "--selector", "team=b", "--failed-since", t0)
	if code != 0 || !strings.Contains(out, "1 matched, 1 re-driven") {
		t.Fatalf("conctl reconcile: exit %d\n%s%s", code, out, errs)
	}
	s.waitPhase("quota", "b1", string(model.PhaseReady), 30*time.Second)
}
