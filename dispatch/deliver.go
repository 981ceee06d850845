package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/registry"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/webhooksdk"
)

// Delivery results: the deliveries_total{result} label values and the
// delivery log's classification (store.DeliveryClassifications).
const (
	resultOK           = "ok"            // 200 with an outcome, or 204
	resultTaskError    = "task_error"    // 200 with an error body: the task failed, the delivery did not
	resultAccepted     = "accepted"      // 202: the outcome comes by callback
	resultRateLimited  = "rate_limited"  // 429
	resultGone         = "gone"          // 410: the endpoint is disabled
	resultRedirect     = "redirect"      // 3xx, never followed
	resultClientError  = "client_error"  // another 4xx
	resultServerError  = "server_error"  // 5xx
	resultRetryable    = "retryable"     // 408, 425
	resultUnexpected   = "unexpected"    // another 1xx/2xx status
	resultMalformed    = "malformed"     // a 200 body that is not a result
	resultTooLarge     = "too_large"     // a body over MaxResponseBytes
	resultTimeout      = "timeout"       // no answer within request_timeout_secs
	resultDeadline     = "deadline"      // the task deadline passed
	resultNetwork      = "network"       // no answer: connection failed or broke
	resultBlocked      = "blocked"       // the egress policy refused the address
	resultCancelled    = "cancelled"     // superseded or shut down mid-delivery
	resultAsyncTimeout = "async_timeout" // accepted, then no callback before the lease lapsed
)

// opKind is what the completer does with a finished delivery.
type opKind int

const (
	opComplete opKind = iota // engine.TaskCompleteMany with result
	opRelease                // engine.TaskRelease after delay, no attempt burnt
	opRecord                 // record an attempt in the delivery log
)

type op struct {
	kind   opKind
	task   model.Task
	result webhooksdk.Result
	// abandoned: result is a failure the dispatcher records in the
	// provider's place (engine.Completion.Abandoned).
	abandoned bool
	delay     time.Duration
	reason    string
	delivery  store.Delivery
}

// verdict is one attempt's classification.
type verdict struct {
	result   string
	status   int
	breaker  registry.Verdict
	failover bool // no answer: another endpoint may take it
	failed   bool // a failed attempt: its excerpt says why
	detail   string
	excerpt  []byte

	// What to do with the task; exactly one applies.
	complete *webhooksdk.Result
	// provided: complete is the provider's own Result (a 200 with one, or
	// a 204). Otherwise complete is the dispatcher's failure in its place,
	// recorded abandoned: the provider's answer for this claim, if it ever
	// comes by callback, is then superseded, not a duplicate. Unset is the
	// safe side: a new failure path is abandoned unless it says otherwise.
	provided bool
	release  bool
	hold     bool
	drop     bool // the claim is lost: nothing to do
	delay    time.Duration

	backoff time.Duration // stop sending to the endpoint this long
	disable string        // disable the endpoint with this reason (410)
}

func transient(msg string) *webhooksdk.Result {
	return &webhooksdk.Result{Error: &webhooksdk.Error{Message: msg}}
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }} // a buffer pool

// envelope is the envelope of one task for one endpoint: the task as the
// engine built it, and a callback URL and token bound to this claim and
// this delivery.
func (d *Dispatcher) envelope(it *item, endpoint string) (webhooksdk.Envelope, error) {
	t := it.task
	now := time.Now()
	exp := now.Add(d.cfg.TokenTTL)
	if !t.Deadline.IsZero() {
		exp = t.Deadline.Add(d.cfg.CallbackGrace)
	}
	tok, err := d.tokens.Mint(callback.Claim{TaskID: t.ID, ResourceID: t.ResourceID, Shard: t.Shard, ClaimEpoch: t.ClaimEpoch, Emits: t.Emits,
		Deadline: t.Deadline, Expires: exp, Endpoint: endpoint, Attempt: t.Attempts + 1, Issued: now})
	if err != nil {
		return webhooksdk.Envelope{}, err
	}
	env := it.env
	env.Callback = wire.Callback(d.cbBase, t.ID, tok)
	return env, nil
}

// encodeDelivery builds the request body for items at ep and returns its
// webhook-id: a single task's envelope, or a batch of them (wire.AppendBatch),
// an envelope over the endpoint's request limit (its share of it, in a
// batch) sent thin.
func (d *Dispatcher) encodeDelivery(items []*item, ep *registry.Endpoint, buf *bytes.Buffer) (string, error) {
	envs := make([]webhooksdk.Envelope, len(items))
	for i, it := range items {
		env, err := d.envelope(it, ep.Name())
		if err != nil {
			return "", err
		}
		envs[i] = env
	}
	if len(items) == 1 {
		return wire.MessageID(items[0].task), wire.AppendEnvelope(buf, &envs[0], d.cbBase, ep.MaxRequestBytes())
	}
	tasks := make([]model.Task, len(items))
	for i, it := range items {
		tasks[i] = it.task
	}
	return wire.BatchID(tasks), wire.AppendBatch(buf, envs, d.cbBase, ep.MaxRequestBytes())
}

