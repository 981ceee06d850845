package main

import (
	"maps"
	"slices"
	"testing"

	"github.com/convergeplane/converge/chaos/internal/calllog"
)

// A restarted provider owes every fault its earlier starts did not log, and
// none they did.
func TestOwedAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prior []calllog.Record
		want  []string
	}{
		{name: "nothing logged", want: []string{"5xx", "async", "drop", "dup", "timeout"}},
		{name: "a held timeout lost with the process", prior: []calllog.Record{
			{Type: calllog.Delivery, Fault: "5xx", Answer: "503"},
			{Type: calllog.Delivery, Answer: "202"},
			{Type: calllog.Delivery, Answer: "200 outcome"},
			{Type: calllog.Callback, Fault: "drop", Answer: "dropped"},
			{Type: calllog.Callback, Fault: "dup-first", Answer: "sending"},
			{Type: calllog.Callback, Fault: "late", Answer: "sending"},
		}, want: []string{"timeout"}},
		{name: "every fault logged", prior: []calllog.Record{
			{Type: calllog.Delivery, Fault: "5xx"}, {Type: calllog.Delivery, Fault: "timeout", Answer: "200 outcome"},
			{Type: calllog.Delivery, Answer: "202"}, {Type: calllog.Callback, Fault: "drop"}, {Type: calllog.Callback, Fault: "dup-first"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(owedAfter(tc.prior)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("owed %v, want %v", got, tc.want)
			}
		})
	}
}

// An owed fault is injected at its next draw, once: after that it is drawn
// at its chance again.
func TestDrawInjectsAnOwedFaultOnce(t *testing.T) {
	p := &provider{f: faults{seed: 1}, drawn: map[string]int{}, injected: map[string]int{},
		owed: map[string]bool{"timeout": true}}
	if !p.draw("k1", "timeout", 1e-9, 20) {
		t.Fatal("the owed timeout was not injected at its first draw")
	}
	if p.draw("k2", "timeout", 1e-9, 20) {
		t.Error("the timeout was injected again, at a chance of 1e-9")
	}
	if p.draw("k3", "5xx", 1e-9, 20) {
		t.Error("a fault that was not owed was injected at its first draw")
	}
}
