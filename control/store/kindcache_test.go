package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestMain starts this package's throwaway PostgreSQL. If another test file
// of package store_test needs a TestMain, it must share this one.
func TestMain(m *testing.M) { pgtest.Main(m) }

// manifest returns a small work-kind manifest.
func manifest(kind string, version int, specSchema string) *model.KindManifest {
	m := &model.KindManifest{
		Kind: kind, KindVersion: version,
		Reactions: []model.ReactionDecl{{Name: "work", Trigger: webhooksdk.TriggerSpecChange, Emits: []string{"status"}}},
	}
	if specSchema != "" {
		m.SpecSchema = json.RawMessage(specSchema)
	}
	return m
}

// waitFor polls cond every 5ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-tick.C
	}
}

func TestKindCache(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db *pgtest.Database
		st *store.Store
	}
	setup := func(t *testing.T) testBundle {
		t.Helper()
		db := pgtest.New(t)
		return testBundle{db: db, st: store.New(db.Pool, store.Config{})}
	}
	ctx := context.Background()

	t.Run("SecondPodSeesPublishWithinANotify", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Pod A publishes; pod B only listens. B's failsafe re-read is an
		// hour away, so only the NOTIFY can deliver the change in time.
		podA := store.NewKindCache(b.st, store.KindCacheConfig{ResyncInterval: time.Hour}, nil)
		stB := store.New(b.db.Pool, store.Config{})
		podB := store.NewKindCache(stB, store.KindCacheConfig{ResyncInterval: time.Hour}, nil)
		for _, c := range []*store.KindCache{podA, podB} {
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Stop)
		}
		gen := podB.Generation()
		if _, err := b.st.PutManifest(ctx, manifest("account", 1, `{"type":"object"}`)); err != nil {
			t.Fatal(err)
		}
		if err := podA.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := podA.Get("account", 1); !ok {
			t.Fatal("pod A does not see its own publish after Refresh")
		}
		waitFor(t, 5*time.Second, "pod B to see account/1", func() bool {
			_, ok := podB.Get("account", 1)
			return ok
		})
		if podB.Generation() == gen {
			t.Error("generation did not move on a change")
		}
		if _, ok := podB.Registry().Get(schema.Key{Kind: "account", Version: 1}); !ok {
			t.Error("registry lacks account/1")
		}

		// A deletion propagates the same way.
		if err := b.st.DeleteManifest(ctx, "account", 1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "pod B to drop account/1", func() bool {
			_, ok := podB.Get("account", 1)
			return !ok
		})
	})

	t.Run("RefreshWithoutChangeKeepsGeneration", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := store.NewKindCache(b.st, store.KindCacheConfig{}, nil)
		if _, err := b.st.PutManifest(ctx, manifest("vpc", 1, "")); err != nil {
			t.Fatal(err)
		}
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		gen := c.Generation()
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := c.Generation(); got != gen {
			t.Errorf("generation %d -> %d with no change", gen, got)
		}
		if got := len(c.List()); got != 1 {
			t.Errorf("List has %d manifests, want 1", got)
		}
	})

	t.Run("CheckSpec", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := store.NewKindCache(b.st, store.KindCacheConfig{}, nil)
		if _, err := b.st.PutManifest(ctx, manifest("vpc", 1,
			`{"type":"object","properties":{"cidr":{"type":"string"}},"required":["cidr"]}`)); err != nil {
			t.Fatal(err)
		}
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.CheckSpec("vpc", 1, json.RawMessage(`{"cidr":"10.0.0.0/16"}`)); err != nil {
			t.Errorf("valid spec: %v", err)
		}
		var ve *schema.ValidationError
		if err := c.CheckSpec("vpc", 1, json.RawMessage(`{}`)); !errors.As(err, &ve) {
			t.Errorf("invalid spec: got %v, want a *schema.ValidationError", err)
		}
		if err := c.CheckSpec("vpc", 2, json.RawMessage(`{}`)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown version: got %v, want ErrNotFound", err)
		}
	})

	t.Run("StaleCacheDoesNotRefuseAnAdditiveField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// This pod's cache never refreshes on its own: it models a pod that
		// has not yet received the NOTIFY of another pod's publish.
		c := store.NewKindCache(b.st, store.KindCacheConfig{ResyncInterval: time.Hour}, nil)
		v1 := `{"type":"object","properties":{"cidr":{"type":"string"}},"additionalProperties":false}`
		if _, err := b.st.PutManifest(ctx, manifest("vpc", 1, v1)); err != nil {
			t.Fatal(err)
		}
		if err := c.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		// Another writer adds an optional field (additive, same version).
		other := store.New(b.db.Pool, store.Config{})
		v1b := `{"type":"object","properties":{"cidr":{"type":"string"},"tags":{"type":"object"}},"additionalProperties":false}`
		if res, err := other.PutManifest(ctx, manifest("vpc", 1, v1b)); err != nil || res != store.ApplyConfigured {
			t.Fatalf("additive republish: %v %v", res, err)
		}
		_, res, err := b.st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 1, Name: "a",
			Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","tags":{"team":"x"}}`)})
		if err != nil || res != store.ApplyCreated {
			t.Fatalf("apply with the new field through a stale cache: %v %v", res, err)
		}
		// A spec invalid under both schemas is still refused.
		_, _, err = b.st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "vpc", KindVersion: 1, Name: "b",
			Spec: json.RawMessage(`{"cidr":5}`)})
		var de *store.DocumentError
		if !errors.As(err, &de) {
			t.Fatalf("invalid spec: got %v, want *DocumentError", err)
		}
	})
}