// deliver runs one delivery — a task, or a batch — sign and send, fail over
// to another ready endpoint while no answer comes back, classify the answer
// for each task, and hand the results to the completer. A batch fails over
// only to an endpoint that takes a batch that large.
func (d *Dispatcher) deliver(items []*item, slot *registry.Slot, ops chan<- op) {
	defer func(all []*item) {
		for _, it := range all {
			d.untrack(it)
		}
	}(items)
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	span := d.startDelivery(items)
	defer span.End()
	var tried []string
	for {
		ep := slot.Endpoint()
		// A task whose deadline passed is not sent.
		now := time.Now()
		live := make([]*item, 0, len(items))
		for _, it := range items {
			if dead := it.task.Deadline; !dead.IsZero() && !now.Before(dead) {
				v := verdict{result: resultDeadline, breaker: registry.Neutral, failed: true,
					detail:   "the task deadline passed before it could be delivered",
					complete: transient("task deadline exceeded before delivery")}
				d.record(it, ep, v, now, 0, ops)
				d.finish(it, ep, v, ops)
				continue
			}
			live = append(live, it)
		}
		if items = live; len(items) == 0 {
			slot.Done(registry.Neutral)
			return
		}
		// Each endpoint gets its own tokens (they name the endpoint, so a
		// failure reported by callback is recorded against the right one).
		buf.Reset()
		msgID, err := d.encodeDelivery(items, ep, buf)
		if err != nil {
			slot.Done(registry.Neutral)
			for _, it := range items {
				ops <- op{kind: opComplete, task: it.task, abandoned: true,
					result: *transient("dispatcher could not build the envelope: " + err.Error())}
			}
			return
		}
		// A single task's request ends when its claim is lost; a batch's
		// runs on the work context, since one task's lost claim must not cut
		// its neighbours' request (their results are fenced each).
		ctx := items[0].ctx
		if len(items) > 1 {
			ctx = d.work
		}
		aspan, traceparent := d.startAttempt(span, ep.Name())
		start := time.Now()
		v, each := d.attempt(ctx, items, ep, msgID, traceparent, buf.Bytes(), start)
		lat := time.Since(start)
		endAttempt(aspan, v)
		slot.Done(v.breaker)
		for i, it := range items {
			d.record(it, ep, each[i], start, lat, ops)
		}
		if v.backoff > 0 {
			ep.BackOff(time.Now().Add(v.backoff), fmt.Sprintf("it answered %d %s", v.status, http.StatusText(v.status)))
		}
		if v.result == resultRateLimited {
			ep.Throttled() // a 429, or a Lambda throttle (transport.Lambda answers it as a 429)
		}
		if v.disable != "" {
			d.disable(ctx, ep, v.disable)
		}
		if v.failover && ctx.Err() == nil {
			tried = append(tried, ep.Name())
			if next, ok := d.reg.Acquire(items[0].pair, tried...); ok {
				if len(items) == 1 || next.Endpoint().MaxBatch() >= len(items) {
					slot = next
					continue
				}
				next.Done(registry.Neutral)
			}
		}
		for i, it := range items {
			traceOutcome(span, it, ep.Name(), each[i])
			d.finish(it, ep, each[i], ops)
		}
		return
	}
}

// record counts one task's attempt in the metrics and in the delivery log:
// every attempt, whatever its verdict, goes to the completer, which writes
// a batch's attempts in one insert.
func (d *Dispatcher) record(it *item, ep *registry.Endpoint, v verdict, start time.Time, lat time.Duration, ops chan<- op) {
	d.m.observe(ep.Name(), v.result, lat)
	rec := store.Delivery{
		Endpoint: ep.Name(), At: start, TaskID: it.task.ID, Resource: store.DeliveryResource{ID: it.task.ResourceID, Kind: it.task.Kind},
		TaskType: string(it.task.Type), ClaimEpoch: it.task.ClaimEpoch, Attempt: it.task.Attempts + 1, HTTPStatus: v.status,
		LatencyMS: int(lat / time.Millisecond), Classification: v.result,
	}
	if r := it.env.Resource; r != nil {
		rec.Resource.Name = r.Name
	}
	if it.task.Type != webhooksdk.TaskReact {
		// A work task's namespace is its resource's, so the insert need
		// not look it up; a react task's is its binding's, and its
		// resource the watched one, so the insert looks that one's up.
		rec.Resource.Namespace = it.task.Namespace
	}
	if o := it.env.Operation; o != nil {
		rec.Action = o.Verb
	}
	if v.failed {
		rec.Excerpt = failureExcerpt(v)
	}
	ops <- op{kind: opRecord, delivery: rec}
}

