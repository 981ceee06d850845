package webhooksdk

import (
	"encoding/json"
	"time"
)

// The values of [Envelope.Type].
const (
	// EnvelopeTask is a task delivery: run Work and answer with a [Result].
	EnvelopeTask = "task"
	// EnvelopeHealth is a readiness probe: answer with a [HealthResponse].
	EnvelopeHealth = "health"
	// EnvelopeBatch is a batched delivery ([Batch]): answer with a [BatchResponse].
	EnvelopeBatch = "batch"
)

// TaskType says what the core asked for. It is informational: a provider routes on
// [Request.Reaction].
type TaskType string

// The task types the dispatcher sends.
const (
	TaskReconcile TaskType = "reconcile"
	TaskDelete    TaskType = "delete"
	TaskOperate   TaskType = "operate"
	TaskReact     TaskType = "react"
)

// Trigger is why a reaction fired; the closed set of a kind manifest's reaction triggers.
type Trigger string

// The reaction triggers.
const (
	TriggerSpecChange      Trigger = "specChange"
	TriggerChildrenSettled Trigger = "childrenSettled"
	TriggerDeleteRequested Trigger = "deleteRequested"
	TriggerOperation       Trigger = "operation"
	TriggerReactor         Trigger = "reactor"
	TriggerResync          Trigger = "resync"
)

// Transition is the lifecycle edge a reactor binding fired on (reactor tasks only).
type Transition string

// The lifecycle transitions a reactor binding can watch.
const (
	TransitionCreated  Transition = "created"
	TransitionSynced   Transition = "synced"
	TransitionDegraded Transition = "degraded"
	TransitionFailed   Transition = "failed"
	TransitionDeleted  Transition = "deleted"
)

// Envelope is the JSON body of every request the dispatcher POSTs to a provider endpoint:
// a task delivery (Type "task") or a health probe (Type "health", every other field
// empty). Fields a reaction does not need are omitted. docs/protocol.md is the normative
// description of each field.
type Envelope struct {
	// Type is EnvelopeTask or EnvelopeHealth.
	Type string `json:"type"`

	// TaskID identifies the queued task; stable across claims of the same task.
	TaskID string `json:"task_id,omitempty"`
	// ClaimEpoch is the fencing token of this claim: a result is applied only while the
	// task is still claimed at this epoch.
	ClaimEpoch int64 `json:"claim_epoch,omitempty"`
	// Attempt counts deliveries of this task, starting at 1.
	Attempt int `json:"attempt,omitempty"`
	// TaskType is reconcile, delete, operate or react.
	TaskType TaskType `json:"task_type,omitempty"`
	// Reaction is the name of the manifest reaction to run.
	Reaction string `json:"reaction,omitempty"`
	// Trigger is why the reaction fired.
	Trigger Trigger `json:"trigger,omitempty"`
	// Kind selects the provider, with KindVersion.
	Kind string `json:"kind,omitempty"`
	// KindVersion is the kind's version, 1..32767.
	KindVersion int `json:"kind_version,omitempty"`

	// Resource is the subject resource with its current spec and status.
	Resource *Resource `json:"resource,omitempty"`
	// Status is the status accumulated so far in this generation (absent for the first
	// handler).
	Status json.RawMessage `json:"status,omitempty"`
	// Observed holds a composer's current children.
	Observed []Resource `json:"observed,omitempty"`
	// Descendants holds a rollup's settled subtree.
	Descendants []Resource `json:"descendants,omitempty"`
	// Operation is the verb and input of an operate task.
	Operation *Operation `json:"operation,omitempty"`
	// Transition is the lifecycle edge of a reactor task.
	Transition Transition `json:"transition,omitempty"`
	// DedupToken is a stable id for non-idempotent sinks (reactor tasks).
	DedupToken string `json:"dedup_token,omitempty"`

	// Config is the effective provider config spec (kind default deep-merged with the
	// resource's override by the dispatcher).
	Config json.RawMessage `json:"config,omitempty"`
	// Bundle is the effective provider config data (base64 in JSON).
	Bundle []byte `json:"bundle,omitempty"`

	// Deadline is when the task's result stops being accepted; Work runs under it.
	Deadline time.Time `json:"deadline,omitzero"`
	// Callback is where an asynchronous result (and heartbeats) go.
	Callback *Callback `json:"callback,omitempty"`
	// PayloadURL is set on a thin envelope, one that was over the target's request
	// limit: the documents (Resource, Status, Observed, Descendants, Operation, Config,
	// Bundle) are left out and are fetched with GET PayloadURL, authorized by the
	// callback token. The SDK does this before calling Work.
	PayloadURL string `json:"payload_url,omitempty"`
}

