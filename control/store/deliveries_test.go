package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
)

// TestDeliveries: the log records every attempt as given (one insert, in
// order, excerpts cut on a rune boundary, rows of an unknown endpoint
// dropped), lists them newest first through each filter with a keyset
// cursor, and fills a callback's row (no name) from the database.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	for _, n := range []string{"a", "b"} {
		if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams(n)); err != nil {
			t.Fatal(err)
		}
	}
	var rid string
	if err := b.db.Pool.QueryRow(b.ctx, `WITH m AS (INSERT INTO kind_manifest (kind, kind_version, reactions)
		VALUES ('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]'))
		INSERT INTO resources (kind, kind_version, name) VALUES ('leaf', 1, 'r1') RETURNING id`).Scan(&rid); err != nil {
		t.Fatal(err)
	}
	res := store.DeliveryResource{ID: rid, Namespace: store.DefaultNamespace, Kind: "leaf", Name: "r1"}
	task := func(i int) string { return fmt.Sprintf("00000000-0000-0000-0000-%012d", i) }
	ds := []store.Delivery{
		{Endpoint: "a", TaskID: task(1), Resource: res, TaskType: "reconcile", ClaimEpoch: 1, Attempt: 1, HTTPStatus: 200, LatencyMS: 2, Classification: "ok"},
		{Endpoint: "a", TaskID: task(2), Resource: res, TaskType: "reconcile", ClaimEpoch: 2, Attempt: 1, LatencyMS: 9, Classification: "network",
			Excerpt: strings.Repeat("é", 400) + "\x00"}, // 800 bytes and a NUL
		{Endpoint: "b", TaskID: task(3), Resource: store.DeliveryResource{Kind: "other", Name: "x"}, TaskType: "reconcile", ClaimEpoch: 3,
			Attempt: 2, HTTPStatus: 202, Classification: "accepted"},
		{Endpoint: "gone", TaskID: task(4), Resource: res, Classification: "ok"},
		// A callback's row: the token names the task and the resource only.
		{Endpoint: "b", TaskID: task(5), Resource: store.DeliveryResource{ID: rid}, ClaimEpoch: 5, Attempt: 1, HTTPStatus: 202,
			Classification: store.DeliveryCallbackError, Excerpt: "quota"},
	}
	// The dispatcher's rows (all named), then the callback's (looked up).
	for _, batch := range [][]store.Delivery{ds[:4], ds[4:]} {
		if err := b.st.RecordDeliveries(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f store.DeliveryFilter) []store.Delivery {
		t.Helper()
		page, err := b.st.ListDeliveries(b.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return page.Items
	}
	claimEpochs := func(items []store.Delivery) string {
		var s []string
		for _, d := range items {
			s = append(s, fmt.Sprint(d.ClaimEpoch))
		}
		return strings.Join(s, ",")
	}
	all := list(store.DeliveryFilter{})
	if got := claimEpochs(all); got != "5,3,2,1" {
		t.Fatalf("all = %s, want 5,3,2,1 (newest first, the unknown endpoint's row dropped)", got)
	}
	cb, net, ok := all[0], all[2], all[3]
	if cb.Resource != res || cb.Classification != "callback_error" || !cb.Failed || cb.Excerpt != "quota" {
		t.Errorf("callback row = %+v, want its resource filled in", cb)
	}
	if !net.Failed || net.HTTPStatus != 0 || len(net.Excerpt) > store.DeliveryExcerptMax || !strings.HasPrefix(net.Excerpt, "éé") ||
		strings.Contains(net.Excerpt, "\x00") {
		t.Errorf("network failure = %d-byte excerpt, failed %v, status %d", len(net.Excerpt), net.Failed, net.HTTPStatus)
	}
	if ok.Failed || ok.Excerpt != "" || ok.HTTPStatus != 200 || ok.TaskType != "reconcile" || ok.Resource != res {
		t.Errorf("success = %+v", ok)
	}
	for _, tc := range []struct {
		f    store.DeliveryFilter
		want string
	}{
		{store.DeliveryFilter{Endpoint: "a"}, "2,1"},
		{store.DeliveryFilter{Kind: "leaf", Name: "r1"}, "5,2,1"},
		{store.DeliveryFilter{Kind: "leaf", Name: "r1", ResourceID: rid, Failed: true}, "5,2"},
		{store.DeliveryFilter{Failed: true}, "5,2"},
		{store.DeliveryFilter{Classification: "accepted"}, "3"},
		{store.DeliveryFilter{Endpoint: "b", Failed: true}, "5"},
		{store.DeliveryFilter{Since: time.Now().Add(time.Hour)}, ""},
		{store.DeliveryFilter{Since: time.Now().Add(-time.Hour), Endpoint: "a"}, "2,1"},
	} {
		if got := claimEpochs(list(tc.f)); got != tc.want {
			t.Errorf("%+v = %s, want %s", tc.f, got, tc.want)
		}
	}

	// Pages: a cursor continues below the last id, with the same filters.
	var seen []string
	for cursor, pages := "", 0; ; pages++ {
		page, err := b.st.ListDeliveries(b.ctx, store.DeliveryFilter{Kind: "leaf", Name: "r1", Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, claimEpochs(page.Items))
		if cursor = page.NextCursor; cursor == "" {
			break
		}
		if pages > 3 {
			t.Fatal("the cursor does not end")
		}
	}
	if got := strings.Join(seen, "|"); got != "5,2|1" {
		t.Errorf("pages = %s, want 5,2|1", got)
	}

	for _, tc := range []struct {
		f   store.DeliveryFilter
		loc string
	}{
		{store.DeliveryFilter{Name: "r1"}, "kind"},
		{store.DeliveryFilter{Since: time.Unix(100, 0), Until: time.Unix(100, 0)}, "until"},
		{store.DeliveryFilter{Classification: "fine"}, "classification"},
		{store.DeliveryFilter{Cursor: "eA"}, "cursor"},
		{store.DeliveryFilter{Limit: 1001}, "limit"},
	} {
		_, err := b.st.ListDeliveries(b.ctx, tc.f)
		if ie, ok := errors.AsType[*store.InvalidError](err); !ok || ie.Location != tc.loc {
			t.Errorf("%+v = %v, want an InvalidError at %s", tc.f, err, tc.loc)
		}
	}
	if _, err := b.st.GetDelivery(b.ctx, 1<<40); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown id = %v, want ErrNotFound", err)
	}
}

// TestPruneDeliveries: the periodic prune keeps each endpoint's newest
// keep attempts and drops those older than the max age; the insert prunes
// nothing.
func TestPruneDeliveries(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	for _, n := range []string{"a", "b"} {
		if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams(n)); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(ep string, n, from int, at time.Time) []store.Delivery {
		out := make([]store.Delivery, n)
		for i := range out {
			out[i] = store.Delivery{Endpoint: ep, At: at, TaskID: fmt.Sprintf("00000000-0000-0000-0000-%012d", from+i),
				ClaimEpoch: int64(from + i), Attempt: 1, Classification: "ok"}
		}
		return out
	}
	old := time.Now().Add(-10 * 24 * time.Hour)
	for _, d := range [][]store.Delivery{batch("a", 30, 0, old), batch("a", 50, 100, time.Time{}), batch("b", 5, 200, time.Time{})} {
		if err := b.st.RecordDeliveries(b.ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	count := func(ep string) int {
		var n int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM endpoint_deliveries WHERE endpoint = $1`, ep).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a := count("a"); a != 80 {
		t.Fatalf("a has %d rows before the prune, want all 80", a)
	}
	// By age first: the 30 old rows go, in batches of limit.
	aged, counted, err := b.st.PruneDeliveries(b.ctx, 168*time.Hour, 1000, 20)
	if err != nil || aged != 20 || counted != 0 {
		t.Fatalf("first prune = %d aged, %d counted, %v; want the limit, 20, and 0", aged, counted, err)
	}
	if aged, _, err = b.st.PruneDeliveries(b.ctx, 168*time.Hour, 1000, 20); err != nil || aged != 10 {
		t.Fatalf("second prune = %d, %v; want the other 10 old rows", aged, err)
	}
	// By count: a keeps its newest 40, b (under) all 5.
	if aged, counted, err = b.st.PruneDeliveries(b.ctx, 168*time.Hour, 40, 1000); err != nil || aged != 0 || counted != 10 {
		t.Fatalf("count prune = %d aged, %d counted, %v; want 0 and 10", aged, counted, err)
	}
	if a, bb := count("a"), count("b"); a != 40 || bb != 5 {
		t.Fatalf("kept %d of a and %d of b, want 40 and 5", a, bb)
	}
	page, err := b.st.ListDeliveries(b.ctx, store.DeliveryFilter{Endpoint: "a", Limit: 1000})
	if err != nil || page.Items[0].ClaimEpoch != 149 || page.Items[39].ClaimEpoch != 110 {
		t.Fatalf("kept %+v, %v; want a's newest 40 (149..110)", page.Items, err)
	}
	if aged, counted, err = b.st.PruneDeliveries(b.ctx, 168*time.Hour, 40, 1000); err != nil || aged+counted != 0 {
		t.Fatalf("a settled prune = %d+%d, %v; want 0", aged, counted, err)
	}
}
