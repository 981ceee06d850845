// Package wire is the dispatcher's own part of the wire protocol
// (docs/protocol.md); the protocol's types themselves are webhooksdk's, used
// as they are. What is left here is what only the dispatcher decides: the
// webhook-id of a claim, and how a result body is read — the same way
// inline and by callback, since the dispatcher and the callback receiver
// share this package.
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

// ErrMalformedResult is a result body that is not {"outcome": …} or
// {"error": …}.
var ErrMalformedResult = errors.New("malformed result")

// DecodeResult decodes a result body, inline or by callback alike: exactly
// one of outcome and error must be present, and a task_id or claim_epoch it
// names must be the expected claim's (a provider answering for another claim
// is a bug, not an outcome). An absent or null claim_epoch means this
// claim's; an explicit 0 is another's (epochs start at 1). Errors match
// ErrMalformedResult. What the outcome itself may hold is the store's to
// check (store.CompleteBatch), against the reaction's emits mask.
func DecodeResult(body []byte, taskID string, epoch int64) (webhooksdk.Result, error) {
	// The outer claim_epoch shadows the embedded one, so it is read once,
	// through a pointer that tells absent from 0.
	var r struct {
		webhooksdk.Result
		ClaimEpoch *int64 `json:"claim_epoch"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return webhooksdk.Result{}, fmt.Errorf("%w: %v", ErrMalformedResult, err)
	}
	switch {
	case (r.Outcome == nil) == (r.Error == nil):
		return webhooksdk.Result{}, fmt.Errorf(`%w: need exactly one of "outcome" and "error"`, ErrMalformedResult)
	case r.TaskID != "" && r.TaskID != taskID:
		return webhooksdk.Result{}, fmt.Errorf("%w: task_id %q is not this task (%s)", ErrMalformedResult, r.TaskID, taskID)
	case r.ClaimEpoch != nil && *r.ClaimEpoch != epoch:
		return webhooksdk.Result{}, fmt.Errorf("%w: claim_epoch %d is not this claim's (%d)", ErrMalformedResult, *r.ClaimEpoch, epoch)
	}
	if r.ClaimEpoch != nil {
		r.Result.ClaimEpoch = *r.ClaimEpoch
	}
	return r.Result, nil
}
