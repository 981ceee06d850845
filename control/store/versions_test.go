package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/convergeplane/converge/control/engine/enginetest"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// TestResourceVersion: a resource's version moves on every write of what a
// user owns, never on the engine's status writes, and a write conditional
// on a stale version is refused and changes nothing.
func TestResourceVersion(t *testing.T) {
	t.Parallel()
	db := enginetest.LeafDB(t)
	st := store.New(db.Pool, store.Config{})
	ctx := context.Background()
	apply := func(spec string, pre store.Precondition) (model.Resource, store.ApplyResult, error) {
		t.Helper()
		return st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: "a",
			Spec: json.RawMessage(spec), Precondition: pre})
	}

	r1, _, err := apply(`{"n":1}`, store.Precondition{})
	if err != nil {
		t.Fatal(err)
	}
	if r1.ResourceVersion < 1 {
		t.Fatalf("created at resource_version %d, want >= 1", r1.ResourceVersion)
	}
	if r, res, err := apply(`{"n":1}`, store.IfVersion(r1.ResourceVersion)); err != nil || res != store.ApplyUnchanged || r.ResourceVersion != r1.ResourceVersion {
		t.Fatalf("an equal re-apply at the current version: %v %s v%d, want unchanged at v%d", err, res, r.ResourceVersion, r1.ResourceVersion)
	}

	// The engine's completion writes status, not what the user owns.
	task := enginetest.ClaimOnly(t, db, r1.ID)
	if err := enginetest.CompleteOne(db.Pool, task, `{"status":{"ok":true}}`); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetResource(ctx, "", "leaf", "a")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Status) != `{"ok": true}` || got.ResourceVersion != r1.ResourceVersion {
		t.Fatalf("after a completion: status %s at v%d, want its status at v%d", got.Status, got.ResourceVersion, r1.ResourceVersion)
	}

	r2, res, err := apply(`{"n":2}`, store.IfVersion(r1.ResourceVersion))
	if err != nil || res != store.ApplyConfigured || r2.ResourceVersion <= r1.ResourceVersion {
		t.Fatalf("a change at the current version: %v %s v%d, want configured past v%d", err, res, r2.ResourceVersion, r1.ResourceVersion)
	}

	var pe *store.PreconditionError
	_, _, err = apply(`{"n":3}`, store.IfVersion(r1.ResourceVersion))
	if !errors.As(err, &pe) || pe.Current != r2.ResourceVersion {
		t.Fatalf("a change at a stale version: %v, want a *PreconditionError at v%d", err, r2.ResourceVersion)
	}
	if got, _ := st.GetResource(ctx, "", "leaf", "a"); string(got.Spec) != `{"n": 2}` || got.Generation != r2.Generation {
		t.Fatalf("the refused apply wrote: spec %s generation %d, want {\"n\": 2} at %d", got.Spec, got.Generation, r2.Generation)
	}
	if _, _, err := apply(`{"n":3}`, store.Precondition{Versions: []int64{r1.ResourceVersion, r2.ResourceVersion}}); err != nil {
		t.Fatalf("a list naming the current version: %v", err)
	}

	_, _, err = st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: "b", Precondition: store.Precondition{Exists: true}})
	if !errors.As(err, &pe) || pe.Current != 0 {
		t.Fatalf("If-Match: * of a missing resource: %v, want a *PreconditionError for a missing object", err)
	}
	if _, err := st.GetResource(ctx, "", "leaf", "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused create wrote b: %v", err)
	}

	// Deleting, conditionally; a new resource of the same name never
	// takes a version the old one had.
	if _, err := st.DeleteResource(ctx, "", "leaf", "a", store.IfVersion(r1.ResourceVersion)); !errors.As(err, &pe) {
		t.Fatalf("a delete at a stale version: %v, want a *PreconditionError", err)
	}
	cur, _ := st.GetResource(ctx, "", "leaf", "a")
	if _, err := st.DeleteResource(ctx, "", "leaf", "a", store.IfVersion(cur.ResourceVersion)); err != nil {
		t.Fatalf("a delete at the current version: %v", err)
	}
	// A leaf without a finalizer goes at once; the next "a" is a new object.
	again, _, err := apply(`{"n":2}`, store.Precondition{})
	if err != nil || again.ResourceVersion <= cur.ResourceVersion {
		t.Fatalf("recreated: %v at v%d, want a version past the old one's v%d", err, again.ResourceVersion, cur.ResourceVersion)
	}
	if _, _, err := apply(`{"n":3}`, store.IfVersion(cur.ResourceVersion)); !errors.As(err, &pe) {
		t.Fatalf("a write at the deleted resource's version: %v, want a *PreconditionError", err)
	}
}

