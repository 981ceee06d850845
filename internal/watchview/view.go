// Package watchview is the live view of a composite's subtree that
// `conctl watch resource` and `converge dev --demo` both show: a phase
// tally, a progress bar and the slowest or failing children. Compute is a
// pure function of what the API returned; Renderer draws it in place on a
// terminal or as plain lines elsewhere.
package watchview

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Node is a resource as GET /resources/{kind}/{name}/graph lists it; only
// the fields the view reads.
type Node struct {
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	Phase     string    `json:"phase"`
	LastError string    `json:"last_error"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Ref is "kind/name".
func (n Node) Ref() string { return n.Kind + "/" + n.Name }

// Snapshot is one read of a root and its owned subtree.
type Snapshot struct {
	Root      Node
	Children  []Node // every descendant, the root excluded
	Truncated bool   // the server capped the subtree (GraphLimit)
	At        time.Time
	// Deps maps a node's ref to the refs of the nodes in the subtree it
	// depends on, sorted.
	Deps map[string][]string
}

// GraphLimit is the server's cap on a graph read's nodes.
const GraphLimit = 10000

// DecodeGraph turns a graph answer into a snapshot of the root kind/name.
func DecodeGraph(body []byte, kind, name string, at time.Time) (Snapshot, error) {
	type ref struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	var g struct {
		Nodes []Node `json:"nodes"`
		Edges []struct {
			Dependent  ref `json:"dependent"`
			Dependency ref `json:"dependency"`
		} `json:"edges"`
	}
	if err := json.Unmarshal(body, &g); err != nil {
		return Snapshot{}, fmt.Errorf("decode the graph of %s/%s: %w", kind, name, err)
	}
	s := Snapshot{At: at, Truncated: len(g.Nodes) >= GraphLimit, Deps: map[string][]string{}}
	for _, e := range g.Edges {
		from := e.Dependent.Kind + "/" + e.Dependent.Name
		s.Deps[from] = append(s.Deps[from], e.Dependency.Kind+"/"+e.Dependency.Name)
	}
	for _, deps := range s.Deps {
		slices.Sort(deps)
	}
	found := false
	for _, n := range g.Nodes {
		if !found && n.Kind == kind && n.Name == name {
			s.Root, found = n, true
			continue
		}
		s.Children = append(s.Children, n)
	}
	if !found {
		return Snapshot{}, fmt.Errorf("the graph of %s/%s does not contain it", kind, name)
	}
	return s, nil
}

// Count is how many children are in one phase.
type Count struct {
	Phase string
	N     int
}

// Laggard is a child the view singles out: failing, or pending longest.
type Laggard struct {
	Ref    string
	Phase  string
	Age    time.Duration // since it last changed
	Reason string
	// WaitsFor is a resource it depends on that is not Ready, "" for none.
	WaitsFor string
	// Attempt is where its task stands, when Options.Attempt read it.
	Attempt Attempt
}

// Attempt is where a resource's task stands, as its detail (GET
// /resources/{kind}/{name}) shows it: the zero Attempt says nothing.
type Attempt struct {
	Failed  int       // attempts that failed so far
	Next    time.Time // when the next attempt is due, if one is queued
	Running bool      // an attempt is being delivered now
	Parked  string    // why a queued attempt is not being claimed
}

// View is what the watch shows for one snapshot.
type View struct {
	Root      Node
	Tally     []Count // largest first, Ready always first when present
	Ready     int
	Total     int
	Laggards  []Laggard
	Truncated bool
	At        time.Time // when the snapshot was read
}

// phaseOrder ranks phases for the tally when counts tie: healthy first.
var phaseOrder = []string{"Ready", "Reconciling", "Degraded", "Failed", "Deleting", "Quarantined", "Orphaned"}

// Compute tallies the children's phases and picks at most max laggards:
// those with a last_error first, then the non-Ready ones unchanged for
// longest (the oldest pending work), each with the first resource it
// depends on that is not Ready.
func Compute(s Snapshot, max int) View {
	v := View{Root: s.Root, Total: len(s.Children), Truncated: s.Truncated, At: s.At}
	counts := map[string]int{}
	phases := map[string]string{s.Root.Ref(): s.Root.Phase}
	var pending []Node
	for _, n := range s.Children {
		phases[n.Ref()] = n.Phase
		counts[n.Phase]++
		if n.Phase == "Ready" {
			v.Ready++
		} else {
			pending = append(pending, n)
		}
	}
	for p, n := range counts {
		v.Tally = append(v.Tally, Count{Phase: p, N: n})
	}
	rank := func(p string) int {
		if i := slices.Index(phaseOrder, p); i >= 0 {
			return i
		}
		return len(phaseOrder)
	}
	slices.SortFunc(v.Tally, func(a, b Count) int {
		if r := rank(a.Phase) - rank(b.Phase); r != 0 {
			return r
		}
		return strings.Compare(a.Phase, b.Phase)
	})
	slices.SortStableFunc(pending, func(a, b Node) int {
		if (a.LastError != "") != (b.LastError != "") {
			if a.LastError != "" {
				return -1
			}
			return 1
		}
		if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Ref(), b.Ref())
	})
	for _, n := range pending[:min(max, len(pending))] {
		l := Laggard{Ref: n.Ref(), Phase: n.Phase, Reason: n.LastError}
		if !n.UpdatedAt.IsZero() && s.At.After(n.UpdatedAt) {
			l.Age = s.At.Sub(n.UpdatedAt).Truncate(time.Second)
		}
		for _, d := range s.Deps[l.Ref] {
			if phases[d] != "Ready" {
				l.WaitsFor = d
				break
			}
		}
		v.Laggards = append(v.Laggards, l)
	}
	return v
}

// Done reports whether the root is Ready.
func (v View) Done() bool { return v.Root.Phase == "Ready" }

// TallyText is "Ready 120 · Reconciling 30 · Failed 2".
func (v View) TallyText() string {
	if len(v.Tally) == 0 {
		return "no children yet"
	}
	parts := make([]string, len(v.Tally))
	for i, c := range v.Tally {
		parts[i] = fmt.Sprintf("%s %d", c.Phase, c.N)
	}
	s := strings.Join(parts, " · ")
	if v.Truncated {
		s += fmt.Sprintf(" (the first %d only)", GraphLimit)
	}
	return s
}

// Bar is a progress bar of Ready over total, width cells wide, with the
// figures: "[#########.........] 120/152  79%".
func (v View) Bar(width int) string {
	width = max(width, 1)
	filled, pct := 0, 0
	if v.Total > 0 {
		filled, pct = v.Ready*width/v.Total, v.Ready*100/v.Total
	}
	return fmt.Sprintf("[%s%s] %d/%d %3d%%", strings.Repeat("#", filled), strings.Repeat(".", width-filled), v.Ready, v.Total, pct)
}

// Lines is the full view: the root, the tally, the bar and the laggards.
func (v View) Lines(width int) []string {
	lines := []string{
		fmt.Sprintf("%s %s", v.Root.Ref(), v.Root.Phase),
		"  " + v.TallyText(),
		"  " + v.Bar(max(10, min(50, width-20))),
	}
	for _, l := range v.Laggards {
		s := fmt.Sprintf("    %s %s for %s", l.Ref, l.Phase, l.Age)
		if a := l.Attempt.text(v.At); a != "" {
			s += ", " + a
		}
		if l.WaitsFor != "" {
			s += ", waits for " + l.WaitsFor
		}
		if l.Reason != "" {
			s += ": " + l.Reason
		}
		lines = append(lines, s)
	}
	for i, s := range lines {
		lines[i] = truncate(s, width)
	}
	return lines
}

// text is "attempt 4 in 12s", "attempt 4 running", "attempt 1 due" or
// "attempt 2 parked (why)", at now; "" for the zero Attempt.
func (a Attempt) text(now time.Time) string {
	n := a.Failed + 1
	switch {
	case a.Running:
		return fmt.Sprintf("attempt %d running", n)
	case a.Parked != "":
		return fmt.Sprintf("attempt %d parked (%s)", n, a.Parked)
	case a.Next.IsZero():
		return ""
	case a.Next.Sub(now) >= time.Second:
		return fmt.Sprintf("attempt %d in %s", n, a.Next.Sub(now).Round(time.Second))
	}
	return fmt.Sprintf("attempt %d due", n)
}

// truncate cuts s to width runes, marking the cut: a wrapped line would
// break the in-place redraw.
func truncate(s string, width int) string {
	r := []rune(s)
	if width < 2 || len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}
