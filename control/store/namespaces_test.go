package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

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
