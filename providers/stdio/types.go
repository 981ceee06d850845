package stdio

import (
	"encoding/json"

	"github.com/convergeplane/converge/webhooksdk"
)

// Config is the kind's provider config. The provider consumes Command, Args, Env and
// TimeoutSeconds to launch the program; only Settings reaches it, as Request.Config.
type Config struct {
	// Command is the program to run (a path, or a name looked up in the program's PATH).
	Command string `json:"command"`
	// Args follow Command.
	Args []string `json:"args,omitempty"`
	// Env is the program's whole environment, plus PATH=MinimalPath unless it sets PATH.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSeconds bounds one run (default DefaultTimeout); the task deadline may end
	// it sooner.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Settings is the program's own configuration, opaque to the provider.
	Settings json.RawMessage `json:"settings,omitempty"`
}

// Request is the one JSON object written to the program's stdin. A field is omitted
// when empty.
type Request struct {
	// Reaction is "work" for a leaf, "compose" for a composer.
	Reaction string `json:"reaction"`
	// Trigger is why the reaction fired.
	Trigger webhooksdk.Trigger `json:"trigger,omitempty"`
	// TaskType is reconcile, delete, operate or react.
	TaskType webhooksdk.TaskType `json:"task_type,omitempty"`
	// Attempt counts deliveries of the task, from 1.
	Attempt int `json:"attempt,omitempty"`
	// Resource is the subject, with its spec and last status.
	Resource webhooksdk.Resource `json:"resource"`
	// Observed holds a composer's current children, with their statuses.
	Observed []webhooksdk.Resource `json:"observed,omitempty"`
	// Config is the effective config's settings.
	Config json.RawMessage `json:"config,omitempty"`
	// Bundle is the effective provider config data (base64 in JSON).
	Bundle []byte `json:"bundle,omitempty"`
}

// Response is the one JSON object the program writes to stdout; empty stdout is an empty
// success. The core applies only the parts the kind's reaction emits.
type Response struct {
	// Status is the resource's new status.
	Status json.RawMessage `json:"status,omitempty"`
	// Conditions are health and custom axes.
	Conditions []webhooksdk.Condition `json:"conditions,omitempty"`
	// Children are a composer's desired children (kind_version required).
	Children []webhooksdk.Child `json:"children,omitempty"`
	// Edges are a composer's dependency edges with their value flows.
	Edges []webhooksdk.Edge `json:"edges,omitempty"`
}
