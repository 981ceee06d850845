package watchview

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func node(ref, phase string, age time.Duration, lastErr string) Node {
	kind, name, _ := strings.Cut(ref, "/")
	return Node{Kind: kind, Name: name, Phase: phase, LastError: lastErr, UpdatedAt: t0.Add(-age)}
}

func snapshot() Snapshot {
	return Snapshot{At: t0, Root: node("bom/a", "Reconciling", 0, ""), Children: []Node{
		node("vpc/1", "Ready", time.Minute, ""),
		node("vpc/2", "Ready", time.Minute, ""),
		node("vpc/3", "Ready", time.Minute, ""),
		node("route/1", "Reconciling", 5*time.Second, ""),
		node("route/2", "Reconciling", 40*time.Second, ""),
		node("route/3", "Reconciling", 20*time.Second, ""),
		node("tgw/1", "Failed", 2*time.Second, "boom: injected fault"),
	}}
}

func TestCompute(t *testing.T) {
	t.Parallel()
	v := Compute(snapshot(), 3)
	if got, want := v.TallyText(), "Ready 3 · Reconciling 3 · Failed 1"; got != want {
		t.Errorf("tally = %q, want %q", got, want)
	}
	if v.Ready != 3 || v.Total != 7 || v.Done() {
		t.Errorf("ready %d/%d done %v, want 3/7 not done", v.Ready, v.Total, v.Done())
	}
	// The failing child first, then the pending ones unchanged longest.
	want := []Laggard{
		{Ref: "tgw/1", Phase: "Failed", Age: 2 * time.Second, Reason: "boom: injected fault"},
		{Ref: "route/2", Phase: "Reconciling", Age: 40 * time.Second},
		{Ref: "route/3", Phase: "Reconciling", Age: 20 * time.Second},
	}
	if !slices.Equal(v.Laggards, want) {
		t.Errorf("laggards = %+v\nwant %+v", v.Laggards, want)
	}
	if n := len(Compute(snapshot(), 0).Laggards); n != 0 {
		t.Errorf("max 0 picked %d laggards", n)
	}
}

func TestComputeEmptyAndDone(t *testing.T) {
	t.Parallel()
	v := Compute(Snapshot{At: t0, Root: node("bom/a", "Reconciling", 0, "")}, 5)
	if v.TallyText() != "no children yet" || v.Bar(10) != "[..........] 0/0   0%" {
		t.Errorf("empty: tally %q bar %q", v.TallyText(), v.Bar(10))
	}
	s := snapshot()
	s.Root.Phase = "Ready"
	s.Truncated = true
	v = Compute(s, 5)
	if !v.Done() || !strings.HasSuffix(v.TallyText(), "(the first 10000 only)") {
		t.Errorf("done %v tally %q", v.Done(), v.TallyText())
	}
}

func TestBar(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ready, total, width int
		want                string
	}{
		{3, 7, 14, "[######........] 3/7  42%"},
		{7, 7, 4, "[####] 7/7 100%"},
		{0, 7, 4, "[....] 0/7   0%"},
	} {
		if got := (View{Ready: c.ready, Total: c.total}).Bar(c.width); got != c.want {
			t.Errorf("Bar(%d/%d, %d) = %q, want %q", c.ready, c.total, c.width, got, c.want)
		}
	}
}

