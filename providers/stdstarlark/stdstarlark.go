// Package stdstarlark is the std composer whose program is data: the provider config's
// bundle is one Starlark file, or a zip of .star files with compose.star at its root
// (told apart by the zip's magic bytes), whose compose.star defines
//
//	compose(spec, config)            or compose(spec, config, observed)
//	status(descendants)              optional, the rollup
//
// compose fans the resource's spec out into children and edges (with value flows) and
// may set the resource's status; status rolls the settled subtree up into status and
// conditions. The files of a bundle load one another with load("lib/net.star", "sym"),
// paths relative to the bundle's root, unpacked and resolved in memory. The program runs
// sandboxed: no I/O, a step limit, a wall-clock limit and size caps on what goes in
// (the bundle, packed and unpacked) and comes out (see docs/std-providers.md
// (stdstarlark)).
//
// The package imports only webhooksdk and go.starlark.net, so it is also a template for
// an out-of-tree provider.
package stdstarlark

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/convergeplane/converge/webhooksdk"
)

//go:embed stdstarlark.kind.json
var manifest []byte

// Manifest returns the stdstarlark/1 kind manifest, as PUT /api/v1/kinds/{kind}/manifest
// takes it.
func Manifest() []byte { return append([]byte(nil), manifest...) }

// The reaction names the manifest declares.
const (
	reactionCompose = "compose"
	reactionRollup  = "rollup"
)

// maxCached bounds the compiled programs kept: one per distinct bundle in use (the kind
// default plus per-resource overrides).
const maxCached = 16

// New returns the stdstarlark provider serving kind at version 1.
func New(kind string) webhooksdk.Provider {
	return &provider{kind: kind, cache: make(map[[sha256.Size]byte]*compiled)}
}

type provider struct {
	kind string

	mu    sync.Mutex
	cache map[[sha256.Size]byte]*compiled
}

// compiled is a bundle's outcome of compilation: a program or the terminal error saying
// why there is none. Transient failures are not cached.
type compiled struct {
	prog *program
	err  error
}

func (p *provider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}

// The Handler finds this hook by type assertion: a mistyped signature would lose it
// silently.
var _ webhooksdk.Configurer = (*provider)(nil)

// OnConfig compiles the new bundle ahead of the task that carries it.
func (p *provider) OnConfig(cfg webhooksdk.ProviderConfig) {
	_, _ = p.program(context.Background(), cfg.Data)
}

func (p *provider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	prog, err := p.program(ctx, req.Bundle)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	switch req.Reaction {
	case reactionCompose:
		return prog.compose(ctx, req)
	case reactionRollup:
		return prog.rollup(ctx, req)
	}
	return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("%s has no reaction %q", p.kind, req.Reaction))
}

// program returns the compiled program of bundle, compiling it on a cache miss.
func (p *provider) program(ctx context.Context, bundle []byte) (*program, error) {
	sum := sha256.Sum256(bundle)
	p.mu.Lock()
	c, ok := p.cache[sum]
	p.mu.Unlock()
	if ok {
		return c.prog, c.err
	}
	prog, err := compile(ctx, bundle)
	if err != nil && !webhooksdk.IsTerminal(err) {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cache) >= maxCached {
		for k := range p.cache { // evict any one: a miss only costs a recompile
			delete(p.cache, k)
			break
		}
	}
	p.cache[sum] = &compiled{prog: prog, err: err}
	return prog, err
}

// resources returns rs as the list of dicts a program reads (the wire shape of a
// resource: kind, kind_version, name, labels, spec, status, phase, …).
func resources(rs []webhooksdk.Resource) (json.RawMessage, error) {
	if rs == nil {
		rs = []webhooksdk.Resource{}
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return nil, fmt.Errorf("encode resources: %w", err)
	}
	return b, nil
}
