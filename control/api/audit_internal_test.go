package api

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestAuditGroups: requests that end while an audit write is in flight
// share the next write (one COPY: one transaction, so one `at`), each
// returns only once its row is written, and none is lost.
func TestAuditGroups(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	var g auditGroups
	entry := func(i int) store.AuditEntry {
		return store.AuditEntry{Subject: "token:admin-0", Method: "POST", Route: "/api/v1/resources", Path: "/api/v1/resources",
			Namespace: "default", RequestID: fmt.Sprintf("req-%d", i), Status: 201, Outcome: store.AuditOK}
	}
	g.writing.Lock() // a write in flight
	const n = 10
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- g.write(t.Context(), st, entry(i)) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.mu.Lock()
		joined := 0
		if g.forming != nil {
			joined = len(g.forming.entries)
		}
		g.mu.Unlock()
		if joined == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests joined the forming group", joined, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var rows int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("rows before the write in flight ended: %d (%v), want 0", rows, err)
	}
	g.writing.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var ats, ids int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(DISTINCT at), count(DISTINCT request_id) FROM audit_log`).Scan(&ats, &ids); err != nil {
		t.Fatal(err)
	}
	if ids != n || ats != 1 {
		t.Fatalf("%d requests in %d writes, want %d in one", ids, ats, n)
	}

	// Alone, a request writes its own row at once.
	if err := g.write(t.Context(), st, entry(n)); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE request_id = $1`, fmt.Sprintf("req-%d", n)).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the lone request's row: %d (%v)", rows, err)
	}
}
