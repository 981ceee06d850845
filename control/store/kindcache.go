package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/schema"
	"github.com/convergeplane/converge/internal/startstop"
)

// KindManifestChannel is the NOTIFY channel the kind_manifest triggers fire
// on every insert, update and delete.
const KindManifestChannel = "kind_manifest_changed"

// KindCacheConfig tunes a KindCache. The zero value takes every default.
type KindCacheConfig struct {
	// ResyncInterval is how often the cache re-reads every manifest without
	// being notified. It covers a notification lost while the listening
	// connection was down. Defaults to 30 seconds.
	ResyncInterval time.Duration
	// RefreshTimeout bounds one re-read. Defaults to 10 seconds.
	RefreshTimeout time.Duration
}

// The KindCacheConfig defaults.
const (
	KindCacheResyncIntervalDefault = 30 * time.Second
	KindCacheRefreshTimeoutDefault = 10 * time.Second
)

func (c KindCacheConfig) withDefaults() KindCacheConfig {
	c.ResyncInterval = cmp.Or(c.ResyncInterval, KindCacheResyncIntervalDefault)
	c.RefreshTimeout = cmp.Or(c.RefreshTimeout, KindCacheRefreshTimeoutDefault)
	return c
}

// KindCache holds every published manifest, decoded, with its schemas
// compiled, so the resource apply path validates specs without a query or a
// compile.
//
// Each process keeps one. It converges on the database three ways: a
// LISTEN on kind_manifest_changed re-reads on every publish or delete by any
// pod (within one notification), a failsafe re-read every ResyncInterval
// covers notifications lost during a reconnect, and Refresh lets the API
// re-read synchronously after its own successful manifest write so the pod
// that applied a manifest accepts resources of it at once.
//
// Reads are lock-free: a refresh builds a new snapshot and publishes it
// atomically. Refreshes are serialised, and each reads the database after the
// previous one finished, so a slow refresh never publishes an older view over
// a newer one.
type KindCache struct {
	store *Store
	cfg   KindCacheConfig
	log   *slog.Logger

	reg   schema.Registry
	state atomic.Pointer[kindSnapshot]

	refreshMu sync.Mutex // serialises refreshes and single-entry loads
	loop      startstop.Loop
}

// kindSnapshot is one immutable view of every manifest.
type kindSnapshot struct {
	entries map[schema.Key]*kindEntry
	list    []*model.KindManifest // sorted by kind, version
	gen     uint64
	sum     [sha256.Size]byte // fingerprint of the rows it was built from
}

// kindEntry is one published manifest.
type kindEntry struct {
	manifest  *model.KindManifest
	updatedAt time.Time
	rowSum    [sha256.Size]byte
	schemas   schema.Set
	// broken is set when a stored schema no longer compiles (a library
	// upgrade changed what it accepts). Writes of this kind version fail
	// with it rather than pass unvalidated.
	broken error
}

// NewKindCache returns an empty cache over st and installs it as st's spec
// validator. With CheckComposedSpec as the engine's, every write path — the
// API's resource applies and composed children — validates against the
// same schemas. Call it once per Store, before the store is shared, then
// Start it.
func NewKindCache(st *Store, cfg KindCacheConfig, log *slog.Logger) *KindCache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &KindCache{store: st, cfg: cfg.withDefaults(), log: log}
	c.state.Store(&kindSnapshot{entries: map[schema.Key]*kindEntry{}})
	st.setSpecCheck(c.CheckSpec)
	return c
}

// Start loads every manifest, returning the error if that fails so a pod
// never serves from an empty cache, then keeps the cache fresh in the
// background until Stop or until ctx ends.
func (c *KindCache) Start(ctx context.Context) error {
	if err := c.Refresh(ctx); err != nil {
		return err
	}
	lis := c.store.NewListener(c.log)
	wake := lis.Subscribe(KindManifestChannel)
	if err := lis.Start(ctx); err != nil {
		return fmt.Errorf("kind cache: listen: %w", err)
	}
	if !c.loop.Start(ctx, func(ctx context.Context) {
		defer lis.Stop()
		c.run(ctx, wake)
	}) {
		lis.Stop()
	}
	return nil
}

// Stop stops the background refresh and returns once it has stopped. The
// cache keeps serving its last view. Safe to call twice and before Start.
func (c *KindCache) Stop() { c.loop.Stop() }

// Running reports whether the refresh loop runs (for readiness).
func (c *KindCache) Running() bool { return c.loop.Running() }

func (c *KindCache) run(ctx context.Context, wake <-chan struct{}) {
	tick := time.NewTicker(c.cfg.ResyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
		if err := c.Refresh(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Warn("kind cache refresh failed; serving the previous view", "err", err)
		}
	}
}

const kindManifestCacheSQL = `SELECT ` + manifestCols + `, updated_at FROM kind_manifest ORDER BY kind, kind_version`

// Refresh re-reads every manifest now and returns once the new view is
// published. Entries whose row is unchanged keep their compiled schemas.
// Under a dry run (the API refreshes after a manifest write) it does
// nothing: a dry run commits no manifest, so there is nothing new to read.
func (c *KindCache) Refresh(ctx context.Context) error {
	if IsDryRun(ctx) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RefreshTimeout)
	defer cancel()
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()

	// The pool itself, never a transaction: the cache holds what is
	// committed.
	rows, err := c.store.pool.Pool.Query(ctx, kindManifestCacheSQL)
	if err != nil {
		return fmt.Errorf("kind cache: load manifests: %w", err)
	}
	defer rows.Close()
	old := c.state.Load()
	next := &kindSnapshot{entries: make(map[schema.Key]*kindEntry, len(old.entries))}
	sum := sha256.New()
	for rows.Next() {
		var updatedAt time.Time
		m, err := scanManifest(rowWithExtra{rows, []any{&updatedAt}})
		if err != nil {
			return fmt.Errorf("kind cache: %w", err)
		}
		key := schema.Key{Kind: m.Kind, Version: m.KindVersion}
		rs := rowSum(m, updatedAt)
		sum.Write(rs[:])
		if prev, ok := old.entries[key]; ok && prev.rowSum == rs {
			next.entries[key] = prev
			continue
		}
		next.entries[key] = c.compileEntry(m, updatedAt, rs)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("kind cache: load manifests: %w", err)
	}
	copy(next.sum[:], sum.Sum(nil))
	if next.sum == old.sum && len(next.entries) == len(old.entries) {
		return nil
	}
	c.publish(old, next)
	return nil
}

