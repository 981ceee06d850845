package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

func TestApplyResource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	vpcSchema := `{"type":"object","properties":{"cidr":{"type":"string"}},"required":["cidr"],"additionalProperties":false}`

	t.Run("WithoutAValidatorTheDatabaseSchemaIsUsed", func(t *testing.T) {
		t.Parallel()
		// No KindCache: the store compiles the stored schema itself, so a
		// tool that forgets to install one cannot skip validation.
		st := store.New(pgtest.New(t).Pool, store.Config{})
		if _, err := st.PutManifest(ctx, manifest("vpc", 1, vpcSchema)); err != nil {
			t.Fatal(err)
		}
		_, _, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{}`)})
		var de *store.DocumentError
		if !errors.As(err, &de) || de.Violations[0].Keyword != "required" {
			t.Fatalf("got %v, want a required violation", err)
		}
		r, res, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{"cidr":"x"}`)})
		if err != nil || res != store.ApplyCreated || r.Generation != 1 {
			t.Fatalf("apply: %+v %v %v", r, res, err)
		}
		_, _, err = st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 2, Name: "a", Spec: json.RawMessage(`{"cidr":"x"}`)})
		var nf *store.NotFoundError
		if !errors.As(err, &nf) || nf.Location != "kind_version" || !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown version: got %v", err)
		}
	})

	t.Run("ConcurrentAppliesOfOneNameCreateOnce", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		st := store.New(db.Pool, store.Config{})
		c := store.NewKindCache(st, store.KindCacheConfig{}, nil)
		if _, err := st.PutManifest(ctx, manifest("vpc", 1, vpcSchema)); err != nil {
			t.Fatal(err)
		}
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			results = map[store.ApplyResult]int{}
			ids     = map[string]bool{}
		)
		for range 8 {
			wg.Go(func() {
				r, res, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 1, Name: "same",
					Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				results[res]++
				ids[r.ID] = true
			})
		}
		wg.Wait()
		if results[store.ApplyCreated] != 1 || results[store.ApplyUnchanged] != 7 || len(ids) != 1 {
			t.Fatalf("results %v over %d ids, want 1 created, 7 unchanged, one id", results, len(ids))
		}
	})
}
