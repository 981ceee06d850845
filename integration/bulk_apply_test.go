package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestBulkApplyConverges creates resources through POST /resources:batch on
// the whole product (ROLE all) with an HTTP provider, and checks that each
// converges exactly like a resource applied singly: one delivery each, the
// provider's status stored, the same events, and the invalid item of the
// batch written nowhere.
func TestBulkApplyConverges(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	if code, body := s.call("PUT", "/kinds/echo/manifest", map[string]any{"kind": "echo", "kind_version": 1,
		"reactions": json.RawMessage(`[{"name":"work","trigger":"specChange","emits":["status"]}]`)}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	p := &echoProvider{}
	p.ready.Store(true)
	s.serveProvider("echo", p)

	if code, body := s.call("POST", "/resources", map[string]any{"kind": "echo", "kind_version": 1, "name": "single",
		"spec": map[string]any{"n": 100}}); code != 201 {
		t.Fatalf("single apply = %d %s", code, body)
	}
	const n = 20
	items := []map[string]any{{"kind": "echo", "name": "no-version"}} // invalid: kind_version is required
	for i := range n {
		items = append(items, map[string]any{"kind": "echo", "kind_version": 1, "name": fmt.Sprintf("b%02d", i),
			"spec": map[string]any{"n": i}})
	}
	code, body := s.call("POST", "/resources:batch", map[string]any{"items": items})
	var res struct{ Created, Invalid int }
	if code != 200 || json.Unmarshal(body, &res) != nil || res.Created != n || res.Invalid != 1 {
		t.Fatalf("batch = %d %s", code, body)
	}

	waitFor(t, 60*time.Second, "every resource Ready", func() bool {
		return s.count(`SELECT count(*) FROM resources WHERE phase = 'Ready'`) == n+1
	})
	if got := p.runs.Load(); got != n+1 {
		t.Errorf("provider ran %d times, want %d (once per resource)", got, n+1)
	}
	for i := range n {
		var detail struct {
			Status struct {
				Echoed struct{ N int } `json:"echoed"`
			} `json:"status"`
		}
		_, body := s.call("GET", fmt.Sprintf("/resources/echo/b%02d", i), nil)
		if json.Unmarshal(body, &detail) != nil || detail.Status.Echoed.N != i {
			t.Errorf("b%02d: %s, want its spec echoed", i, body)
		}
	}
	if c := s.count(`SELECT count(*) FROM resources WHERE name = 'no-version'`); c != 0 {
		t.Errorf("the invalid item was written")
	}
	// The event trail of a batch-created resource is a single apply's.
	events := func(name string) []string {
		rows, err := s.db.Pool.Query(t.Context(), `SELECT e.type || ':' || coalesce(e.message, '')
			FROM resource_events e JOIN resources r ON r.id = e.resource_id WHERE r.name = $1 ORDER BY e.id`, name)
		must(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			must(t, rows.Scan(&s))
			out = append(out, s)
		}
		must(t, rows.Err())
		return out
	}
	if single, batch := events("single"), events("b07"); !slices.Equal(single, batch) {
		t.Errorf("events of a batch-created resource %q, of a single apply %q", batch, single)
	}
	s.checkInvariants()
}