// finish does what a task's verdict says: complete, release, hold for its
// callback, or nothing.
func (d *Dispatcher) finish(it *item, ep *registry.Endpoint, v verdict, ops chan<- op) {
	switch {
	case v.drop:
	case v.complete != nil:
		ops <- op{kind: opComplete, task: it.task, result: *v.complete, abandoned: !v.provided}
	case v.release:
		ops <- op{kind: opRelease, task: it.task, delay: v.delay, reason: v.detail}
	case v.hold:
		d.async.hold(it.task, ep.Name(), time.Now())
	}
}

// failureExcerpt is what a failed attempt's record shows: the
// classification's detail, then the start of the response body.
func failureExcerpt(v verdict) string {
	if len(v.excerpt) == 0 {
		return v.detail
	}
	b := v.excerpt[:min(len(v.excerpt), store.DeliveryExcerptMax)]
	if v.detail == "" {
		return string(b)
	}
	return v.detail + ": " + string(b)
}

// disable turns the endpoint off on this pod at once, and in the table so
// every pod follows.
func (d *Dispatcher) disable(ctx context.Context, ep *registry.Endpoint, reason string) {
	ep.Disable(reason)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.st.DisableEndpoint(ctx, ep.Name(), reason); err != nil {
		d.log.Error("cannot record the endpoint as disabled", "endpoint", ep.Name(), "err", err)
		return
	}
	d.log.Warn("endpoint disabled", "endpoint", ep.Name(), "reason", reason)
}

// attempt makes one HTTP attempt of items under the request timeout and
// their task deadlines (a batch's latest, when every task has one),
// whichever ends first, and classifies it: the request's verdict (breaker,
// back-off, failover) and each task's. Outside a batch's 2xx answer every
// task shares the request's verdict; a 202 for a whole batch (a Lambda
// Event invoke) accepts every task.
func (d *Dispatcher) attempt(ctx context.Context, items []*item, ep *registry.Endpoint, msgID, traceparent string, body []byte, now time.Time) (verdict, []verdict) {
	var deadline time.Time
	for _, it := range items {
		if it.task.Deadline.IsZero() {
			deadline = time.Time{}
			break
		}
		if it.task.Deadline.After(deadline) {
			deadline = it.task.Deadline
		}
	}
	timeout := ep.RequestTimeout()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !deadline.IsZero() {
		var cancelD context.CancelFunc
		rctx, cancelD = context.WithDeadline(rctx, deadline)
		defer cancelD()
	}
	resp, err := ep.Deliver(rctx, &transport.Delivery{MsgID: msgID, Timestamp: now, Body: body,
		Signature: ep.Sign(msgID, now, body), TraceParent: traceparent})
	var v verdict
	switch {
	case err != nil:
		v = d.classifyError(ctx, deadline, ep, err, timeout)
	case len(items) > 1 && resp.FunctionError == nil && resp.Status/100 == 2 && resp.Status != http.StatusAccepted && !resp.Truncated:
		return classifyBatch(items, ep, resp)
	default:
		v = d.classifyResponse(items[0].task, ep, resp)
	}
	each := make([]verdict, len(items))
	for i := range each {
		each[i] = v
	}
	return v, each
}

// classifyBatch classifies a batch's 2xx answer but a 202: a batch response gives each
// task the verdict its own result would get inline (an outcome, an error, or
// accepted as for a 202); a task without exactly one usable result, or every
// task when the answer is not a batch response, fails transiently.
func classifyBatch(items []*item, ep *registry.Endpoint, resp *transport.Response) (verdict, []verdict) {
	tasks := make([]model.Task, len(items))
	for i, it := range items {
		tasks[i] = it.task
	}
	malformed := func(err error) verdict {
		msg := fmt.Sprintf("endpoint %s answered a batch with an unusable body: %v", ep.Name(), err)
		return verdict{result: resultMalformed, status: resp.Status, breaker: registry.Success, failed: true,
			detail: msg, excerpt: resp.Body, complete: transient(msg)}
	}
	answers, err := wire.DecodeBatch(resp.Body, tasks)
	if err == nil && resp.Status != http.StatusOK {
		err = fmt.Errorf("%w: status %d, want 200", wire.ErrMalformedResult, resp.Status)
	}
	each := make([]verdict, len(items))
	if err != nil {
		v := malformed(err)
		for i := range each {
			each[i] = v
		}
		return v, each
	}
	for i, a := range answers {
		v := verdict{status: resp.Status}
		switch {
		case a.Err != nil:
			v = malformed(a.Err)
			v.excerpt = nil
		case a.Accepted:
			v = accepted(v)
		default:
			v = provided(v, a.Result)
		}
		each[i] = v
	}
	return verdict{result: resultOK, status: resp.Status, breaker: registry.Success}, each
}

