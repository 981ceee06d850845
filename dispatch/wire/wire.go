// Package wire is the dispatcher's own part of the wire protocol
// (docs/protocol.md); the protocol's types themselves are webhooksdk's, used
// as they are. What is left here is what only the dispatcher decides: the
// webhook-id of a claim (and of a batch), and how a result body is read — the same way
// inline and by callback, since the dispatcher and the callback receiver
// share this package.
package wire

import (
	"crypto/sha256"
	"encoding/hex"
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
	b = strconv.AppendInt(b, t.ClaimEpoch, 10)
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
// ErrMalformedResult. What the outcome itself may hold is the engine's to
// check (engine.TaskCompleteMany), against the reaction's emits mask.
func DecodeResult(body []byte, taskID string, claimEpoch int64) (webhooksdk.Result, error) {
	var r result
	if err := json.Unmarshal(body, &r); err != nil {
		return webhooksdk.Result{}, fmt.Errorf("%w: %v", ErrMalformedResult, err)
	}
	return r.check(taskID, claimEpoch)
}

// result is a result body as read: the outer claim_epoch shadows the
// embedded one, so it is read once, through a pointer that tells absent from
// 0. Accepted is only a batch answer's.
type result struct {
	webhooksdk.BatchResult
	ClaimEpoch *int64 `json:"claim_epoch"`
}

// check applies DecodeResult's rules to a decoded result.
func (r *result) check(taskID string, claimEpoch int64) (webhooksdk.Result, error) {
	switch {
	case (r.Outcome == nil) == (r.Error == nil):
		return webhooksdk.Result{}, fmt.Errorf(`%w: need exactly one of "outcome" and "error"`, ErrMalformedResult)
	case r.TaskID != "" && r.TaskID != taskID:
		return webhooksdk.Result{}, fmt.Errorf("%w: task_id %q is not this task (%s)", ErrMalformedResult, r.TaskID, taskID)
	case r.ClaimEpoch != nil && *r.ClaimEpoch != claimEpoch:
		return webhooksdk.Result{}, fmt.Errorf("%w: claim_epoch %d is not this claim's (%d)", ErrMalformedResult, *r.ClaimEpoch, claimEpoch)
	}
	if r.ClaimEpoch != nil {
		r.Result.ClaimEpoch = *r.ClaimEpoch
	}
	return r.Result, nil
}

// BatchID is the webhook-id of a batched delivery: derived from the claims
// it carries, so it is stable across the failovers of one batch (the same
// claims, the same body) and new for any other set of claims.
func BatchID(tasks []model.Task) string {
	h := sha256.New()
	for _, t := range tasks {
		h.Write([]byte(MessageID(t)))
		h.Write([]byte{0})
	}
	return "msg_batch_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Answer is one task's answer in a batch response: its Result, or
// Accepted (the Result comes by callback), or Err when the response holds
// no usable answer for it (missing, duplicated or malformed; matches
// ErrMalformedResult).
type Answer struct {
	Result   webhooksdk.Result
	Accepted bool
	Err      error
}

// DecodeBatch reads a batch response body ({"type":"batch","results":[…]})
// for the claims of tasks, returning one Answer per task, in tasks' order.
// Results are matched by task_id; each is read as DecodeResult reads an
// inline one, or is {"task_id", "claim_epoch", "accepted": true}. A task
// with no result, or with more than one, gets an Err (its answers are never
// applied); a result naming no task of the batch is ignored. A body that is
// not a batch response is an error for the whole batch.
func DecodeBatch(body []byte, tasks []model.Task) ([]Answer, error) {
	results, err := decodeResults(body)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.ID] = i
	}
	answers := make([]Answer, len(tasks))
	seen := make([]int, len(tasks))
	for _, r := range results {
		i, ok := index[r.TaskID]
		if !ok {
			continue
		}
		seen[i]++
		t := tasks[i]
		switch {
		case r.err != nil:
			answers[i].Err = r.err
		case !r.Accepted:
			answers[i].Result, answers[i].Err = r.check(t.ID, t.ClaimEpoch)
		case r.ClaimEpoch != nil && *r.ClaimEpoch != t.ClaimEpoch:
			answers[i].Err = fmt.Errorf("%w: claim_epoch %d is not this claim's (%d)", ErrMalformedResult, *r.ClaimEpoch, t.ClaimEpoch)
		case r.Outcome != nil || r.Error != nil:
			answers[i].Err = fmt.Errorf(`%w: "accepted" goes without "outcome" and "error"`, ErrMalformedResult)
		default:
			answers[i].Accepted = true
		}
	}
	for i, n := range seen {
		switch {
		case n == 0:
			answers[i] = Answer{Err: fmt.Errorf("%w: the batch response has no result for task %s", ErrMalformedResult, tasks[i].ID)}
		case n > 1:
			answers[i] = Answer{Err: fmt.Errorf("%w: the batch response has %d results for task %s", ErrMalformedResult, n, tasks[i].ID)}
		}
	}
	return answers, nil
}

// batchResult is one element of a batch answer, or, in err, why it does not
// decode (reported against the task it names, if any).
type batchResult struct {
	result
	err error
}

// decodeResults reads a batch answer in one pass of encoding/json, which
// every well-formed answer takes. Only an answer with a result that does not
// decode is read again, a result at a time, so that one bad result fails its
// own task alone: a result that names no task is left out (its task, if any,
// then has no result), one that does is kept with its error.
func decodeResults(body []byte) ([]batchResult, error) {
	var whole struct {
		Type    string        `json:"type"`
		Results []batchResult `json:"results"`
	}
	if json.Unmarshal(body, &whole) != nil {
		var br webhooksdk.BatchResponse
		if err := json.Unmarshal(body, &br); err != nil {
			return nil, fmt.Errorf("%w: not a batch response: %v", ErrMalformedResult, err)
		}
		whole.Type, whole.Results = br.Type, decodeEach(br.Results)
	}
	if whole.Type != webhooksdk.EnvelopeBatch {
		return nil, fmt.Errorf(`%w: not a batch response: type %q, want "batch"`, ErrMalformedResult, whole.Type)
	}
	return whole.Results, nil
}

// decodeEach decodes a batch answer's results one at a time.
func decodeEach(raws []json.RawMessage) []batchResult {
	results := make([]batchResult, 0, len(raws))
	for _, raw := range raws {
		var r batchResult
		if err := json.Unmarshal(raw, &r.result); err != nil {
			var head struct {
				TaskID string `json:"task_id"`
			}
			if json.Unmarshal(raw, &head) != nil {
				continue
			}
			r = batchResult{err: fmt.Errorf("%w: %v", ErrMalformedResult, err)}
			r.TaskID = head.TaskID
		}
		results = append(results, r)
	}
	return results
}
