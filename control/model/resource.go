package model

import (
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// Phase is the single readiness signal, derived in the database from
// synced_gen, generation, health_ok, failure_gen, frozen_until and
// deletion_requested_at. The API renders it verbatim.
type Phase string

// The seven phases, in precedence order.
const (
	PhaseDeleting    Phase = "Deleting"
	PhaseQuarantined Phase = "Quarantined"
	PhaseFailed      Phase = "Failed"
	PhaseOrphaned    Phase = "Orphaned"
	PhaseDegraded    Phase = "Degraded"
	PhaseReady       Phase = "Ready"
	PhaseReconciling Phase = "Reconciling"
)

// Phases lists every phase.
var Phases = []Phase{PhaseDeleting, PhaseQuarantined, PhaseFailed, PhaseOrphaned,
	PhaseDegraded, PhaseReady, PhaseReconciling}

// Resource is one row of the resources table as the engine and API see it:
// the protocol's resource (what a provider sees of it: the subject of a task,
// or an entry of its observed children or descendants) and the row's own
// columns. The embedded webhooksdk.Resource's omitempty tags apply to the
// API too: an unlabelled resource has no "labels" (docs/api.md).
type Resource struct {
	webhooksdk.Resource
	// Namespace is the namespace the resource belongs to ("default" unless
	// it was created in another).
	Namespace         string    `json:"namespace"`
	OwnerID           string    `json:"owner_id,omitempty"`
	ProviderConfigRef string    `json:"provider_config_ref,omitempty"`
	SyncedGen         int64     `json:"synced_gen"`
	HealthOK          bool      `json:"health_ok"`
	FailureGen        int64     `json:"failure_gen"`
	LastError         string    `json:"last_error,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	// ResourceVersion changes on every write of what a user owns (spec,
	// labels, kind_version, provider config, quarantine, deletion), never
	// on the engine's status writes; a write may be made conditional on it.
	ResourceVersion int64 `json:"resource_version"`
	// PriorVersion is, on the answer of a write (apply, rollback, delete),
	// the resource_version the resource had before it, 0 when the write
	// created it: the audit trail records both. Reads leave it 0; it is not
	// part of the API's documents.
	PriorVersion int64 `json:"-"`
}

// PhaseOf is the resource's phase, typed.
func (r Resource) PhaseOf() Phase { return Phase(r.Phase) }

// StoredCondition is a condition as the control plane keeps it: what a
// reaction reported (the protocol's webhooksdk.Condition) and when its status
// last changed, which the core stamps and a provider never sends.
type StoredCondition struct {
	webhooksdk.Condition
	LastTransitionTime *time.Time `json:"last_transition_time,omitempty"`
}

// Task is a claimed work_queue row, or a claimed reactor delivery (a
// lifecycle_outbox row: Type react, with Transition and Binding set). ID,
// Shard and ClaimEpoch together identify the claim; a completion for any
// other claim epoch is refused.
type Task struct {
	ID          string
	Shard       int16
	ResourceID  string
	Type        webhooksdk.TaskType
	Trigger     webhooksdk.Trigger
	Reaction    string
	Emits       OutcomeMask
	Kind        string
	KindVersion int
	Generation  int64
	ClaimEpoch  int64
	Attempts    int
	Deadline    time.Time // zero = no deadline
	// Transition and Binding are a react task's lifecycle edge and the
	// reactor binding it fired.
	Transition webhooksdk.Transition
	Binding    string
	// TraceParent is the W3C traceparent of the traced API request that
	// scheduled the task, stored with it; empty when none was (tracing off,
	// or scheduled by the engine itself).
	TraceParent string
	// Namespace is the task's namespace: its resource's, or a react
	// task's binding's. It picks the endpoints the task may go to.
	Namespace string
	// Resource is the task's resource as the claim read it, for its
	// request (claim_tasks returns it with each work task); nil when the
	// claim read none (a react task, a task whose resource was gone, a
	// task not from a claim): its request then reads the resource itself.
	Resource *Resource
}

// WireResources returns the protocol's part of each of rs; nil for none.
func WireResources(rs []Resource) []webhooksdk.Resource {
	if len(rs) == 0 {
		return nil
	}
	out := make([]webhooksdk.Resource, len(rs))
	for i := range rs {
		out[i] = rs[i].Resource
	}
	return out
}