// provided is the verdict of a provider's own Result.
func provided(v verdict, res webhooksdk.Result) verdict {
	v.result, v.breaker, v.complete, v.provided, v.excerpt = resultOK, registry.Success, &res, true, nil
	if res.Error != nil {
		// The delivery worked; the task failed. It is still a failed
		// attempt of the resource, so it is recorded.
		v.result, v.failed, v.detail = resultTaskError, true, res.Error.Message
		if res.Error.Terminal {
			v.detail = "terminal: " + v.detail
		}
	}
	return v
}

// accepted is the verdict of a task taken on asynchronously: its Result
// comes by callback.
func accepted(v verdict) verdict {
	v.result, v.breaker, v.hold, v.excerpt = resultAccepted, registry.Success, true, nil
	return v
}

// classifyError classifies an attempt that got no answer; ctx is the
// context the request ran on and deadline its task deadline (zero: none).
func (d *Dispatcher) classifyError(ctx context.Context, deadline time.Time, ep *registry.Endpoint, err error, timeout time.Duration) verdict {
	if cause := context.Cause(ctx); cause != nil {
		if errors.Is(cause, errSuperseded) {
			return verdict{result: resultCancelled, breaker: registry.Neutral, drop: true}
		}
		return verdict{result: resultCancelled, breaker: registry.Neutral, release: true, detail: errShutdown.Error()}
	}
	switch {
	case !deadline.IsZero() && !time.Now().Before(deadline):
		msg := fmt.Sprintf("task deadline exceeded: endpoint %s gave no answer before the task deadline", ep.Name())
		return verdict{result: resultDeadline, breaker: registry.Failure, failed: true, detail: msg, complete: transient(msg)}
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("endpoint %s gave no answer within its request timeout (%s)", ep.Name(), timeout)
		return verdict{result: resultTimeout, breaker: registry.Failure, failed: true, detail: msg, complete: transient(msg)}
	case errors.As(err, new(*transport.UnavailableError)):
		// No retry cures it until an operator acts: disable the endpoint
		// (its tasks park, saying why) and release without an attempt, as
		// for a 410.
		reason := fmt.Sprintf("its target refused the delivery (%v) at %s", err, time.Now().UTC().Format(time.RFC3339))
		return verdict{result: resultGone, breaker: registry.Neutral, failed: true, release: true, disable: reason,
			detail: fmt.Sprintf("endpoint %s was disabled: %v", ep.Name(), err)}
	case errors.Is(err, transport.ErrTooLarge):
		// Retrying cannot shrink it; another endpoint may take it.
		msg := fmt.Sprintf("delivery to endpoint %s refused: %v", ep.Name(), err)
		return verdict{result: resultTooLarge, breaker: registry.Neutral, failed: true, failover: true, detail: msg,
			complete: &webhooksdk.Result{Error: &webhooksdk.Error{Message: msg, Terminal: true}}}
	}
	// What a reader of the delivery log or the resource is shown is the
	// classified reason; the error itself names the pod's resolver and the
	// addresses it dialled, and goes to the log.
	d.log.Warn("delivery got no answer", "endpoint", ep.Name(), "reason", transport.Reason(err), "err", err)
	if errors.Is(err, egress.ErrBlocked) {
		msg := fmt.Sprintf("delivery to endpoint %s refused: %s", ep.Name(), transport.Reason(err))
		return verdict{result: resultBlocked, breaker: registry.Failure, failed: true, failover: true, detail: msg, complete: transient(msg)}
	}
	msg := fmt.Sprintf("delivery to endpoint %s failed: %s", ep.Name(), transport.Reason(err))
	return verdict{result: resultNetwork, breaker: registry.Failure, failed: true, failover: true, detail: msg, complete: transient(msg)}
}