// Resource is a resource as the dispatcher sends it: the subject of a task, or an entry
// of Observed / Descendants. Every field but status is always present; the control
// plane's REST API shows the same fields for a resource (its row embeds this type).
type Resource struct {
	// ID is the resource's stable UUID.
	ID string `json:"id"`
	// Kind is the resource's kind.
	Kind string `json:"kind"`
	// KindVersion is the resource's kind version, 1..32767.
	KindVersion int `json:"kind_version"`
	// Name is unique per kind.
	Name string `json:"name"`
	// Labels are the resource's labels.
	Labels map[string]string `json:"labels"`
	// Spec is the desired state, validated against the kind's spec schema, with value
	// flows substituted.
	Spec json.RawMessage `json:"spec"`
	// Status is the last applied status.
	Status json.RawMessage `json:"status,omitempty"`
	// Generation bumps on every spec change.
	Generation int64 `json:"generation"`
	// Phase is the resource's readiness (Ready, Reconciling, Degraded,
	// Failed, Orphaned, Quarantined, Deleting); a rollup reads it from each
	// descendant to aggregate.
	Phase string `json:"phase"`
}

// Operation is the subresource verb an operate task runs, with its input.
type Operation struct {
	// Verb is the subresource verb invoked.
	Verb string `json:"verb"`
	// Input is the verb's input.
	Input json.RawMessage `json:"input,omitempty"`
}

// Callback tells a provider where to deliver an asynchronous result.
type Callback struct {
	// URL is the outcome endpoint, …/v1/tasks/{task_id}/outcome. The heartbeat endpoint
	// is the same URL with its final "/outcome" replaced by "/heartbeat".
	URL string `json:"url"`
	// Token is the bearer capability for URL and the heartbeat URL.
	Token string `json:"token"`
	// BatchURL, when set, takes the Results of several tasks in one POST of a
	// [CallbackBatch], each item carrying its own task's Token (protocol §8.1).
	// Dispatchers that predate it leave it out; URL always works.
	BatchURL string `json:"batch_url,omitempty"`
}

// CallbackBatch is the body of a batched callback: the Results of up to
// [MaxCallbackBatch] tasks, each with its own task's callback token.
type CallbackBatch struct {
	Outcomes []CallbackItem `json:"outcomes"`
}

// MaxCallbackBatch caps the items of one [CallbackBatch].
const MaxCallbackBatch = 256

// CallbackItem is one task's Result in a [CallbackBatch].
type CallbackItem struct {
	// Token is the task's Callback.Token: it authorizes this item alone.
	Token string `json:"token"`
	// Result is the task's Result, exactly as a single callback's body.
	Result json.RawMessage `json:"result"`
}

// CallbackBatchAnswer is the 200 answer to a [CallbackBatch]: one entry per
// item, in order.
type CallbackBatchAnswer struct {
	Results []CallbackItemAnswer `json:"results"`
}

