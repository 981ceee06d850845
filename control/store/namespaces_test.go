package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// TestQuotaHoldsUnderConcurrentCreates: creations racing into a namespace
// with max_objects create exactly the quota, single applies and batches
// alike; the rest are refused with a *QuotaError naming it.
func TestQuotaHoldsUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(pgtest.New(t).Pool, store.Config{})
	if _, err := st.PutManifest(ctx, manifest("vpc", 1, `{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
	limit := 5
	if _, _, err := st.PutNamespace(ctx, store.PutNamespaceParams{Name: "team-a", MaxObjects: &limit}); err != nil {
		t.Fatal(err)
	}
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		created, refused int
	)
	for i := range 8 {
		wg.Go(func() {
			p := store.ApplyResourceParams{Namespace: "team-a", Kind: "vpc", KindVersion: 1, Name: fmt.Sprintf("one-%d", i)}
			_, res, err := st.ApplyResource(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			var qe *store.QuotaError
			switch {
			case err == nil && res == store.ApplyCreated:
				created++
			case errors.As(err, &qe) && qe.Namespace == "team-a" && qe.Quota == store.QuotaMaxObjects && qe.Limit == limit:
				refused++
			default:
				t.Errorf("apply %s: %v %v", p.Name, res, err)
			}
		})
		wg.Go(func() {
			items := []store.ApplyResourceParams{{Kind: "vpc", KindVersion: 1, Name: fmt.Sprintf("batch-%d", i)}}
			res, err := st.ApplyResources(ctx, "team-a", items)
			mu.Lock()
			defer mu.Unlock()
			var qe *store.QuotaError
			switch {
			case err != nil:
				t.Errorf("batch: %v", err)
			case res[0].Result == store.ApplyCreated:
				created++
			case errors.As(res[0].Err, &qe):
				refused++
			default:
				t.Errorf("batch item: %+v", res[0])
			}
		})
	}
	wg.Wait()
	n, err := st.GetNamespace(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if created != limit || refused != 16-limit || n.Objects != limit {
		t.Errorf("%d created, %d refused, %d held; want %d created and held, %d refused", created, refused, n.Objects, limit, 16-limit)
	}
}

// TestDeleteNamespaceWaitsForACreation: a creation holding its namespace
// (namespace_hold, as every apply does) keeps a deletion of the namespace
// waiting; once the creation commits, the deletion finds the resource and
// is refused, so no resource outlives its namespace.
func TestDeleteNamespaceWaitsForACreation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	if _, err := st.PutManifest(ctx, manifest("vpc", 1, `{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.PutNamespace(ctx, store.PutNamespaceParams{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var held bool
	if err := tx.QueryRow(ctx, `SELECT namespace_hold('team-a')`).Scan(&held); err != nil || !held {
		t.Fatalf("namespace_hold: %v %v", held, err)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- st.DeleteNamespace(ctx, "team-a") }()
	// The deletion waits on the creation's hold: poll until it does.
	waitFor(t, 30*time.Second, "the deletion to wait for the creation's hold", func() bool {
		var waiting int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting == 1
	})
	if _, err := tx.Exec(ctx, `INSERT INTO resources (namespace, kind, kind_version, name) VALUES ('team-a', 'vpc', 1, 'late')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var ce *store.ConflictError
	if err := <-deleted; !errors.As(err, &ce) {
		t.Fatalf("delete of a namespace a creation held: %v; want a *ConflictError counting the resource", err)
	}
	if _, err := st.GetNamespace(ctx, "team-a"); err != nil {
		t.Errorf("team-a after the refused delete: %v", err)
	}
}
