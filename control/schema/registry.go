package schema

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Key identifies the schemas of one published kind version.
type Key struct {
	Kind    string
	Version int
}

// Set holds the compiled schemas of one kind version. A nil field is an
// untyped axis and accepts any document.
type Set struct {
	Spec, Status, Config *Schema
}

// Registry caches compiled schemas by kind version. The zero value is empty
// and ready to use; it must not be copied after first use.
//
// Reads are on the hot apply path, so Get is lock-free: writers copy the map
// and publish the copy atomically, and a reader sees either the old or the new
// map, never a partial one. Writes are rare (a manifest apply or a refresh
// from the database) and serialised by a mutex so none is lost.
type Registry struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[Key]Set]
}

// Get returns the schemas of k and whether they are cached.
func (r *Registry) Get(k Key) (Set, bool) {
	m := r.m.Load()
	if m == nil {
		return Set{}, false
	}
	s, ok := (*m)[k]
	return s, ok
}

// Put caches the schemas of k, replacing any previous entry.
func (r *Registry) Put(k Key, s Set) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.clone()
	m[k] = s
	r.m.Store(&m)
}

// Delete drops k from the cache.
func (r *Registry) Delete(k Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.Get(k); !ok {
		return
	}
	m := r.clone()
	delete(m, k)
	r.m.Store(&m)
}

// Replace swaps the whole cache for a copy of m in one step, so a refresh from
// the database never exposes a mix of old and new entries. Later changes to m
// do not affect the registry.
func (r *Registry) Replace(m map[Key]Set) {
	c := maps.Clone(m)
	if c == nil {
		c = map[Key]Set{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.Store(&c)
}

// Len returns the number of cached kind versions.
func (r *Registry) Len() int {
	m := r.m.Load()
	if m == nil {
		return 0
	}
	return len(*m)
}

// clone copies the current map; the caller holds mu.
func (r *Registry) clone() map[Key]Set {
	m := r.m.Load()
	if m == nil {
		return map[Key]Set{}
	}
	return maps.Clone(*m)
}