// publish installs next as the current view; the caller holds refreshMu.
func (c *KindCache) publish(old, next *kindSnapshot) {
	next.gen = old.gen + 1
	next.list = make([]*model.KindManifest, 0, len(next.entries))
	sets := make(map[schema.Key]schema.Set, len(next.entries))
	for k, e := range next.entries {
		next.list = append(next.list, e.manifest)
		if e.broken == nil {
			sets[k] = e.schemas
		}
	}
	slices.SortFunc(next.list, func(a, b *model.KindManifest) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.KindVersion, b.KindVersion))
	})
	c.reg.Replace(sets)
	c.state.Store(next)
}

// compileEntry compiles a stored manifest's schemas. A schema that no longer
// compiles marks the entry broken instead of leaving the axis untyped.
func (c *KindCache) compileEntry(m *model.KindManifest, updatedAt time.Time, rs [sha256.Size]byte) *kindEntry {
	e := &kindEntry{manifest: m, updatedAt: updatedAt, rowSum: rs}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  **schema.Schema
	}{{"spec_schema", m.SpecSchema, &e.schemas.Spec}, {"status_schema", m.StatusSchema, &e.schemas.Status},
		{"config_schema", m.ConfigSchema, &e.schemas.Config}} {
		s, err := schema.Compile(f.raw)
		if err != nil {
			e.broken = fmt.Errorf("the stored %s of %s/%d no longer compiles: %w", f.name, m.Kind, m.KindVersion, err)
			c.log.Error("kind cache: stored schema does not compile; writes of this kind version are refused",
				"kind", m.Kind, "kind_version", m.KindVersion, "field", f.name, "err", err)
			return e
		}
		*f.dst = s
	}
	return e
}

// rowSum fingerprints one stored manifest, so an unchanged row keeps its
// compiled schemas and an unchanged table does not bump the generation.
func rowSum(m *model.KindManifest, updatedAt time.Time) [sha256.Size]byte {
	h := sha256.New()
	write := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	reactions, _ := json.Marshal(m.Reactions) // a decoded []ReactionDecl always encodes
	policy, _ := json.Marshal(m.Policy)
	ts, _ := updatedAt.MarshalBinary()
	for _, b := range [][]byte{[]byte(m.Kind), binary.BigEndian.AppendUint32(nil, uint32(m.KindVersion)),
		[]byte(m.Description), m.SpecSchema, m.StatusSchema, m.ConfigSchema, reactions,
		[]byte(m.FinalizerName), policy, ts} {
		write(b)
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// rowWithExtra scans manifestCols followed by extra destinations.
type rowWithExtra struct {
	row   interface{ Scan(...any) error }
	extra []any
}

func (r rowWithExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

// Get returns the cached manifest of (kind, version). The manifest is shared:
// callers must not modify it.
func (c *KindCache) Get(kind string, version int) (*model.KindManifest, bool) {
	e, ok := c.state.Load().entries[schema.Key{Kind: kind, Version: version}]
	if !ok {
		return nil, false
	}
	return e.manifest, true
}

// List returns every cached manifest ordered by kind and version. The slice
// and manifests are shared: callers must not modify them.
func (c *KindCache) List() []*model.KindManifest { return c.state.Load().list }

// Generation increases whenever the cached view changes, so derived data
// (the OpenAPI document) can be rebuilt only when needed.
func (c *KindCache) Generation() uint64 { return c.state.Load().gen }

// Registry returns the compiled schemas, keyed by (kind, version).
func (c *KindCache) Registry() *schema.Registry { return &c.reg }

// staleSpecError is a spec violation found against a cached schema. It
// carries the cached row's updated_at, so the store can cheaply tell whether
// the database has a newer (additively changed) schema before refusing.
type staleSpecError struct {
	*schema.ValidationError
	cachedAt time.Time
}

func (e *staleSpecError) Unwrap() error { return e.ValidationError }

// CheckSpec validates a resource spec against the cached spec_schema of
// (kind, version). It never queries the database: a kind version it does not
// hold yields an error wrapping ErrNotFound, and a violation a
// *schema.ValidationError. It is the store's spec validator.
func (c *KindCache) CheckSpec(kind string, version int, spec json.RawMessage) error {
	e, ok := c.state.Load().entries[schema.Key{Kind: kind, Version: version}]
	if !ok {
		return fmt.Errorf("kind cache: %s/%d: %w", kind, version, ErrNotFound)
	}
	if e.broken != nil {
		return e.broken
	}
	err := e.schemas.Spec.Validate(spec)
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		return &staleSpecError{ValidationError: ve, cachedAt: e.updatedAt}
	}
	return err
}

// CheckComposedSpec is CheckSpec for a composer's child, the engine's
// validator (engine.Config.SpecCheck): a kind version the cache does not
// hold yet is not refused, since the drain's foreign key refuses a kind
// that does not exist.
func (c *KindCache) CheckComposedSpec(kind string, version int, spec json.RawMessage) error {
	if err := c.CheckSpec(kind, version, spec); !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}