// TestConcurrentWritersOneWins is the lost update the versions close: two
// writers read the same version and write at once, each conditional on
// it; exactly one write lands and the other is refused.
func TestConcurrentWritersOneWins(t *testing.T) {
	t.Parallel()
	db := enginetest.LeafDB(t)
	st := store.New(db.Pool, store.Config{})
	ctx := context.Background()
	r, _, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: "a", Spec: json.RawMessage(`{"n":0}`)})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		var (
			wg   sync.WaitGroup
			errs = make([]error, 2)
			gate = make(chan struct{})
		)
		for w := range errs {
			wg.Go(func() {
				<-gate
				_, _, errs[w] = st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: "a",
					Spec:         json.RawMessage(fmt.Sprintf(`{"n":%d,"round":%d}`, w, round)),
					Precondition: store.IfVersion(r.ResourceVersion)})
			})
		}
		close(gate)
		wg.Wait()
		var pe *store.PreconditionError
		won, lost := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.As(err, &pe):
				lost++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 || lost != 1 {
			t.Fatalf("round %d: %d writes landed and %d were refused, want 1 and 1 (%v)", round, won, lost, errs)
		}
		d, err := st.GetResource(ctx, "", "leaf", "a")
		if err != nil {
			t.Fatal(err)
		}
		r = d.Resource
	}
}