func TestLines(t *testing.T) {
	t.Parallel()
	got := Compute(snapshot(), 2).Lines(40)
	want := []string{
		"bom/a Reconciling",
		"  Ready 3 · Reconciling 3 · Failed 1",
		"  [########............] 3/7  42%",
		"    tgw/1 Failed for 2s: boom: injected…",
		"    route/2 Reconciling for 40s",
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDecodeGraph(t *testing.T) {
	t.Parallel()
	body := []byte(`{"nodes":[{"kind":"bom","name":"a","phase":"Ready"},
		{"kind":"vpc","name":"1","phase":"Failed","last_error":"x","updated_at":"2026-01-02T03:04:00Z"}],"edges":[]}`)
	s, err := DecodeGraph(body, "bom", "a", t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Root.Phase != "Ready" || len(s.Children) != 1 || s.Children[0].LastError != "x" || !s.Children[0].UpdatedAt.Equal(t0.Add(-5*time.Second)) {
		t.Errorf("snapshot = %+v", s)
	}
	if _, err := DecodeGraph(body, "bom", "b", t0); err == nil {
		t.Error("a graph without the root decoded")
	}
}

func TestRendererPlain(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := NewRenderer(&buf, false, 80)
	v := Compute(snapshot(), 3)
	r.Draw(v, time.Second)
	r.Draw(v, 2*time.Second) // unchanged: no line
	s := snapshot()
	s.Children[3].Phase = "Ready"
	r.Draw(Compute(s, 3), 3*time.Second)
	want := "[   1.0s] bom/a Reconciling: Ready 3 · Reconciling 3 · Failed 1 (3/7 ready)\n" +
		"[   3.0s] bom/a Reconciling: Ready 4 · Reconciling 2 · Failed 1 (4/7 ready)\n"
	if buf.String() != want {
		t.Errorf("plain output:\n%q\nwant\n%q", buf.String(), want)
	}
}

func TestRendererTerminal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := NewRenderer(&buf, true, 80)
	v := Compute(snapshot(), 1)
	r.Draw(v, time.Second)
	first := buf.String()
	if strings.Contains(first, "\x1b[4A") || strings.Count(first, "\r\x1b[2K") != 4 {
		t.Errorf("first frame moved up or drew other than 4 lines: %q", first)
	}
	buf.Reset()
	r.Draw(v, 2*time.Second) // redrawn in place even when unchanged (the clock moves)
	if !strings.HasPrefix(buf.String(), "\x1b[4A\r\x1b[2K[   2.0s] bom/a Reconciling\n") || !strings.HasSuffix(buf.String(), "\x1b[J") {
		t.Errorf("second frame is not drawn over the first: %q", buf.String())
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	t.Run("UntilReady", func(t *testing.T) {
		t.Parallel()
		reads := 0
		fetch := func(context.Context) (Snapshot, error) {
			reads++
			s := snapshot()
			if reads == 3 {
				s.Root.Phase = "Ready"
			}
			return s, nil
		}
		var buf bytes.Buffer
		v, err := Watch(t.Context(), fetch, Options{Out: &buf, Interval: time.Millisecond, Laggards: 2})
		if err != nil || !v.Done() || reads != 3 {
			t.Fatalf("watch = %v after %d reads (done %v)", err, reads, v.Done())
		}
		if n := strings.Count(buf.String(), "\n"); n != 2 {
			t.Errorf("printed %d lines, want 2 (the tally changed once):\n%s", n, buf.String())
		}
	})
	t.Run("Until", func(t *testing.T) {
		t.Parallel()
		reads := 0
		fetch := func(context.Context) (Snapshot, error) { reads++; return snapshot(), nil }
		until := func(_ context.Context, s Snapshot) bool { return reads == 2 && s.Root.Phase != "Ready" }
		var buf bytes.Buffer
		v, err := Watch(t.Context(), fetch, Options{Out: &buf, Interval: time.Millisecond, Until: until})
		if err != nil || v.Done() || reads != 2 {
			t.Fatalf("watch = %v after %d reads (done %v), want it to end at the second read", err, reads, v.Done())
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		fetch := func(context.Context) (Snapshot, error) { return snapshot(), nil }
		var buf bytes.Buffer
		_, err := Watch(t.Context(), fetch, Options{Out: &buf, Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond})
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "bom/a is Reconciling, children Ready 3") {
			t.Errorf("err = %v, want a timeout naming where it stands", err)
		}
	})
	t.Run("AttemptsOnATerminal", func(t *testing.T) {
		t.Parallel()
		var asked []string
		attempt := func(_ context.Context, ref string) (Attempt, error) {
			asked = append(asked, ref)
			if ref == "route/2" {
				return Attempt{}, errors.New("gone")
			}
			return Attempt{Failed: 2, Next: t0.Add(time.Hour)}, nil
		}
		done := func(context.Context) (Snapshot, error) {
			s := snapshot()
			s.Root.Phase = "Ready"
			return s, nil
		}
		var buf bytes.Buffer
		if _, err := Watch(t.Context(), done, Options{Out: &buf, TTY: true, Width: 200, Interval: time.Millisecond, Laggards: 2, Attempt: attempt}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(asked, []string{"tgw/1", "route/2"}) || !strings.Contains(buf.String(), "tgw/1 Failed for 2s, attempt 3 in 1h0m0s: boom") ||
			strings.Contains(buf.String(), "route/2 Reconciling for 40s,") {
			t.Errorf("asked %v, drew %q; want tgw/1's attempt shown, route/2's error ignored", asked, buf.String())
		}
		asked = nil
		if _, err := Watch(t.Context(), done, Options{Out: &buf, Interval: time.Millisecond, Laggards: 2, Attempt: attempt}); err != nil || asked != nil {
			t.Errorf("not on a terminal: asked %v (%v), want nothing: the plain lines show no laggards", asked, err)
		}
	})
	t.Run("FetchError", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		_, err := Watch(t.Context(), func(context.Context) (Snapshot, error) { return Snapshot{}, boom },
			Options{Out: &bytes.Buffer{}, Interval: time.Millisecond})
		if !errors.Is(err, boom) {
			t.Errorf("err = %v, want boom", err)
		}
	})
}

// TestLinesSayWhatLaggardsWaitFor: a failing child shows when its task is
// tried next, and a pending child the dependency it waits for.
func TestLinesSayWhatLaggardsWaitFor(t *testing.T) {
	t.Parallel()
	s := snapshot()
	s.Deps = map[string][]string{"route/2": {"vpc/1", "tgw/1"}, "route/3": {"vpc/2"}}
	slices.Sort(s.Deps["route/2"])
	v := Compute(s, 3)
	v.Laggards[0].Attempt = Attempt{Failed: 3, Next: t0.Add(12 * time.Second)}
	v.Laggards[1].Attempt = Attempt{Failed: 0, Running: true}
	want := []string{
		"bom/a Reconciling",
		"  Ready 3 · Reconciling 3 · Failed 1",
		"  [#####################.............................] 3/7  42%",
		"    tgw/1 Failed for 2s, attempt 4 in 12s: boom: injected fault",
		"    route/2 Reconciling for 40s, attempt 1 running, waits for tgw/1",
		"    route/3 Reconciling for 20s",
	}
	if got := v.Lines(80); !slices.Equal(got, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range []struct {
		a    Attempt
		want string
	}{
		{Attempt{}, ""},
		{Attempt{Failed: 2}, ""}, // its outcome awaits the drain: nothing queued
		{Attempt{Failed: 2, Next: t0.Add(-time.Second)}, "attempt 3 due"},
		{Attempt{Next: t0.Add(90 * time.Second)}, "attempt 1 in 1m30s"},
		{Attempt{Failed: 1, Next: t0, Parked: "no ready endpoint serves vpc/1"}, "attempt 2 parked (no ready endpoint serves vpc/1)"},
	} {
		if got := c.a.text(t0); got != c.want {
			t.Errorf("%+v reads %q, want %q", c.a, got, c.want)
		}
	}
}

func TestDecodeGraphDependencies(t *testing.T) {
	t.Parallel()
	body := []byte(`{"nodes":[{"kind":"bom","name":"a","phase":"Reconciling"},{"kind":"vpc","name":"1","phase":"Failed","last_error":"x"},
		{"kind":"route","name":"1","phase":"Reconciling"},{"kind":"tgw","name":"1","phase":"Ready"}],
		"edges":[{"dependent":{"kind":"route","name":"1"},"dependency":{"kind":"vpc","name":"1"}},
		{"dependent":{"kind":"route","name":"1"},"dependency":{"kind":"tgw","name":"1"}}]}`)
	s, err := DecodeGraph(body, "bom", "a", t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Deps["route/1"]; !slices.Equal(got, []string{"tgw/1", "vpc/1"}) {
		t.Errorf("route/1 depends on %v, want [tgw/1 vpc/1]", got)
	}
	v := Compute(s, 5)
	if len(v.Laggards) != 2 || v.Laggards[1].Ref != "route/1" || v.Laggards[1].WaitsFor != "vpc/1" || v.Laggards[0].WaitsFor != "" {
		t.Errorf("laggards = %+v, want route/1 waiting for vpc/1 (tgw/1 is Ready)", v.Laggards)
	}
}
