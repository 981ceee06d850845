// Package stdcel is the stdcel provider: a kro-style resource graph, held in the
// provider config, that composes a root resource into children. Templates hold CEL
// expressions "${...}" over the root's spec (schema.spec) and the other resources;
// edges and value flows are inferred from those references, so a spec field
// "${vpc.status.vpc_id}" makes the child wait for vpc and receive vpc's status.vpc_id.
// includeWhen selects children, readyWhen rolls their readiness into the root's status
// and Ready condition. Every expression runs under a cel-go cost budget.
//
// The package imports only webhooksdk and cel-go, so it serves anywhere a
// webhooksdk.Provider does.
package stdcel

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/convergeplane/converge/webhooksdk"
)

//go:embed stdcel.kind.json
var manifest []byte

// Manifest returns the stdcel kind manifest, as PUT /api/v1/kinds/stdcel/manifest takes it.
func Manifest() []byte { return manifest }

// cacheSize bounds the compiled graphs kept: one per distinct effective config, and a
// kind rarely has more than a few live (the default and some overrides).
const cacheSize = 16

// Provider serves one stdcel kind. It caches compiled graphs by a hash of the
// effective config, so a reconcile recompiles only after the config changed.
type Provider struct {
	kind string

	mu     sync.Mutex
	cache  map[[sha256.Size]byte]compiled
	hits   atomic.Int64
	misses atomic.Int64
}

// compiled is one config's compilation: a graph, or why it has none.
type compiled struct {
	g   *graph
	err error
}

// New returns the provider of kind (version 1), the name the manifest is applied under.
func New(kind string) webhooksdk.Provider {
	return &Provider{kind: kind, cache: map[[sha256.Size]byte]compiled{}}
}

// Kind returns the kind served, version 1.
func (p *Provider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}

// The Handler finds this hook by type assertion: a mistyped signature would lose it
// silently.
var _ webhooksdk.Configurer = (*Provider)(nil)

// OnConfig compiles a new config ahead of the tasks that carry it. A config
// that does not compile is reported by the task that carries it, so the
// error is dropped here.
func (p *Provider) OnConfig(cfg webhooksdk.ProviderConfig) { _, _ = p.graph(cfg.Spec) }

// CacheStats returns how many config lookups found a compiled graph and how many
// compiled one.
func (p *Provider) CacheStats() (hits, misses int64) { return p.hits.Load(), p.misses.Load() }

// graph returns the compiled graph of config, compiling it on a miss.
func (p *Provider) graph(config json.RawMessage) (*graph, error) {
	key := sha256.Sum256(config)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.cache[key]; ok {
		p.hits.Add(1)
		return c.g, c.err
	}
	p.misses.Add(1)
	g, err := compile(config)
	if len(p.cache) >= cacheSize {
		clear(p.cache)
	}
	p.cache[key] = compiled{g: g, err: err}
	return g, err
}

// Work composes the root (reaction "compose") or rolls its children's readiness up
// (reaction "rollup").
func (p *Provider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	g, err := p.graph(req.Config)
	if errors.Is(err, errNoGraph) {
		return webhooksdk.Outcome{}, err // the config may not have reached the dispatcher yet
	}
	if err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(err)
	}
	out, err := p.react(ctx, g, req)
	if err != nil && ctx.Err() == nil {
		err = webhooksdk.Terminal(err) // the config or the spec is wrong: a retry cannot fix it
	}
	return out, err
}

func (p *Provider) react(ctx context.Context, g *graph, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	in, err := g.compose(ctx, req.Resource)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	switch req.Reaction {
	case "compose":
		st := rootStatus{Children: len(in.children), Excluded: in.excluded, Resources: map[string]childStatus{}}
		for i, n := range in.nodes {
			st.Resources[n.id] = childStatus{Kind: in.children[i].Kind, Name: in.children[i].Name}
		}
		out := webhooksdk.Outcome{Children: in.children, Edges: in.edges}
		if out.Status, err = json.Marshal(st); err != nil {
			return webhooksdk.Outcome{}, fmt.Errorf("encode status: %w", err)
		}
		return out, nil
	case "rollup":
		return in.rollup(ctx, req.Descendants)
	}
	return webhooksdk.Outcome{}, fmt.Errorf("%s has no reaction %q", p.kind, req.Reaction)
}

// rootStatus is the root's status: its children by resource id.
type rootStatus struct {
	Children  int                    `json:"children"`
	Ready     *int                   `json:"ready,omitempty"`
	Excluded  []string               `json:"excluded,omitempty"`
	Resources map[string]childStatus `json:"resources"`
}

type childStatus struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Ready *bool  `json:"ready,omitempty"`
	// Reason says why a child is not ready.
	Reason string `json:"reason,omitempty"`
}