// TestObjectVersions: kind configs, provider configs, reactor bindings and
// endpoints carry a version that every write moves, and refuse a write or
// delete at a stale one.
func TestObjectVersions(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	ctx := b.ctx
	st := b.st
	if _, err := b.db.Pool.Exec(ctx, `INSERT INTO kind_manifest (kind, kind_version, reactions, config_schema) VALUES
		('leaf', 1, '[{"name":"work","trigger":"specChange","emits":["status"]}]', '{"type":"object"}'),
		('sink', 1, '[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]', NULL)`); err != nil {
		t.Fatal(err)
	}
	var pe *store.PreconditionError
	stale := func(t *testing.T, what string, err error, current int64) {
		t.Helper()
		if !errors.As(err, &pe) || pe.Current != current {
			t.Fatalf("%s at a stale version: %v, want a *PreconditionError at v%d", what, err, current)
		}
	}

	t.Run("kind config", func(t *testing.T) {
		c0, err := st.GetKindConfig(ctx, "leaf", 1)
		if err != nil {
			t.Fatal(err)
		}
		c0.MaxInflight = 5
		c1, res, err := st.PutKindConfig(ctx, c0, store.IfVersion(c0.ResourceVersion))
		if err != nil || res != store.ApplyConfigured || c1.ResourceVersion <= c0.ResourceVersion {
			t.Fatalf("put at the current version: %v %s v%d", err, res, c1.ResourceVersion)
		}
		c0.MaxInflight = 7
		_, _, err = st.PutKindConfig(ctx, c0, store.IfVersion(c0.ResourceVersion))
		stale(t, "put", err, c1.ResourceVersion)
		if got, _ := st.GetKindConfig(ctx, "leaf", 1); got.MaxInflight != 5 {
			t.Fatalf("the refused put wrote max_inflight %d", got.MaxInflight)
		}
	})

	t.Run("provider config", func(t *testing.T) {
		p := store.PutProviderConfigParams{Name: "pc", Kind: "leaf", KindVersion: 1, Spec: json.RawMessage(`{"a":1}`)}
		c0, _, err := st.PutProviderConfig(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		p.Spec, p.Precondition = json.RawMessage(`{"a":2}`), store.IfVersion(c0.ResourceVersion)
		c1, _, err := st.PutProviderConfig(ctx, p)
		if err != nil || c1.ResourceVersion <= c0.ResourceVersion {
			t.Fatalf("put at the current version: %v v%d", err, c1.ResourceVersion)
		}
		_, _, err = st.PutProviderConfig(ctx, p)
		stale(t, "put", err, c1.ResourceVersion)
		stale(t, "delete", st.DeleteProviderConfig(ctx, "", "pc", store.IfVersion(c0.ResourceVersion)), c1.ResourceVersion)
		if err := st.DeleteProviderConfig(ctx, "", "pc", store.IfVersion(c1.ResourceVersion)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("reactor binding", func(t *testing.T) {
		p := store.PutReactorBindingParams{Name: "rb", WatchKind: "leaf", Transition: "synced", Reactor: "sink", Enabled: true}
		b0, _, err := st.PutReactorBinding(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		p.Enabled, p.Precondition = false, store.IfVersion(b0.ResourceVersion)
		b1, _, err := st.PutReactorBinding(ctx, p)
		if err != nil || b1.ResourceVersion <= b0.ResourceVersion {
			t.Fatalf("put at the current version: %v v%d", err, b1.ResourceVersion)
		}
		_, _, err = st.PutReactorBinding(ctx, p)
		stale(t, "put", err, b1.ResourceVersion)
		stale(t, "delete", st.DeleteReactorBinding(ctx, "", "rb", store.IfVersion(b0.ResourceVersion)), b1.ResourceVersion)
		if err := st.DeleteReactorBinding(ctx, "", "rb", store.IfVersion(b1.ResourceVersion)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("endpoint", func(t *testing.T) {
		p := endpointParams("ep")
		e0, _, _, err := st.PutEndpoint(ctx, b.box, p)
		if err != nil {
			t.Fatal(err)
		}
		// The dispatcher disabling it (a 410) is a write too: an apply made
		// from the version before it must not silently enable it again.
		if err := st.DisableEndpoint(ctx, "ep", "410 Gone"); err != nil {
			t.Fatal(err)
		}
		e1, _ := st.GetEndpoint(ctx, "ep")
		if e1.ResourceVersion <= e0.ResourceVersion {
			t.Fatalf("disabled at v%d, want past v%d", e1.ResourceVersion, e0.ResourceVersion)
		}
		p.Precondition = store.IfVersion(e0.ResourceVersion)
		_, _, _, err = st.PutEndpoint(ctx, b.box, p)
		stale(t, "put", err, e1.ResourceVersion)
		if got, _ := st.GetEndpoint(ctx, "ep"); got.Enabled {
			t.Fatal("the refused apply enabled the endpoint again")
		}
		stale(t, "delete", st.DeleteEndpoint(ctx, "", "ep", store.IfVersion(e0.ResourceVersion)), e1.ResourceVersion)
		if err := st.DeleteEndpoint(ctx, "", "ep", store.IfVersion(e1.ResourceVersion)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBatchVersions: a batch item carrying a stale resource_version is
// refused alone; the others are written.
func TestBatchVersions(t *testing.T) {
	t.Parallel()
	db := enginetest.LeafDB(t)
	st := store.New(db.Pool, store.Config{})
	ctx := context.Background()
	a, _, err := st.ApplyResource(ctx, store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	item := func(name, spec string, v int64) store.ApplyResourceParams {
		return store.ApplyResourceParams{Kind: "leaf", KindVersion: 1, Name: name, Spec: json.RawMessage(spec), Precondition: store.IfVersion(v)}
	}
	res, err := st.ApplyResources(ctx, "", []store.ApplyResourceParams{
		item("a", `{"n":1}`, a.ResourceVersion), // current: written
		item("b", `{}`, 0),                      // no condition: created
		item("c", `{}`, a.ResourceVersion),      // names a version, but c does not exist
	})
	if err != nil {
		t.Fatal(err)
	}
	var pe *store.PreconditionError
	if res[0].Result != store.ApplyConfigured || res[0].ResourceVersion <= a.ResourceVersion ||
		res[1].Result != store.ApplyCreated || res[1].ResourceVersion < 1 ||
		res[2].Result != store.ApplyInvalid || !errors.As(res[2].Err, &pe) || pe.Current != 0 {
		t.Fatalf("results %+v", res)
	}
	res, err = st.ApplyResources(ctx, "", []store.ApplyResourceParams{item("a", `{"n":2}`, a.ResourceVersion), item("b", `{"n":2}`, res[1].ResourceVersion)})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Result != store.ApplyInvalid || !errors.As(res[0].Err, &pe) || res[1].Result != store.ApplyConfigured {
		t.Fatalf("results %+v, want a refused (stale) and b written", res)
	}
	if got, _ := st.GetResource(ctx, "", "leaf", "a"); string(got.Spec) != `{"n": 1}` {
		t.Fatalf("the refused item wrote a: %s", got.Spec)
	}
}
