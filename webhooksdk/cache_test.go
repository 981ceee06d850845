package webhooksdk

import (
	"testing"
	"time"
)

func TestResultCache(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)

	t.Run("evicts least recently stored over entries", func(t *testing.T) {
		t.Parallel()
		c := newResultCache(2, 1<<20, time.Minute)
		c.put("a", []byte("A"), t0)
		c.put("b", []byte("B"), t0)
		c.put("c", []byte("C"), t0)
		if _, ok := c.get("a", t0); ok {
			t.Error("a survived past the entry bound")
		}
		for _, id := range []string{"b", "c"} {
			if _, ok := c.get(id, t0); !ok {
				t.Errorf("%s evicted", id)
			}
		}
	})

	t.Run("expires after ttl", func(t *testing.T) {
		t.Parallel()
		c := newResultCache(10, 1<<20, time.Minute)
		c.put("a", []byte("A"), t0)
		if got, ok := c.get("a", t0.Add(time.Minute-time.Nanosecond)); !ok || string(got) != "A" {
			t.Fatalf("before ttl: %q %v", got, ok)
		}
		if _, ok := c.get("a", t0.Add(time.Minute)); ok {
			t.Fatal("served after ttl")
		}
		if c.len() != 0 {
			t.Fatalf("expired entry kept: len %d", c.len())
		}
		// Expired entries are swept from the old end on put.
		c.put("b", []byte("B"), t0)
		c.put("c", []byte("C"), t0.Add(2*time.Minute))
		if c.len() != 1 {
			t.Fatalf("len = %d, want 1 after sweeping b", c.len())
		}
	})

	t.Run("bounded by bytes", func(t *testing.T) {
		t.Parallel()
		c := newResultCache(10, 5, time.Minute)
		c.put("a", []byte("aaa"), t0)
		c.put("b", []byte("bbb"), t0)
		if _, ok := c.get("a", t0); ok {
			t.Error("a survived past the byte bound")
		}
		c.put("huge", []byte("123456"), t0)
		if _, ok := c.get("huge", t0); ok {
			t.Error("an entry larger than the whole cache was stored")
		}
		if c.bytes != 3 {
			t.Errorf("bytes = %d, want 3", c.bytes)
		}
	})

	t.Run("replace keeps accounting", func(t *testing.T) {
		t.Parallel()
		c := newResultCache(10, 100, time.Minute)
		c.put("a", []byte("one"), t0)
		c.put("a", []byte("three"), t0)
		if got, _ := c.get("a", t0); string(got) != "three" || c.len() != 1 || c.bytes != 5 {
			t.Fatalf("got %q len %d bytes %d", got, c.len(), c.bytes)
		}
	})
}
