package schema

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRegistry(t *testing.T) {
	t.Parallel()

	vpc1 := Key{Kind: "vpc", Version: 1}
	vpc2 := Key{Kind: "vpc", Version: 2}
	spec := mustCompile(t, `{"type": "object"}`)
	set1 := Set{Spec: spec}
	set2 := Set{Spec: spec, Config: mustCompile(t, `{"type": "string"}`)}

	t.Run("zero value is empty", func(t *testing.T) {
		t.Parallel()
		var r Registry
		if _, ok := r.Get(vpc1); ok {
			t.Error("Get on an empty registry found an entry")
		}
		r.Delete(vpc1) // no-op, no panic
		if got := r.Len(); got != 0 {
			t.Errorf("Len() = %d, want 0", got)
		}
	})

	t.Run("put get delete", func(t *testing.T) {
		t.Parallel()
		var r Registry
		r.Put(vpc1, set1)
		r.Put(vpc2, set2)
		got, ok := r.Get(vpc1)
		if !ok || got != set1 {
			t.Errorf("Get(vpc1) = %v, %v; want %v, true", got, ok, set1)
		}
		r.Put(vpc1, set2)
		if got, _ := r.Get(vpc1); got != set2 {
			t.Errorf("Get(vpc1) after overwrite = %v, want %v", got, set2)
		}
		r.Delete(vpc1)
		if _, ok := r.Get(vpc1); ok {
			t.Error("Get(vpc1) found a deleted entry")
		}
		if _, ok := r.Get(vpc2); !ok {
			t.Error("Delete(vpc1) also dropped vpc2")
		}
	})

	t.Run("replace swaps everything and copies", func(t *testing.T) {
		t.Parallel()
		var r Registry
		r.Put(vpc1, set1)
		m := map[Key]Set{vpc2: set2}
		r.Replace(m)
		m[vpc1] = set1 // must not leak into the registry
		if _, ok := r.Get(vpc1); ok {
			t.Error("Replace kept an entry missing from the new map, or aliased the map")
		}
		if got, ok := r.Get(vpc2); !ok || got != set2 {
			t.Errorf("Get(vpc2) = %v, %v; want %v, true", got, ok, set2)
		}
		r.Replace(nil)
		if got := r.Len(); got != 0 {
			t.Errorf("Len() after Replace(nil) = %d, want 0", got)
		}
	})

	t.Run("untyped set", func(t *testing.T) {
		t.Parallel()
		var r Registry
		r.Put(vpc1, Set{})
		got, ok := r.Get(vpc1)
		if !ok {
			t.Fatal("Get(vpc1) not found")
		}
		if diff := cmp.Diff(Set{}, got, cmp.AllowUnexported(Schema{})); diff != "" {
			t.Errorf("Get mismatch (-want +got):\n%s", diff)
		}
		if err := got.Status.Validate([]byte(`{"any": "thing"}`)); err != nil {
			t.Errorf("untyped status rejected a document: %v", err)
		}
	})
}

// TestRegistryConcurrent is meant for -race: readers on the apply path run
// while the refresh loop writes.
func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()

	var r Registry
	set := Set{Spec: mustCompile(t, `{"type": "object"}`)}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for v := range 200 {
				k := Key{Kind: "k", Version: v}
				switch i {
				case 0:
					r.Put(k, set)
				case 1:
					r.Delete(k)
				case 2:
					r.Replace(map[Key]Set{k: set})
				default:
					if got, ok := r.Get(k); ok && got != set {
						t.Errorf("Get(%v) = %v, want %v", k, got, set)
					}
				}
			}
		})
	}
	wg.Wait()
	// Writers are serialised: after they finish, Put is never lost.
	r.Put(Key{Kind: "final"}, set)
	if _, ok := r.Get(Key{Kind: "final"}); !ok {
		t.Error("Put after concurrent writes was lost")
	}
}
