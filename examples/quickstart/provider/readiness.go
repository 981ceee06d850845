package provider

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/convergeplane/converge/webhooksdk"
)

// Kinds are the kinds these providers serve.
var Kinds = []string{"bucket", "cdn", "site"} // constant list

// Readiness is which of the quickstart's kinds report themselves not ready in
// their health answer (docs/protocol.md §10), as a provider whose downstream
// is out would: the control plane then parks that kind's resources instead of
// delivering them, and delivers them once the kind is ready again. The
// unhealthy demo switches it. The zero Readiness, and a nil one, has every
// kind ready. It is safe for concurrent use.
type Readiness struct {
	mu      sync.Mutex
	unready map[string]bool
}

// ParseUnready reads a comma-separated list of kinds that start unready
// (UNREADY_KINDS), refusing a kind these providers do not serve.
func ParseUnready(list string) (*Readiness, error) {
	r := &Readiness{}
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if err := r.Set(k, false); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Set makes kind ready or not.
func (r *Readiness) Set(kind string, ready bool) error {
	if !slices.Contains(Kinds, kind) {
		return fmt.Errorf("unknown kind %q: want one of %s", kind, strings.Join(Kinds, ", "))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unready == nil {
		r.unready = map[string]bool{}
	}
	if ready {
		delete(r.unready, kind)
	} else {
		r.unready[kind] = true
	}
	return nil
}

// Ready reports whether kind is ready.
func (r *Readiness) Ready(kind string) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.unready[kind]
}

// Unready lists the kinds that are not ready, sorted.
func (r *Readiness) Unready() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.unready {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// switched is a provider whose Ready is its kind's in a Readiness.
type switched struct {
	webhooksdk.Provider
	ready *Readiness
}

// Ready is the kind's readiness.
func (s switched) Ready() bool { return s.ready.Ready(s.Kind().Kind) }
