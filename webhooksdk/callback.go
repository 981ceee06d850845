package webhooksdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// maxResponseRead caps how much of a callback or heartbeat response is read (to reuse
// the connection); the body itself is ignored.
const maxResponseRead = 64 << 10

// heartbeatNoDeadline is the heartbeat interval of a task without a deadline.
const heartbeatNoDeadline = 10 * time.Second

// HeartbeatURL derives the heartbeat URL from a callback URL: the final "/outcome" path
// segment is replaced by "/heartbeat" (…/v1/tasks/{id}/outcome → …/v1/tasks/{id}/heartbeat),
// or "/heartbeat" is appended when the path does not end in "/outcome". The query, if
// any, is kept.
func HeartbeatURL(callbackURL string) (string, error) {
	u, err := url.Parse(callbackURL)
	if err != nil {
		return "", fmt.Errorf("heartbeat url: %w", err)
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/outcome")
	u.Path = p + "/heartbeat"
	u.RawPath = ""
	return u.String(), nil
}

// deliver POSTs the result body to the callback URL until it is accepted, refused for
// good, or the task deadline plus the grace passes. The first attempt goes in a batched
// callback when the dispatcher offers one; if that request fails as a whole, the same
// attempt falls back to the task's own URL. Network errors, 408, 425, 429 and
// 5xx are retried with exponential backoff (at least the Retry-After the callback asks
// for); anything else ends delivery.
func (e *Endpoint) deliver(rn *run, body []byte, log *slog.Logger) {
	cb := rn.env.Callback
	stopAt := rn.env.Deadline
	if stopAt.IsZero() || stopAt.Before(time.Now()) {
		stopAt = time.Now()
	}
	ctx, cancel := context.WithDeadline(e.baseCtx, stopAt.Add(e.cfg.callbackGrace))
	defer cancel()

	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(e.cfg.retryInitial),
		backoff.WithMaxInterval(e.cfg.retryMax),
		backoff.WithMaxElapsedTime(0), // bounded by ctx's deadline instead
	)
	for attempt := 1; ; attempt++ {
		var (
			status, batched = 0, false
			retryAfter      time.Duration
			err             error
		)
		if attempt == 1 && cb.BatchURL != "" && e.batcher != nil {
			status, batched = e.batcher.send(ctx, cb.BatchURL, cb.Token, rn.traceparent, body)
		}
		if !batched {
			status, retryAfter, err = e.post(ctx, cb.URL, cb.Token, rn.traceparent, body)
		}
		switch {
		case err != nil:
			log.Warn("callback attempt failed", "attempt", attempt, "err", err)
		case status == http.StatusOK || status == http.StatusNoContent:
			log.Debug("callback delivered", "attempt", attempt, "status", status)
			return
		case status == http.StatusConflict:
			log.Info("callback refused: task superseded by a newer claim; result dropped")
			return
		case retryableStatus(status):
			log.Warn("callback attempt failed", "attempt", attempt, "status", status)
		default: // 400, 401, 413, other 4xx, 3xx: retrying the same body cannot help
			log.Error("callback rejected; result dropped", "status", status)
			return
		}
		wait := b.NextBackOff()
		wait = max(wait, retryAfter)
		if dl, _ := ctx.Deadline(); time.Until(dl) < wait {
			log.Error("callback not delivered before the task deadline; result dropped", "attempts", attempt)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			log.Error("callback abandoned", "attempts", attempt, "cause", context.Cause(ctx))
			return
		case <-t.C:
		}
	}
}

