// Package wire converts between the engine's model and the webhooksdk wire
// types (docs/protocol.md): the task envelope the dispatcher POSTs, and the
// result a provider answers inline or posts to the callback. The dispatcher
// and the callback receiver share it, so both ends read a result the same way.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// MessageID is the webhook-id of a claim: stable across the HTTP retries and
// failovers of one claim (the provider's duplicate guard), new for every
// claim, since each claim must run.
func MessageID(t model.Task) string {
	b := make([]byte, 0, 4+len(t.ID)+1+20)
	b = append(b, "msg_"...)
	b = append(b, t.ID...)
	b = append(b, '_')
	b = strconv.AppendInt(b, t.Epoch, 10)
	return string(b)
}

// Envelope builds the task envelope for req.
func Envelope(req *model.Request, cb *webhooksdk.Callback) webhooksdk.Envelope {
	env := webhooksdk.Envelope{
		Type:        webhooksdk.EnvelopeTask,
		TaskID:      req.TaskID,
		ClaimEpoch:  req.ClaimEpoch,
		Attempt:     req.Attempt,
		TaskType:    webhooksdk.TaskType(req.TaskType),
		Reaction:    req.Reaction,
		Trigger:     webhooksdk.Trigger(req.Trigger),
		Kind:        req.Kind,
		KindVersion: req.KindVersion,
		Resource:    resource(&req.Resource),
		Status:      req.Status,
		Observed:    resources(req.Observed),
		Descendants: resources(req.Descendants),
		Transition:  webhooksdk.Transition(req.Transition),
		DedupToken:  req.DedupToken,
		Config:      req.Config,
		Bundle:      req.Bundle,
		Callback:    cb,
	}
	if req.Operation != nil {
		env.Operation = &webhooksdk.Operation{Verb: req.Operation.Verb, Input: req.Operation.Input}
	}
	if req.Deadline != nil {
		env.Deadline = req.Deadline.UTC()
	}
	return env
}

func resource(r *model.Resource) *webhooksdk.Resource {
	return &webhooksdk.Resource{
		ID: r.ID, Kind: r.Kind, KindVersion: r.KindVersion, Name: r.Name, Labels: r.Labels,
		Spec: r.Spec, Status: r.Status, Generation: r.Generation, Phase: string(r.Phase),
	}
}

func resources(rs []model.Resource) []webhooksdk.Resource {
	if len(rs) == 0 {
		return nil
	}
	out := make([]webhooksdk.Resource, len(rs))
	for i := range rs {
		out[i] = *resource(&rs[i])
	}
	return out
}

// ErrMalformedResult is a result body that is not {"outcome": …} or
// {"error": …}.
var ErrMalformedResult = errors.New("malformed result")

// DecodeResult decodes a result body and converts it: exactly one of outcome
// and error must be present, and a task_id or claim_epoch it names must be
// the expected claim's (a provider answering for another claim is a bug, not
// an outcome). Errors match ErrMalformedResult.
func DecodeResult(body []byte, taskID string, epoch int64) (model.Result, error) {
	var r webhooksdk.Result
	if err := json.Unmarshal(body, &r); err != nil {
		return model.Result{}, fmt.Errorf("%w: %v", ErrMalformedResult, err)
	}
	switch {
	case (r.Outcome == nil) == (r.Error == nil):
		return model.Result{}, fmt.Errorf(`%w: need exactly one of "outcome" and "error"`, ErrMalformedResult)
	case r.TaskID != "" && r.TaskID != taskID:
		return model.Result{}, fmt.Errorf("%w: task_id %q is not this task (%s)", ErrMalformedResult, r.TaskID, taskID)
	case r.ClaimEpoch != 0 && r.ClaimEpoch != epoch:
		return model.Result{}, fmt.Errorf("%w: claim_epoch %d is not this claim's (%d)", ErrMalformedResult, r.ClaimEpoch, epoch)
	}
	if r.Error != nil {
		return model.Result{Error: &model.TaskError{Message: r.Error.Message, Terminal: r.Error.Terminal}}, nil
	}
	return model.Result{Outcome: Outcome(r.Outcome)}, nil
}

// Outcome converts a wire outcome.
func Outcome(o *webhooksdk.Outcome) *model.Outcome {
	out := &model.Outcome{
		Status:          o.Status,
		OperationOutput: o.OperationOutput,
		SideEffectDone:  o.SideEffectDone,
	}
	if len(o.Conditions) > 0 {
		out.Conditions = make([]model.Condition, len(o.Conditions))
		for i, c := range o.Conditions {
			out.Conditions[i] = model.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
	}
	if len(o.Children) > 0 {
		out.Children = make([]model.Child, len(o.Children))
		for i, c := range o.Children {
			out.Children[i] = model.Child{Kind: c.Kind, KindVersion: c.KindVersion, Name: c.Name, Labels: c.Labels, Spec: c.Spec}
		}
	}
	if len(o.Edges) > 0 {
		out.Edges = make([]model.Edge, len(o.Edges))
		for i, e := range o.Edges {
			me := model.Edge{
				Dependent:  model.Ref{Kind: e.Dependent.Kind, Name: e.Dependent.Name},
				Dependency: model.Ref{Kind: e.Dependency.Kind, Name: e.Dependency.Name},
			}
			if len(e.Values) > 0 {
				me.Values = make([]model.ValueFlow, len(e.Values))
				for j, v := range e.Values {
					me.Values[j] = model.ValueFlow{DependentField: v.DependentField, SourceField: v.SourceField}
				}
			}
			out.Edges[i] = me
		}
	}
	if len(o.Configs) > 0 {
		out.Configs = make([]model.ConfigSpec, len(o.Configs))
		for i, c := range o.Configs {
			out.Configs[i] = model.ConfigSpec{Name: c.Name, Kind: c.Kind, KindVersion: c.KindVersion, Spec: c.Spec, Data: c.Data}
		}
	}
	return out
}
