package model

import (
	"encoding/json"
	"time"
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

// Resource is one row of the resources table as the engine and API see it.
type Resource struct {
	ID                string            `json:"id"`
	Kind              string            `json:"kind"`
	KindVersion       int               `json:"kind_version"`
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels"`
	Spec              json.RawMessage   `json:"spec"`
	Status            json.RawMessage   `json:"status,omitempty"`
	OwnerID           string            `json:"owner_id,omitempty"`
	ProviderConfigRef string            `json:"provider_config_ref,omitempty"`
	Generation        int64             `json:"generation"`
	SyncedGen         int64             `json:"synced_gen"`
	HealthOK          bool              `json:"health_ok"`
	FailureGen        int64             `json:"failure_gen"`
	Phase             Phase             `json:"phase"`
	LastError         string            `json:"last_error,omitempty"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
}

// Condition is a Kubernetes-style condition a reaction reports.
type Condition struct {
	Type               string     `json:"type"`
	Status             string     `json:"status"`
	Reason             string     `json:"reason,omitempty"`
	Message            string     `json:"message,omitempty"`
	LastTransitionTime *time.Time `json:"last_transition_time,omitempty"`
}

// Ref names a resource by kind and name.
type Ref struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// ValueFlow copies SourceField (a JSON pointer into the dependency's status)
// into DependentField (a JSON pointer into the dependent's spec).
type ValueFlow struct {
	DependentField string `json:"dependent_field"`
	SourceField    string `json:"source_field"`
}

// Edge says Dependent waits for Dependency and receives its values.
type Edge struct {
	Dependent  Ref         `json:"dependent"`
	Dependency Ref         `json:"dependency"`
	Values     []ValueFlow `json:"values,omitempty"`
}

// Child is a resource a composer wants to exist.
type Child struct {
	Kind        string            `json:"kind"`
	KindVersion int               `json:"kind_version"`
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Spec        json.RawMessage   `json:"spec,omitempty"`
}

// ConfigSpec is a provider config a composer owns.
type ConfigSpec struct {
	Name        string          `json:"name"`
	Kind        string          `json:"kind"`
	KindVersion int             `json:"kind_version"`
	IsDefault   bool            `json:"is_default,omitempty"`
	Spec        json.RawMessage `json:"spec,omitempty"`
	Data        []byte          `json:"data,omitempty"`
}

// Outcome is what a reaction returns; the core applies only the parts the
// reaction's emits mask allows.
type Outcome struct {
	Status          json.RawMessage `json:"status,omitempty"`
	Conditions      []Condition     `json:"conditions,omitempty"`
	Children        []Child         `json:"children,omitempty"`
	Edges           []Edge          `json:"edges,omitempty"`
	Configs         []ConfigSpec    `json:"configs,omitempty"`
	OperationOutput json.RawMessage `json:"operation_output,omitempty"`
	SideEffectDone  bool            `json:"side_effect_done,omitempty"`
}

// Operation is an operator verb invocation.
type Operation struct {
	Verb  string          `json:"verb"`
	Input json.RawMessage `json:"input,omitempty"`
}

// TaskType is the kind of work a task carries.
type TaskType string

// The task types.
const (
	TaskReconcile TaskType = "reconcile"
	TaskDelete    TaskType = "delete"
	TaskOperate   TaskType = "operate"
	TaskReact     TaskType = "react"
)

// Task is a claimed work_queue row. ID, Shard and Epoch together identify the
// claim; a completion for any other epoch is refused.
type Task struct {
	ID          string
	Shard       int16
	ResourceID  string
	Type        TaskType
	Trigger     Trigger
	Reaction    string
	Emits       OutcomeMask
	Kind        string
	KindVersion int
	Generation  int64
	Epoch       int64
	Attempts    int
	Deadline    time.Time // zero = no deadline
}

// Request is what a provider receives for one task: the same fields the wire
// envelope carries, filled per trigger.
type Request struct {
	TaskID      string          `json:"task_id"`
	ClaimEpoch  int64           `json:"claim_epoch"`
	Attempt     int             `json:"attempt"`
	TaskType    TaskType        `json:"task_type"`
	Reaction    string          `json:"reaction"`
	Trigger     Trigger         `json:"trigger"`
	Kind        string          `json:"kind"`
	KindVersion int             `json:"kind_version"`
	Resource    Resource        `json:"resource"`
	Status      json.RawMessage `json:"status,omitempty"`
	Observed    []Resource      `json:"observed,omitempty"`
	Descendants []Resource      `json:"descendants,omitempty"`
	Operation   *Operation      `json:"operation,omitempty"`
	Transition  Transition      `json:"transition,omitempty"`
	DedupToken  string          `json:"dedup_token,omitempty"`
	Config      json.RawMessage `json:"config,omitempty"`
	Bundle      []byte          `json:"bundle,omitempty"`
	Deadline    *time.Time      `json:"deadline,omitempty"`
}

// TaskError is a failed task's error. Terminal pins the resource Failed for
// its current generation; otherwise the task is retried with backoff.
type TaskError struct {
	Message  string `json:"message"`
	Terminal bool   `json:"terminal,omitempty"`
}

func (e *TaskError) Error() string { return e.Message }

// Result is a task's completion: exactly one of Outcome or Error.
type Result struct {
	Outcome *Outcome   `json:"outcome,omitempty"`
	Error   *TaskError `json:"error,omitempty"`
}
