package webhooksdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// KindVersion is the one (kind, version) pair a Provider serves. Version is explicit and
// in 1..32767; there is no implicit version 1.
type KindVersion struct {
	// Kind is the kind's name.
	Kind string
	// Version is 1..32767.
	Version int
}

// String returns "kind/vN".
func (kv KindVersion) String() string { return fmt.Sprintf("%s/v%d", kv.Kind, kv.Version) }

// MaxKindVersion is the largest kind version (the smallint ceiling of the core's columns).
const MaxKindVersion = 32767

func (kv KindVersion) validate() error {
	if kv.Kind == "" {
		return errors.New("empty kind")
	}
	if kv.Version < 1 || kv.Version > MaxKindVersion {
		return fmt.Errorf("kind %q: version %d outside 1..%d", kv.Kind, kv.Version, MaxKindVersion)
	}
	return nil
}

// ProviderConfig is a provider config document: a JSON Spec and opaque Data bytes (a
// bundle).
type ProviderConfig struct {
	// Spec is the JSON config document.
	Spec json.RawMessage
	// Data is the opaque bundle.
	Data []byte
}

// Provider is the handler code for one (kind, version): what every provider has. A
// provider that reacts to config changes also implements [Configurer], and one that can
// be unready implements [Readier]; the Handler finds both by type assertion, once, at
// construction. The SDK calls only these methods and never a set-up step.
type Provider interface {
	// Kind returns the one pair this provider serves. It must be pure: the Handler calls
	// it once, at construction.
	Kind() KindVersion

	// Work runs one task. Return the Outcome the reaction produced; the core applies
	// only the parts the manifest's emits mask permits. A non-nil error fails the task:
	// it is retried with backoff unless wrapped with Terminal, which pins the resource
	// Failed until its spec changes. Work must honour ctx — it carries the task deadline,
	// supersession (another claim took the task over) and shutdown — and must be
	// idempotent: delivery is at least once. A kind with several reactions switches on
	// req.Reaction.
	Work(ctx context.Context, req Request) (Outcome, error)
}

// Configurer is the optional hook of a [Provider] that redials a client or recompiles a
// bundle when its provider config changes. The effective config also rides on every
// task (Request.Config and Request.Bundle), so a provider that reads it there needs no
// hook: without one, config changes are ignored.
type Configurer interface {
	// OnConfig is called before Work whenever a task's effective config (Request.Config
	// and Request.Bundle) differs from the last one this provider saw, the first task
	// included. Calls are serialised per provider, and a task's Work starts only after
	// the OnConfig for its config has returned.
	OnConfig(cfg ProviderConfig)
}

// Readier is the optional readiness report of a [Provider] that depends on something
// that can be down (a downstream API, a binary on the host). Without it, a provider is
// always ready.
type Readier interface {
	// Ready reports whether the provider can do work right now. Health probes report
	// it, so the dispatcher stops sending this pair's tasks to an endpoint that is not
	// ready; a task that arrives anyway is refused with a transient 503, never a
	// terminal failure. Ready must be cheap and safe for concurrent use.
	Ready() bool
}

// WorkFunc returns the Provider of (kind, version) whose Work is work: the whole of a
// provider that needs no config hook and is always ready, typically a kind with one
// reaction. work receives every task of the pair; a kind with several reactions may
// switch on req.Reaction in it.
func WorkFunc(kind string, version int, work func(ctx context.Context, req Request) (Outcome, error)) Provider {
	return workFunc{kv: KindVersion{Kind: kind, Version: version}, work: work}
}

// workFunc is the Provider WorkFunc returns.
type workFunc struct {
	kv   KindVersion
	work func(ctx context.Context, req Request) (Outcome, error)
}

func (f workFunc) Kind() KindVersion { return f.kv }

func (f workFunc) Work(ctx context.Context, req Request) (Outcome, error) { return f.work(ctx, req) }

// Request is one task as Work receives it. Fields a reaction does not need are zero.
type Request struct {
	// TaskID identifies the task (stable across claims).
	TaskID string
	// ClaimEpoch identifies this claim of the task.
	ClaimEpoch int64
	// Attempt counts deliveries of the task, starting at 1.
	Attempt int

	// Reaction is the manifest reaction to run; switch on it in Work.
	Reaction string
	// KindVersion is the resource's kind version (always the provider's own).
	KindVersion int
	// Trigger is why the reaction fired.
	Trigger Trigger
	// TaskType is reconcile, delete, operate or react.
	TaskType TaskType

	// Resource is the subject resource with its current spec and status.
	Resource Resource
	// Status is the status accumulated so far in this generation (nil for the first
	// handler).
	Status json.RawMessage
	// Observed holds a composer's current children, with statuses.
	Observed []Resource
	// Descendants holds a rollup's settled subtree.
	Descendants []Resource
	// Operation is an operate task's verb and input.
	Operation *Operation
	// Transition is the lifecycle edge of a reactor task.
	Transition Transition
	// Generation is the generation that fired; pin reads and keys to it.
	Generation int64
	// DedupToken is a stable id for non-idempotent sinks (reactor tasks).
	DedupToken string

	// Deadline is when the result stops being accepted (also ctx's deadline).
	Deadline time.Time

	// Config is the EFFECTIVE provider config spec: the kind default deep-merged with
	// this resource's override, already merged by the dispatcher.
	Config json.RawMessage
	// Bundle is the EFFECTIVE provider config data: the override's if present, else
	// the default's.
	Bundle []byte
}

// NewRequest builds the Request Work receives for a task envelope.
func NewRequest(env *Envelope) Request {
	req := Request{
		TaskID:      env.TaskID,
		ClaimEpoch:  env.ClaimEpoch,
		Attempt:     env.Attempt,
		Reaction:    env.Reaction,
		KindVersion: env.KindVersion,
		Trigger:     env.Trigger,
		TaskType:    env.TaskType,
		Status:      env.Status,
		Observed:    env.Observed,
		Descendants: env.Descendants,
		Operation:   env.Operation,
		Transition:  env.Transition,
		DedupToken:  env.DedupToken,
		Deadline:    env.Deadline,
		Config:      env.Config,
		Bundle:      env.Bundle,
	}
	if env.Resource != nil {
		req.Resource = *env.Resource
		req.Generation = env.Resource.Generation
	}
	return req
}