// CallbackItemAnswer is one item's answer: Status is the HTTP status a
// single callback of that Result would have had (200, 400, 401, 409, 503),
// Result its outcome on 200 (applied or duplicate), Detail the reason
// otherwise.
type CallbackItemAnswer struct {
	TaskID string `json:"task_id,omitempty"`
	Status int    `json:"status"`
	Result string `json:"result,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Result is the body of an inline 200 response and of a callback: exactly one of Outcome
// or Error is set.
type Result struct {
	// TaskID echoes the envelope's task_id.
	TaskID string `json:"task_id"`
	// ClaimEpoch echoes the envelope's claim_epoch; the result is applied only while the
	// task is still claimed at it.
	ClaimEpoch int64 `json:"claim_epoch"`
	// Outcome is set on success ({} for a success with nothing to apply).
	Outcome *Outcome `json:"outcome,omitempty"`
	// Error is set on failure.
	Error *Error `json:"error,omitempty"`
}

// Batch is the body of a batched delivery (docs/protocol.md §16): several task envelopes,
// each exactly as it would be sent alone, in one request signed once.
type Batch struct {
	// Type is EnvelopeBatch.
	Type string `json:"type"`
	// Tasks are the task envelopes (Type EnvelopeTask), each with its own claim.
	Tasks []Envelope `json:"tasks"`
}

// BatchResponse is the 200 answer to a [Batch]: one result per task, matched by task_id,
// in any order. Each element is a [BatchResult].
type BatchResponse struct {
	// Type is EnvelopeBatch.
	Type string `json:"type"`
	// Results holds one BatchResult per task of the batch.
	Results []json.RawMessage `json:"results"`
}

// BatchResult is one task's answer in a [BatchResponse]: its Result (an outcome or an
// error, as an inline 200 carries), or Accepted — the Result comes by callback, as after
// a 202.
type BatchResult struct {
	Result
	// Accepted means the task was taken on asynchronously: Outcome and Error are unset.
	Accepted bool `json:"accepted,omitempty"`
}

// Error is a failed task. Only Terminal true stops retries (the resource pins Failed until
// its spec changes); anything else is retried with backoff.
type Error struct {
	// Message is shown to operators in the resource's status.
	Message string `json:"message"`
	// Terminal means a retry cannot fix the failure.
	Terminal bool `json:"terminal"`
}

// Outcome is what a reaction produced. Fill only the parts the reaction emits; the core
// drops parts the manifest's emits mask does not permit.
type Outcome struct {
	// Status is the resource status (last writer wins).
	Status json.RawMessage `json:"status,omitempty"`
	// Conditions are health and custom axes (they accumulate).
	Conditions []Condition `json:"conditions,omitempty"`
	// Children are a composer's desired children.
	Children []Child `json:"children,omitempty"`
	// Edges are a composer's dependency edges with their value flows.
	Edges []Edge `json:"edges,omitempty"`
	// Configs are provider configs a composer owns.
	Configs []Config `json:"configs,omitempty"`
	// OperationOutput is an operate reaction's output.
	OperationOutput json.RawMessage `json:"operation_output,omitempty"`
	// SideEffectDone is a reactor's (informational) report that its side effect happened.
	SideEffectDone bool `json:"side_effect_done,omitempty"`
}

// Condition is one status condition, Kubernetes style.
type Condition struct {
	// Type names the axis, e.g. "Ready".
	Type string `json:"type"`
	// Status is "True", "False" or "Unknown".
	Status string `json:"status"`
	// Reason is a short CamelCase cause.
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation.
	Message string `json:"message,omitempty"`
}

// Child is a desired child of a composer. KindVersion is required (1..32767); a 0 is
// rejected by the core, never read as 1.
type Child struct {
	// Kind is the child's kind.
	Kind string `json:"kind"`
	// KindVersion is required, 1..32767.
	KindVersion int `json:"kind_version"`
	// Name is unique per kind.
	Name string `json:"name"`
	// Labels are the child's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Spec is the child's desired spec.
	Spec json.RawMessage `json:"spec,omitempty"`
}

// Ref names a resource by kind and name.
type Ref struct {
	// Kind is the resource's kind.
	Kind string `json:"kind"`
	// Name is the resource's name.
	Name string `json:"name"`
}

// Edge says Dependent waits for Dependency to be synced, and copies Values from the
// dependency's status into the dependent's spec.
type Edge struct {
	// Dependent is the resource that waits.
	Dependent Ref `json:"dependent"`
	// Dependency is the upstream resource.
	Dependency Ref `json:"dependency"`
	// Values are copied from the dependency's status into the dependent's spec.
	Values []ValueFlow `json:"values,omitempty"`
}

// ValueFlow copies the value at SourceField (a JSON Pointer into the dependency's status)
// to DependentField (a JSON Pointer into the dependent's spec).
type ValueFlow struct {
	// DependentField is a JSON Pointer into the dependent's spec.
	DependentField string `json:"dependent_field"`
	// SourceField is a JSON Pointer into the dependency's status.
	SourceField string `json:"source_field"`
}

// Config is a provider config a composer owns. KindVersion is required (1..32767).
type Config struct {
	// Name names the provider config.
	Name string `json:"name"`
	// Kind is the kind it configures.
	Kind string `json:"kind"`
	// KindVersion is required, 1..32767.
	KindVersion int `json:"kind_version"`
	// IsDefault makes it the default config of its (kind, kind_version), merged under
	// every resource's override; at most one per pair.
	IsDefault bool `json:"is_default,omitempty"`
	// Spec is the config document: a JSON object (absent means {}), the shape
	// [MergeConfig] accepts on either side.
	Spec json.RawMessage `json:"spec,omitempty"`
	// Data is an opaque bundle (base64 in JSON).
	Data []byte `json:"data,omitempty"`
}

// HealthResponse is the 200 body answering a health probe.
type HealthResponse struct {
	// Kinds has one entry per (kind, kind_version) served.
	Kinds []KindReadiness `json:"kinds"`
}

// KindReadiness is one provider's readiness in a [HealthResponse].
type KindReadiness struct {
	// Kind is the provider's kind.
	Kind string `json:"kind"`
	// KindVersion is the provider's kind version.
	KindVersion int `json:"kind_version"`
	// Ready is the provider's Ready().
	Ready bool `json:"ready"`
}