// heartbeat extends the task's lease while an asynchronous Work runs; a 409 cancels the
// Work context with ErrSuperseded.
func (e *Endpoint) heartbeat(rn *run) {
	defer e.wg.Done()
	defer rn.live.Done()
	ctx := rn.ctx
	interval := e.cfg.heartbeatEvery
	if interval == 0 {
		interval = heartbeatNoDeadline
		if !rn.env.Deadline.IsZero() {
			interval = max(time.Until(rn.env.Deadline)/3, HeartbeatMinDefault)
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	cb := rn.env.Callback
	var hbURL string
	var body []byte
	for {
		select {
		case <-rn.done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Built at the first beat: most asynchronous Work ends before one
		// is due, and building it up front cost every task its parse and
		// encoding.
		if hbURL == "" {
			u, err := HeartbeatURL(cb.URL)
			if err != nil {
				e.taskLogger(rn).Error("no heartbeats", "err", err)
				return
			}
			hbURL = u
			body, _ = json.Marshal(struct { // a string and an int: cannot fail
				TaskID     string `json:"task_id"`
				ClaimEpoch int64  `json:"claim_epoch"`
			}{rn.env.TaskID, rn.env.ClaimEpoch})
		}
		status, _, err := e.post(ctx, hbURL, cb.Token, rn.traceparent, body)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				e.taskLogger(rn).Warn("heartbeat failed", "err", err)
			}
		case status == http.StatusConflict:
			e.taskLogger(rn).Info("heartbeat refused: task superseded; cancelling work")
			rn.cancel(ErrSuperseded)
			return
		case status >= 300:
			e.taskLogger(rn).Warn("heartbeat refused", "status", status)
		}
	}
}

// post sends one authenticated JSON POST, in the delivery's trace when traceparent is
// set, and returns the status and the Retry-After the response asks for (0 if none).
func (e *Endpoint) post(ctx context.Context, target, token, traceparent string, body []byte) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("User-Agent", "converge-webhooksdk")
	setTraceParent(req.Header, traceparent)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, 0, err // *url.Error names the URL, never the token
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseRead)) // drain for reuse; errors don't matter
	return resp.StatusCode, retryAfter(resp.Header.Get("Retry-After")), nil
}

func retryableStatus(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooEarly ||
		status == http.StatusTooManyRequests || status >= 500
}

// retryAfter parses a Retry-After of delay-seconds or an HTTP date; 0 if absent or bad.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// fetchPayload completes a thin envelope: it GETs env.PayloadURL with the callback
// token and returns env with the fetched documents (Resource, Status, Observed,
// Descendants, Operation, Config, Bundle). The answer must be for env's task and claim;
// a 409 (the claim no longer holds the task) is ErrSuperseded. The body is capped like
// a delivery's (WithMaxBody).
func (e *Endpoint) fetchPayload(ctx context.Context, env *Envelope, traceparent string) (*Envelope, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.PayloadURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch task payload: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+env.Callback.Token)
	req.Header.Set("Accept", "application/json")
	setTraceParent(req.Header, traceparent)
	req.Header.Set("User-Agent", "converge-webhooksdk")
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch task payload: %w", err) // *url.Error names the URL, never the token
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, e.cfg.maxBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("fetch task payload: read: %w", err)
	case resp.StatusCode == http.StatusConflict:
		return nil, fmt.Errorf("fetch task payload: %w", ErrSuperseded)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("fetch task payload: %s answered %d: %s", env.PayloadURL, resp.StatusCode, body[:min(len(body), 512)])
	case int64(len(body)) > e.cfg.maxBody:
		return nil, fmt.Errorf("fetch task payload: over %d bytes (WithMaxBody)", e.cfg.maxBody)
	}
	var full Envelope
	if err := json.Unmarshal(body, &full); err != nil {
		return nil, fmt.Errorf("fetch task payload: malformed: %w", err)
	}
	if full.TaskID != env.TaskID || full.ClaimEpoch != env.ClaimEpoch {
		return nil, fmt.Errorf("fetch task payload: got task %s claim_epoch %d, want %s claim_epoch %d",
			full.TaskID, full.ClaimEpoch, env.TaskID, env.ClaimEpoch)
	}
	out := *env
	out.Resource, out.Status, out.Observed, out.Descendants = full.Resource, full.Status, full.Observed, full.Descendants
	out.Operation, out.Config, out.Bundle = full.Operation, full.Config, full.Bundle
	return &out, nil
}

// traceParent returns the request's W3C traceparent (protocol §17) when it is a
// well-formed one, else "": the header is not signed, so a malformed value is dropped
// rather than passed on.
func traceParent(h http.Header) string {
	v := h.Get("traceparent")
	if len(v) != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || v[:2] == "ff" {
		return ""
	}
	for i := range len(v) {
		c := v[i]
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	if strings.Trim(v[3:35], "0") == "" || strings.Trim(v[36:52], "0") == "" {
		return "" // an all-zero trace or parent id is invalid
	}
	return v
}

func setTraceParent(h http.Header, traceparent string) {
	if traceparent != "" {
		h.Set("traceparent", traceparent)
	}
}