// classifyResponse classifies the answer to a single task's delivery, or
// a batch's answer other than a 2xx (classifyBatch), which no task's
// result is read from.
func (d *Dispatcher) classifyResponse(t model.Task, ep *registry.Endpoint, resp *transport.Response) verdict {
	if resp.FunctionError != nil {
		return functionFailure(ep, resp)
	}
	st := resp.Status
	v := verdict{status: st, excerpt: resp.Body}
	retryAfter := min(resp.RetryAfter, d.cfg.MaxRetryAfter)
	statusText := fmt.Sprintf("%d %s", st, http.StatusText(st))
	fail := func(result string, b registry.Verdict, msg string) verdict {
		v.result, v.breaker, v.failed, v.detail = result, b, true, msg
		v.complete = transient(msg)
		// Retry-After asks the endpoint be left alone: nothing more is sent
		// to it until then, so the task's retry waits at least that long
		// unless another endpoint takes it.
		v.backoff = retryAfter
		return v
	}
	switch {
	case st == http.StatusOK:
		if resp.Truncated {
			return fail(resultTooLarge, registry.Success, fmt.Sprintf("endpoint %s answered with a body over %d bytes", ep.Name(), len(resp.Body)))
		}
		res, err := wire.DecodeResult(resp.Body, t.ID, t.ClaimEpoch)
		if err != nil {
			return fail(resultMalformed, registry.Success, fmt.Sprintf("endpoint %s answered 200 with an unusable body: %v", ep.Name(), err))
		}
		return provided(v, res)
	case st == http.StatusNoContent:
		return provided(v, webhooksdk.Result{Outcome: &webhooksdk.Outcome{}})
	case st == http.StatusAccepted:
		return accepted(v)
	case st == http.StatusTooManyRequests:
		delay := retryAfter
		if delay <= 0 {
			// Jittered, so pods throttled together do not return together.
			delay = time.Duration(float64(d.cfg.RateLimitBackoff) * (0.8 + 0.4*rand.Float64())) // jitter, not security
		}
		v.result, v.breaker, v.failed, v.release, v.delay, v.backoff = resultRateLimited, registry.Neutral, true, true, delay, delay
		v.detail = fmt.Sprintf("endpoint %s answered 429 Too Many Requests; retrying after %s without counting an attempt", ep.Name(), delay)
		return v
	case st == http.StatusGone:
		reason := fmt.Sprintf("its target answered 410 Gone at %s", time.Now().UTC().Format(time.RFC3339))
		v.result, v.breaker, v.failed, v.release, v.disable = resultGone, registry.Neutral, true, true, reason
		v.detail = fmt.Sprintf("endpoint %s answered 410 Gone and was disabled", ep.Name())
		return v
	case st >= 300 && st < 400:
		msg := fmt.Sprintf("endpoint %s answered %s (redirects are never followed)", ep.Name(), statusText)
		if resp.Location != "" {
			msg += "; Location: " + resp.Location
		}
		return fail(resultRedirect, registry.Failure, msg)
	case st == http.StatusRequestTimeout || st == http.StatusTooEarly:
		return fail(resultRetryable, registry.Neutral, fmt.Sprintf("endpoint %s answered %s", ep.Name(), statusText))
	case st >= 500:
		return fail(resultServerError, registry.Failure, fmt.Sprintf("endpoint %s answered %s", ep.Name(), statusText))
	case st >= 400:
		return fail(resultClientError, registry.Neutral, fmt.Sprintf("endpoint %s answered %s", ep.Name(), statusText))
	default:
		return fail(resultUnexpected, registry.Success, fmt.Sprintf("endpoint %s answered an unexpected %s", ep.Name(), statusText))
	}
}

// functionFailure classifies a Lambda function error as its HTTPS
// counterpart: a Handled error is the task failing (task_error, like a 200
// with an error), an Unhandled one the runtime failing (server_error, like
// a 5xx: it counts toward the breaker). Either is transient unless its
// errorType is "Terminal".
func functionFailure(ep *registry.Endpoint, resp *transport.Response) verdict {
	fe := resp.FunctionError
	msg := fmt.Sprintf("the function of endpoint %s failed (%s %s): %s", ep.Name(), fe.Kind, fe.Type, fe.Message)
	v := verdict{status: resp.Status, excerpt: resp.Body, failed: true, detail: msg,
		complete: &webhooksdk.Result{Error: &webhooksdk.Error{Message: msg, Terminal: fe.Terminal()}}}
	if fe.Terminal() {
		v.detail = "terminal: " + msg
	}
	if fe.Kind == "Handled" {
		v.result, v.breaker, v.provided = resultTaskError, registry.Success, true
	} else {
		v.result, v.breaker = resultServerError, registry.Failure
	}
	return v
}
