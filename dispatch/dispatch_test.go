package dispatch_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/breaker"
	"github.com/convergeplane/converge/dispatch/egress/egresstest"
	"github.com/convergeplane/converge/webhooksdk"
)

// TestInlineSuccess runs one task through the real webhooksdk handler and
// checks the whole request on the way: headers, signature (verified with an
// independent HMAC, not the SDK), envelope, effective config, callback.
func TestInlineSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	e.exec(`INSERT INTO providerconfigs (name, kind, kind_version, is_default, spec, data) VALUES
		('leaf-default', 'leaf', 1, true, '{"region":"eu","size":1}', '\x0102'),
		('big', 'leaf', 1, false, '{"size":2}', NULL)`)
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var gotConfig atomic.Value
	h := e.sdk(s, nil, newProvider("leaf", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		gotConfig.Store(string(req.Config))
		return echo(ctx, req)
	}))
	rec := &recorder{next: h}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{})
	e.listen()

	var id string
	must(t, e.db.Pool.QueryRow(e.ctx, `INSERT INTO resources (kind, kind_version, name, spec, provider_config_ref)
		VALUES ('leaf', 1, 'a', '{"x":1}', 'big') RETURNING id`).Scan(&id))
	e.exec(`SELECT schedule_eligible(ARRAY[$1::uuid])`, id)
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)

	var status string
	must(t, e.db.Pool.QueryRow(e.ctx, `SELECT status::text FROM resources WHERE id = $1`, id).Scan(&status))
	if status != `{"x": 1}` {
		t.Errorf("status = %s, want the echoed spec", status)
	}
	if c, _ := gotConfig.Load().(string); c != `{"region":"eu","size":2}` {
		t.Errorf("provider saw config %s, want the effective (merged) config", c)
	}

	seen := rec.seen()
	if len(seen) != 1 {
		t.Fatalf("provider saw %d deliveries, want 1", len(seen))
	}
	dl := seen[0]
	env := dl.env
	var taskID string
	must(t, e.db.Pool.QueryRow(e.ctx, `SELECT last_task_id FROM resources WHERE id = $1`, id).Scan(&taskID))
	want := webhooksdk.Envelope{
		Type: "task", TaskID: taskID, ClaimEpoch: 1, Attempt: 1, TaskType: "reconcile", Reaction: "work",
		Trigger: "specChange", Kind: "leaf", KindVersion: 1,
		Resource: &webhooksdk.Resource{ID: id, Kind: "leaf", KindVersion: 1, Name: "a", Labels: map[string]string{},
			Spec: json.RawMessage(`{"x":1}`), Generation: 1, Phase: "Reconciling"},
		Config: json.RawMessage(`{"region":"eu","size":2}`), Bundle: []byte{1, 2},
	}
	got := env
	got.Deadline, got.Callback = time.Time{}, nil
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("envelope (-want +got):\n%s", d)
	}
	if until := time.Until(env.Deadline); until < 20*time.Second || until > 31*time.Second {
		t.Errorf("deadline in %s, want ~30s (task_deadline_secs)", until)
	}
	if env.Callback == nil || env.Callback.URL != e.cbURL+"/v1/tasks/"+taskID+"/outcome" || env.Callback.Token == "" {
		t.Errorf("callback = %+v, want %s/v1/tasks/%s/outcome with a token", env.Callback, e.cbURL, taskID)
	}

	// Headers, and the signature checked by hand: HMAC-SHA256 over
	// "id.timestamp.body" with the secret's base64-decoded key.
	if got, want := dl.header.Get("Webhook-Id"), "msg_"+taskID+"_1"; got != want {
		t.Errorf("webhook-id = %q, want %q", got, want)
	}
	if ua := dl.header.Get("User-Agent"); ua != "converge-dispatch/test" {
		t.Errorf("user-agent = %q", ua)
	}
	if ct := dl.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type = %q", ct)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s.secret, "whsec_"))
	must(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(dl.header.Get("Webhook-Id") + "." + dl.header.Get("Webhook-Timestamp") + "."))
	mac.Write(dl.body)
	if sig := dl.header.Get("Webhook-Signature"); sig != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
		t.Errorf("webhook-signature %q does not match an independent HMAC", sig)
	}

	if ok, why := d.Registry().PairStatus("leaf", 1); !ok {
		t.Errorf("PairStatus(leaf, 1) = not ready: %s", why)
	}
	if ok, why := d.Registry().PairStatus("nope", 1); ok || !strings.Contains(why, "no endpoint is registered") {
		t.Errorf("PairStatus(nope, 1) = %v, %q", ok, why)
	}
	if v := metricValue(t, e, "converge_dispatch_deliveries_total", map[string]string{"endpoint": "leaves", "result": "ok"}); v != 1 {
		t.Errorf("deliveries_total{ok} = %v, want 1", v)
	}
	if _, ok := metricFamily(t, e, "converge_dispatch_endpoint_breaker_state"); !ok {
		t.Error("no endpoint_breaker_state metric")
	}
	e.checkNoDoubleApply()
}

func TestNoContentIsSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.apply("leaf", "a", map[string]any{})
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)
}

// TestAsyncCallback: the SDK answers 202 and delivers the outcome to the
// callback API, which applies it.
func TestAsyncCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	e.sdk(s, []webhooksdk.Option{webhooksdk.WithSyncBudget(0)}, newProvider("leaf",
		func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
			t := time.NewTimer(50 * time.Millisecond) // slower than the zero sync budget
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return webhooksdk.Outcome{}, ctx.Err()
			}
			return echo(ctx, req)
		}))
	e.dispatcher(dispatch.Config{})
	e.listen()
	for _, n := range []string{"a", "b", "c"} {
		e.apply("leaf", n, map[string]any{"n": n})
	}
	e.waitReady("leaf", 3, 20*time.Second)
	if v := metricValue(t, e, "converge_dispatch_deliveries_total", map[string]string{"endpoint": "leaves", "result": "accepted"}); v != 3 {
		t.Errorf("deliveries_total{accepted} = %v, want 3", v)
	}
	// A callback is counted once its completion returned, a moment after
	// the commit that made its resource Ready.
	applied := func() float64 {
		return metricValue(t, e, "converge_dispatch_callbacks_total", map[string]string{"result": "applied"})
	}
	deadline := time.Now().Add(5 * time.Second)
	for applied() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v := applied(); v != 3 {
		t.Errorf("callbacks_total{applied} = %v, want 3", v)
	}
	e.checkNoDoubleApply()
}

// TestAsyncTimeout: an endpoint that answers 202 and never calls back gets
// the task recorded as a transient failure when the lease lapses; the retry
// (a new claim, attempt 2) succeeds.
func TestAsyncTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 1})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var calls atomic.Int32
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusAccepted) // ...and never call back
			return
		}
		_, _ = w.Write(resultBody(env, `{"ok":true}`))
	})}
	s.set(rec)
	e.dispatcher(dispatch.Config{CallbackGrace: 300 * time.Millisecond})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)

	if n := e.count(`SELECT count(*) FROM resource_events WHERE resource_id = $1 AND type = 'failed'
		AND message LIKE '%async task timed out without a callback%'`, id); n != 1 {
		t.Errorf("%d 'async task timed out' failures recorded, want 1", n)
	}
	seen := rec.seen()
	if len(seen) != 2 || seen[1].env.Attempt != 2 || seen[1].env.ClaimEpoch != 2 {
		t.Fatalf("deliveries = %d; want a retry as attempt 2 of claim 2", len(seen))
	}
	if v := metricValue(t, e, "converge_dispatch_async_timeouts_total", nil); v != 1 {
		t.Errorf("async_timeouts_total = %v, want 1", v)
	}
	// The delivery log is written beside the completion, so a moment after it.
	waitFor(t, 5*time.Second, "one async_timeout row in the delivery log", func() bool {
		return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'async_timeout' AND endpoint = 'leaves'`, id) == 1
	})
}

// TestLateCallbackOfAbandonedClaimIsSuperseded: the reproduction
// over real HTTP. An endpoint with request_timeout_secs 1 holds epoch 1's
// request past the timeout; the dispatcher records the timeout in the
// provider's place and the task is claimed again at epoch 2 (answered 202).
// Epoch 1's Result, posted late to its callback, was never applied: 409,
// not 200 duplicate, before and after epoch 2's outcome is applied. A
// provider repeating a Result that was applied — here a transient failure
// it reported itself, which re-pends the task just as the timeout did —
// still gets 200 duplicate, recognised from the resource it was applied to.
func TestLateCallbackOfAbandonedClaimIsSuperseded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, timeoutSecs: 1})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		if decodeEnvelope(r).ClaimEpoch == 1 {
			select { // past the request timeout: the dispatcher gives up
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		w.WriteHeader(http.StatusAccepted) // the Result comes by callback, when the test posts it
	})}
	s.set(rec)
	e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})

	// delivery waits for the delivery of claim epoch.
	delivery := func(claimEpoch int64) webhooksdk.Envelope {
		t.Helper()
		var env webhooksdk.Envelope
		waitFor(t, 20*time.Second, fmt.Sprintf("the delivery of claim %d", claimEpoch), func() bool {
			for _, d := range rec.seen() {
				if d.env.ClaimEpoch == claimEpoch {
					env = d.env
					return true
				}
			}
			return false
		})
		return env
	}
	first := delivery(1)
	second := delivery(2)
	// The delivery log is written beside the completion, so a moment after it.
	waitFor(t, 5*time.Second, "one timeout row in the delivery log", func() bool {
		return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND claim_epoch = 1 AND classification = 'timeout'`, id) == 1
	})

	late := webhooksdk.Result{TaskID: first.TaskID, ClaimEpoch: 1, Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"late":true}`)}}
	expect := func(env webhooksdk.Envelope, res webhooksdk.Result, wantCode int, wantResult, why string) {
		t.Helper()
		code, result := postCallback(t, env, res)
		if code != wantCode || result != wantResult {
			t.Errorf("%s: callback answered %d %q, want %d %q", why, code, result, wantCode, wantResult)
		}
	}
	expect(first, late, http.StatusConflict, "", "claim 1's late Result while claim 2 runs")
	if code := postHeartbeat(t, first); code != http.StatusConflict {
		t.Errorf("claim 1's heartbeat answered %d, want 409", code)
	}

	// The provider of claim 2 reports a transient failure of its own.
	quota := webhooksdk.Result{TaskID: second.TaskID, ClaimEpoch: 2, Error: &webhooksdk.Error{Message: "quota exhausted"}}
	expect(second, quota, http.StatusOK, "applied", "claim 2's Result")
	expect(second, quota, http.StatusOK, "duplicate", "claim 2's Result again, at once")
	waitFor(t, 20*time.Second, "claim 2's failure to be applied", func() bool {
		return e.count(`SELECT count(*) FROM resource_events WHERE resource_id = $1 AND type = 'failed' AND message LIKE '%quota exhausted%'`, id) == 1
	})
	expect(second, quota, http.StatusOK, "duplicate", "claim 2's Result again, once applied")
	expect(first, late, http.StatusConflict, "", "claim 1's late Result once claim 2's is applied")
	e.checkNoDoubleApply()
}

// postCallback posts res to env's callback as a provider does, and returns
// the status and, for a 200, its "result".
func postCallback(t *testing.T, env webhooksdk.Envelope, res webhooksdk.Result) (int, string) {
	t.Helper()
	body, err := json.Marshal(res)
	must(t, err)
	resp := postWithToken(t, env.Callback.URL, env.Callback.Token, body)
	defer resp.Body.Close()
	var out struct {
		Result string `json:"result"`
	}
	if resp.StatusCode == http.StatusOK {
		must(t, json.NewDecoder(resp.Body).Decode(&out))
	}
	return resp.StatusCode, out.Result
}

// postHeartbeat posts a heartbeat for env's claim and returns the status.
func postHeartbeat(t *testing.T, env webhooksdk.Envelope) int {
	t.Helper()
	body, err := json.Marshal(map[string]any{"task_id": env.TaskID, "claim_epoch": env.ClaimEpoch})
	must(t, err)
	resp := postWithToken(t, strings.TrimSuffix(env.Callback.URL, "/outcome")+"/heartbeat", env.Callback.Token, body)
	resp.Body.Close()
	return resp.StatusCode
}

func postWithToken(t *testing.T, url, token string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	return resp
}

// TestTerminalOnlyFromTheBody: an error result pins the resource Failed only
// when the body says "terminal": true; the attempt is recorded.
func TestTerminalOnlyFromTheBody(t *testing.T) {
	t.Parallel()
	rows := failLeaf(t, nil, 0, "cidr overlaps an existing vpc")
	if len(rows) != 1 || rows[0].Classification != "task_error" || rows[0].HTTPStatus != 200 || !strings.Contains(rows[0].Excerpt, "terminal: cidr overlaps") {
		t.Fatalf("deliveries = %+v, want the terminal task error", rows)
	}
}

// TestAsyncFailureRecorded: a failure the provider reports by callback is a
// failed attempt of the delivering endpoint (callback_error), against the
// delivery's 202.
func TestAsyncFailureRecorded(t *testing.T) {
	t.Parallel()
	// Past the zero sync budget: answered 202, then by callback.
	rows := failLeaf(t, []webhooksdk.Option{webhooksdk.WithSyncBudget(0)}, 20*time.Millisecond, "quota exhausted in eu-west-1")
	if len(rows) != 1 || rows[0].Endpoint != "leaves" || rows[0].Classification != "callback_error" || rows[0].HTTPStatus != http.StatusAccepted ||
		rows[0].Attempt != 1 || rows[0].ClaimEpoch != 1 || !strings.Contains(rows[0].Excerpt, "quota exhausted") {
		t.Fatalf("deliveries = %+v, want the reported failure against the 202 delivery", rows)
	}
}

// failedDeliveries returns the resource's failed attempts, newest first.
func (e *env) failedDeliveries(id string) ([]store.Delivery, error) {
	page, err := e.st.ListDeliveries(e.ctx, store.DeliveryFilter{ResourceID: id, Failed: true, Limit: 10})
	return page.Items, err
}

// awaitFailedDeliveries is failedDeliveries once it holds n rows or 5 s
// have passed: the delivery log is written beside the completion or
// release of each attempt, so a moment after it.
func (e *env) awaitFailedDeliveries(t *testing.T, id string, n int) []store.Delivery {
	t.Helper()
	var rows []store.Delivery
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		rows, err = e.failedDeliveries(id)
		must(t, err)
		if len(rows) >= n || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failLeaf runs one leaf against a webhooksdk provider (opts) whose Work
// takes delay and fails terminally with msg; it returns the failed
// deliveries recorded for the leaf once it is Failed and its failure is
// logged (the delivery log is written beside the completion that applies
// the failure, so a moment after it).
func failLeaf(t *testing.T, opts []webhooksdk.Option, delay time.Duration, msg string) []store.Delivery {
	t.Helper()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	e.sdk(s, opts, newProvider("leaf", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		time.Sleep(delay)
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New(msg))
	}))
	e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	e.waitPhase("leaf", "a", "Failed", 20*time.Second)
	return e.awaitFailedDeliveries(t, id, 1)
}

// TestDeadlineExceeded: a provider slower than the task deadline is cut off
// at the deadline; the task is recorded transient and retried.
func TestDeadlineExceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 1})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var calls atomic.Int32
	var firstTook atomic.Int64
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		if calls.Add(1) == 1 {
			start := time.Now()
			slow := time.NewTimer(10 * time.Second) // far past the 1s deadline
			defer slow.Stop()
			select {
			case <-slow.C:
			case <-r.Context().Done(): // the dispatcher gave up
			}
			firstTook.Store(int64(time.Since(start)))
			return
		}
		_, _ = w.Write(resultBody(env, `{"ok":true}`))
	}))
	e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)
	if took := time.Duration(firstTook.Load()); took > 3*time.Second {
		t.Errorf("the slow request ran %s; the dispatcher should cut it at the 1s deadline", took)
	}
	if n := e.count(`SELECT count(*) FROM resource_events WHERE resource_id = $1 AND type = 'failed' AND message LIKE '%transient%deadline%'`, id); n != 1 {
		t.Errorf("%d transient deadline failures recorded, want 1", n)
	}
	// The delivery log is written beside the completion, so a moment after it.
	waitFor(t, 5*time.Second, "one deadline row in the delivery log", func() bool {
		return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'deadline' AND http_status IS NULL`, id) == 1
	})
}

// TestServerErrorsThenOK: 500 three times, then OK; converges, with every
// failed attempt in endpoint_deliveries.
func TestServerErrorsThenOK(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	h := e.sdk(s, nil, newProvider("leaf", echo))
	var calls atomic.Int32
	rec := &recorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 {
			http.Error(w, "boom: the database is on fire", http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	})}
	s.set(rec)
	e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{"v": 1})
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)

	rows := e.awaitFailedDeliveries(t, id, 3)
	if len(rows) != 3 {
		t.Fatalf("%d failed deliveries recorded, want 3: %+v", len(rows), rows)
	}
	for i, r := range rows {
		if r.HTTPStatus != 500 || r.Classification != "server_error" || r.Endpoint != "leaves" || r.Attempt != 3-i ||
			!strings.Contains(r.Excerpt, "database is on fire") {
			t.Errorf("delivery %d = %+v", i, r)
		}
	}
	if seen := rec.seen(); len(seen) != 4 || seen[3].env.Attempt != 4 {
		t.Errorf("the success was attempt %d of %d deliveries, want attempt 4", seen[len(seen)-1].env.Attempt, len(seen))
	}
	e.checkNoDoubleApply()
}

// TestRateLimited: 429 with Retry-After: 1 is honoured (the gap between the
// two deliveries is measured) and burns no attempt.
func TestRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var calls atomic.Int32
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write(resultBody(env, `{"ok":true}`))
	})}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the endpoint to back off", func() bool {
		ok, why := d.Registry().PairStatus("leaf", 1)
		return !ok && strings.Contains(why, "backs off")
	})
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)

	seen := rec.seen()
	if len(seen) != 2 {
		t.Fatalf("%d deliveries, want 2", len(seen))
	}
	if gap := seen[1].at.Sub(seen[0].at); gap < 950*time.Millisecond {
		t.Errorf("retried %s after the 429, want >= ~1s (Retry-After: 1)", gap)
	}
	if seen[1].env.Attempt != 1 || seen[1].env.ClaimEpoch != 2 {
		t.Errorf("retry was attempt %d of claim %d, want attempt 1 (not burnt) of claim 2", seen[1].env.Attempt, seen[1].env.ClaimEpoch)
	}
	// The delivery log is written beside the completion, so a moment after it.
	waitFor(t, 5*time.Second, "one rate_limited row in the delivery log", func() bool {
		return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'rate_limited' AND http_status = 429`, id) == 1
	})
	if n := e.count(`SELECT count(*) FROM resource_events WHERE resource_id = $1 AND type = 'failed'`, id); n != 0 {
		t.Errorf("a 429 recorded %d failures on the resource, want none", n)
	}
}

// TestGoneDisablesEndpoint: 410 disables the endpoint and releases the task;
// re-applying the endpoint enables it again and the task goes through.
func TestGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var gone atomic.Bool
	gone.Store(true)
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		if gone.Load() {
			http.Error(w, "this endpoint was retired", http.StatusGone)
			return
		}
		_, _ = w.Write(resultBody(env, `{"ok":true}`))
	}))
	d := e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})

	var ep store.Endpoint
	waitFor(t, 10*time.Second, "the endpoint to be disabled", func() bool {
		var err error
		ep, err = e.st.GetEndpoint(e.ctx, "leaves")
		must(t, err)
		return !ep.Enabled
	})
	if !strings.Contains(ep.DisabledReason, "410 Gone") {
		t.Errorf("disabled_reason = %q", ep.DisabledReason)
	}
	waitFor(t, 10*time.Second, "the task to be released", func() bool {
		return e.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND state = 'pending' AND attempts = 0`, id) == 1
	})
	if ok, why := d.Registry().PairStatus("leaf", 1); ok || !strings.Contains(why, "disabled") {
		t.Errorf("PairStatus = %v, %q; want parked because the endpoint is disabled", ok, why)
	}
	if p := e.phase("leaf", "a"); p != "Reconciling" {
		t.Errorf("phase = %s, want Reconciling (parked)", p)
	}

	gone.Store(false)
	_, res, _, err := e.st.PutEndpoint(e.ctx, e.box, store.PutEndpointParams{Name: "leaves",
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetHTTPS, URL: s.URL + "/converge"}})
	must(t, err)
	if res != store.ApplyConfigured {
		t.Fatalf("re-apply = %s", res)
	}
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)
}

// TestUnhealthyKindParks: one kind's endpoint reports it unready; its
// resources park (and PairStatus says why) while another kind converges;
// when it turns ready they converge too.
func TestUnhealthyKindParks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("alpha", model.Policy{})
	e.kind("beta", model.Policy{})
	sa := e.endpoint("alphas", endpointOpts{kinds: []string{"alpha"}, health: true, healthy: 1, interval: 1})
	sb := e.endpoint("betas", endpointOpts{kinds: []string{"beta"}, health: true, healthy: 1, interval: 1})
	var alphaWork atomic.Int32
	alpha := newProvider("alpha", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		alphaWork.Add(1)
		return echo(ctx, req)
	})
	alpha.ready.Store(false)
	e.sdk(sa, nil, alpha)
	e.sdk(sb, nil, newProvider("beta", echo))
	d := e.dispatcher(dispatch.Config{PendingEvery: 100 * time.Millisecond})
	e.listen()
	for _, n := range []string{"1", "2", "3"} {
		e.apply("alpha", "a"+n, map[string]any{})
		e.apply("beta", "b"+n, map[string]any{})
	}
	e.waitReady("beta", 3, 20*time.Second)
	ok, why := d.Registry().PairStatus("alpha", 1)
	if ok || !strings.Contains(why, "reports alpha/1 not ready") {
		t.Fatalf("PairStatus(alpha) = %v, %q; want parked because its endpoint reports it unready", ok, why)
	}
	if n := e.count(`SELECT count(*) FROM resources WHERE kind = 'alpha' AND phase = 'Reconciling'`); n != 3 || alphaWork.Load() != 0 {
		t.Fatalf("%d alpha Reconciling, %d alpha deliveries; want 3 parked, none delivered", n, alphaWork.Load())
	}
	waitFor(t, 5*time.Second, "pending_tasks{alpha} = 3", func() bool {
		return metricValue(t, e, "converge_dispatch_pending_tasks", map[string]string{"kind": "alpha", "kind_version": "1"}) == 3
	})
	// Parked tasks are claimable and wait: their age shows it.
	waitFor(t, 5*time.Second, "oldest_pending_seconds{alpha} > 0", func() bool {
		return metricValue(t, e, "converge_dispatch_oldest_pending_seconds", map[string]string{"kind": "alpha", "kind_version": "1"}) > 0
	})

	alpha.ready.Store(true)
	e.waitReady("alpha", 3, 20*time.Second)
	if ok, why := d.Registry().PairStatus("alpha", 1); !ok {
		t.Errorf("PairStatus(alpha) after recovery = %q", why)
	}
}

// TestClaimedTasksGauge: while a provider holds its deliveries, the
// recount shows them as claimed (not pending) for their kind, and the
// claims counter has counted each; once they finish the claimed series
// goes.
func TestClaimedTasksGauge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("held", model.Policy{})
	s := e.endpoint("holder", endpointOpts{kinds: []string{"held"}, maxConcurrency: 8})
	release := make(chan struct{})
	e.sdk(s, nil, newProvider("held", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return echo(ctx, req)
	}))
	e.dispatcher(dispatch.Config{PendingEvery: 100 * time.Millisecond})
	e.listen()
	for _, n := range []string{"1", "2", "3"} {
		e.apply("held", "h"+n, map[string]any{})
	}
	held := map[string]string{"kind": "held", "kind_version": "1"}
	waitFor(t, 10*time.Second, "claimed_tasks{held} = 3", func() bool {
		return metricValue(t, e, "converge_dispatch_claimed_tasks", held) == 3
	})
	if v := metricValue(t, e, "converge_dispatch_claims_total", held); v < 3 {
		t.Errorf("claims_total{held} = %v, want at least 3", v)
	}
	if _, ok := metricFamily(t, e, "converge_dispatch_pending_tasks"); ok {
		t.Errorf("pending_tasks has a series while every task is claimed")
	}
	close(release)
	e.waitReady("held", 3, 20*time.Second)
	waitFor(t, 10*time.Second, "the claimed_tasks series to go", func() bool {
		_, ok := metricFamily(t, e, "converge_dispatch_claimed_tasks")
		return !ok
	})
}

// TestFailoverNoDoubleApply: two endpoints serve one kind; one dies
// mid-run; everything converges through the other, and no outcome is
// applied twice.
func TestFailoverNoDoubleApply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s1 := e.endpoint("one", endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 8})
	s2 := e.endpoint("two", endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 8})
	slow := func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		t := time.NewTimer(2 * time.Millisecond)
		defer t.Stop()
		<-t.C
		return echo(ctx, req)
	}
	r1 := &recorder{next: e.sdk(s1, nil, newProvider("leaf", slow))}
	s1.set(r1)
	r2 := &recorder{next: e.sdk(s2, nil, newProvider("leaf", slow))}
	s2.set(r2)
	e.dispatcher(dispatch.Config{})
	e.listen()
	const n = 300
	e.applyMany("leaf", n)
	waitFor(t, 30*time.Second, "endpoint one to serve some tasks", func() bool { return len(r1.seen()) >= 20 })
	s1.Listener.Close() // new connections are refused
	s1.CloseClientConnections()
	e.waitReady("leaf", n, 60*time.Second)
	t.Logf("endpoint one served %d deliveries before dying, two %d", len(r1.seen()), len(r2.seen()))
	if len(r2.seen()) == 0 {
		t.Error("endpoint two served nothing")
	}
	e.checkNoDoubleApply()
}

// TestMaxConcurrency: an endpoint never has more than max_concurrency
// requests in flight (the provider counts).
func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 3})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		t := time.NewTimer(15 * time.Millisecond)
		defer t.Stop()
		<-t.C
		_, _ = w.Write(resultBody(env, `{}`))
	})}
	s.set(rec)
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.applyMany("leaf", 60)
	e.waitReady("leaf", 60, 30*time.Second)
	if p := rec.peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak concurrency %d, want at most max_concurrency (3) and more than 1", p)
	}
}

// TestKindCapAcrossEndpoints: a kind's max_inflight holds across all the
// endpoints serving it.
func TestKindCapAcrossEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{MaxInflight: 4})
	shared := &recorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		t := time.NewTimer(15 * time.Millisecond)
		defer t.Stop()
		<-t.C
		_, _ = w.Write(resultBody(env, `{}`))
	})}
	for _, n := range []string{"one", "two"} {
		s := e.endpoint(n, endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 10})
		s.set(shared)
	}
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.applyMany("leaf", 60)
	e.waitReady("leaf", 60, 30*time.Second)
	if p := shared.peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak concurrency across both endpoints %d, want at most max_inflight (4)", p)
	}
}

// TestSSRF: outside dev mode a loopback target is refused when the
// registry loads it, and a name that resolves to loopback (DNS rebinding)
// is refused at dial time; nothing reaches the server.
func TestSSRF(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("literal", model.Policy{})
	e.kind("named", model.Policy{})
	var hits atomic.Int32
	lit := e.endpoint("literal", endpointOpts{kinds: []string{"literal"}})
	lit.set(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	named := e.endpoint("named", endpointOpts{kinds: []string{"named"}})
	named.set(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	// The name passes registration checks; it resolves to 127.0.0.1.
	rebind := strings.Replace(named.URL, "127.0.0.1", "provider.example.net", 1) + "/converge"
	_, _, _, err := e.st.PutEndpoint(e.ctx, e.box, store.PutEndpointParams{Name: "named",
		Kinds: []store.EndpointKind{{Kind: "named", KindVersion: 1}}, Target: store.EndpointTarget{Type: "https", URL: rebind}})
	must(t, err)
	resolver, queries := egresstest.Resolver(netip.MustParseAddr("127.0.0.1"))
	d := e.dispatcher(dispatch.Config{AllowHTTP: true, Resolver: resolver}) // not dev mode
	e.listen()
	e.apply("literal", "a", map[string]any{})
	id := e.apply("named", "b", map[string]any{})

	waitFor(t, 10*time.Second, "a blocked dial to be recorded", func() bool {
		return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'blocked'`, id) > 0
	})
	if queries.Load() == 0 {
		t.Fatal("the name was never resolved")
	}
	ok, why := d.Registry().PairStatus("literal", 1)
	if ok || !strings.Contains(why, "loopback") {
		t.Errorf("PairStatus(literal) = %v, %q; want refused as loopback", ok, why)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached a loopback server", hits.Load())
	}
	if p := e.phase("literal", "a"); p != "Reconciling" {
		t.Errorf("literal/a is %s, want parked", p)
	}
}

// TestRedirectNotFollowed: a 3xx is a failure, recorded, never followed.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	var followed atomic.Int32
	dest := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	t.Cleanup(dest.Close)
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var calls atomic.Int32
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		if calls.Add(1) == 1 {
			http.Redirect(w, r, dest.URL+"/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		_, _ = w.Write(resultBody(env, `{}`))
	}))
	e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)
	if followed.Load() != 0 {
		t.Errorf("the redirect was followed %d times", followed.Load())
	}
	rows := e.awaitFailedDeliveries(t, id, 1)
	if len(rows) != 1 || rows[0].Classification != "redirect" || rows[0].HTTPStatus != 307 {
		t.Fatalf("deliveries = %+v, want one redirect failure", rows)
	}
}

// TestCircuitBreaker: consecutive failures open the breaker (the kind
// parks and says why); after the cooldown a trial that succeeds closes it.
func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	var healthy atomic.Bool
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		if !healthy.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_, _ = w.Write(resultBody(env, `{}`))
	}))
	d := e.dispatcher(dispatch.Config{Breaker: breaker.Config{Failures: 3, Cooldown: 500 * time.Millisecond}})
	e.listen()
	e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the breaker to open", func() bool {
		st, _ := d.Registry().EndpointStatus("leaves")
		return st.BreakerState == "open"
	})
	if ok, why := d.Registry().PairStatus("leaf", 1); ok || !strings.Contains(why, "circuit breaker open") {
		t.Errorf("PairStatus = %v, %q; want parked by the open breaker", ok, why)
	}
	if v := metricValue(t, e, "converge_dispatch_endpoint_breaker_state", map[string]string{"endpoint": "leaves"}); v != 2 {
		t.Errorf("endpoint_breaker_state = %v, want 2 (open)", v)
	}
	healthy.Store(true)
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)
	st, _ := d.Registry().EndpointStatus("leaves")
	if st.BreakerState != "closed" {
		t.Errorf("breaker %s after a successful trial, want closed", st.BreakerState)
	}
}

// TestSecretRotation: during the grace window every delivery carries both
// signatures (a provider holding either secret accepts it); after it, only
// the new one.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	oldSecret := s.secret
	rec := &recorder{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(resultBody(decodeEnvelope(r), `{}`))
	})}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{})
	e.listen()

	newSecret, _, err := e.st.RotateEndpointSecret(e.ctx, e.box, "leaves", time.Hour)
	must(t, err)
	must(t, d.Registry().Refresh(e.ctx))
	e.apply("leaf", "during", map[string]any{})
	e.waitPhase("leaf", "during", "Ready", 20*time.Second)

	e.exec(`UPDATE endpoints SET prev_secret_expires = now() - interval '1 second'`)
	must(t, d.Registry().Refresh(e.ctx))
	e.apply("leaf", "after", map[string]any{})
	e.waitPhase("leaf", "after", "Ready", 20*time.Second)

	verifies := func(secret string, dl delivery) bool {
		sec, err := webhooksdk.ParseSecret(secret)
		must(t, err)
		return webhooksdk.Verify([]webhooksdk.Secret{sec}, dl.header, dl.body, dl.at, 0) == nil
	}
	for _, dl := range rec.seen() {
		n := len(strings.Fields(dl.header.Get("Webhook-Signature")))
		switch dl.env.Resource.Name {
		case "during":
			if n != 2 || !verifies(oldSecret, dl) || !verifies(newSecret.Reveal(), dl) {
				t.Errorf("during the grace window: %d signatures, old ok %v, new ok %v; want both", n,
					verifies(oldSecret, dl), verifies(newSecret.Reveal(), dl))
			}
		case "after":
			if n != 1 || verifies(oldSecret, dl) || !verifies(newSecret.Reveal(), dl) {
				t.Errorf("after the window: %d signatures; want only the new secret's", n)
			}
		}
	}
}

// TestStopDrains: Stop waits for a delivery in flight and completes its
// result before returning.
func TestStopDrains(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	release := make(chan struct{})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		<-release
		_, _ = w.Write(resultBody(env, `{"drained":true}`))
	})}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the delivery to start", func() bool { return len(rec.seen()) == 1 })

	stopped := make(chan struct{})
	go func() {
		d.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned with a delivery in flight")
	default:
	}
	close(release)
	<-stopped
	// The result was completed before Stop returned: its outcome is applied
	// (the task gone), or, were it a composition, queued in the outbox.
	if n := e.count(`SELECT count(*) FROM work_queue w WHERE w.resource_id = $1 AND NOT EXISTS (SELECT 1 FROM work_outbox o
			WHERE o.shard_id = w.shard_id AND o.task_id = w.task_id AND o.claim_epoch = w.claim_epoch)`, id); n != 0 {
		t.Fatalf("after Stop the task is not completed")
	}
	e.waitPhase("leaf", "a", "Ready", 10*time.Second)
}

// TestStopDrainTimeout: a delivery outliving the drain timeout is cancelled
// and its task released, not failed.
func TestStopDrainTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{DrainTimeout: 200 * time.Millisecond})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the delivery to start", func() bool { return len(rec.seen()) == 1 })
	start := time.Now()
	d.Stop()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop took %s with a 200ms drain timeout", took)
	}
	if n := e.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND state = 'pending' AND attempts = 0`, id); n != 1 {
		t.Fatal("the abandoned task was not released without burning an attempt")
	}
}

// TestAsyncOutlivesDispatchLease: an accepted task whose callback comes
// after the dispatch lease would have lapsed keeps its claim (the lease is
// extended to the async lease), and the provider's late callback — posted
// here by hand with the envelope's URL and token — is applied.
func TestAsyncOutlivesDispatchLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })}
	s.set(rec)
	e.dispatcher(dispatch.Config{Lease: 3 * time.Second, AsyncLease: time.Minute})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the delivery", func() bool { return len(rec.seen()) == 1 })
	env := rec.seen()[0].env

	waitFor(t, 10*time.Second, "the lease to be extended to the async lease", func() bool {
		return e.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND state = 'claimed'
			AND lease_until > now() + interval '30 seconds'`, id) == 1
	})
	body := resultBody(env, `{"late":true}`)
	post := func(url string) int {
		req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, url, strings.NewReader(string(body)))
		must(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+env.Callback.Token)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	hb, err := webhooksdk.HeartbeatURL(env.Callback.URL)
	must(t, err)
	if code := post(hb); code != http.StatusOK {
		t.Fatalf("heartbeat = %d", code)
	}
	if code := post(env.Callback.URL); code != http.StatusOK {
		t.Fatalf("callback = %d", code)
	}
	e.waitPhase("leaf", "a", "Ready", 10*time.Second)
	if code := post(env.Callback.URL); code != http.StatusOK {
		t.Fatalf("a repeated callback = %d, want 200 (duplicate)", code)
	}
}

// TestStartStop: Stop before Start, twice, and a restart are all safe.
func TestStartStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d, err := dispatch.New(dispatch.Config{SecretBox: e.box, TokenKey: e.tokenKey, CallbackBaseURL: e.cbURL, DevMode: true}, e.eng, e.st, dispatch.Wakeups{})
	must(t, err)
	d.Stop()
	for range 3 {
		must(t, d.Start(e.ctx))
		d.Stop()
		d.Stop()
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, cfg := range map[string]dispatch.Config{
		"no secret box":   {TokenKey: e.tokenKey, CallbackBaseURL: e.cbURL},
		"short token key": {SecretBox: e.box, TokenKey: []byte("short"), CallbackBaseURL: e.cbURL},
		"no callback url": {SecretBox: e.box, TokenKey: e.tokenKey},
		"relative url":    {SecretBox: e.box, TokenKey: e.tokenKey, CallbackBaseURL: "/cb"},
		"tiny lease":      {SecretBox: e.box, TokenKey: e.tokenKey, CallbackBaseURL: e.cbURL, Lease: time.Second},
	} {
		if _, err := dispatch.New(cfg, e.eng, e.st, dispatch.Wakeups{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestStopKeepsAcceptedClaims: Stop gives accepted tasks their async lease
// before returning, so a callback that lands after the pod is gone (on
// another pod) still finds the claim.
func TestStopKeepsAcceptedClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })}
	s.set(rec)
	d := e.dispatcher(dispatch.Config{Lease: 30 * time.Second, AsyncLease: 10 * time.Minute})
	e.listen()
	id := e.apply("leaf", "a", map[string]any{})
	waitFor(t, 10*time.Second, "the delivery", func() bool {
		return metricValue(t, e, "converge_dispatch_deliveries_total", map[string]string{"result": "accepted"}) == 1
	})
	d.Stop()
	if n := e.count(`SELECT count(*) FROM work_queue WHERE resource_id = $1 AND state = 'claimed'
		AND lease_until > now() + interval '5 minutes'`, id); n != 1 {
		t.Fatal("after Stop the accepted task does not hold its async lease")
	}
}

// TestClaimsBoundedWhileCompletionsStall: when the database stops recording
// results (here a lock holds the resources table, whose rows every
// completion locks before it writes the outcome), the dispatcher stops
// claiming at its endpoints' capacity plus the completer's queue, instead
// of claiming everything pending while finished deliveries pile up in
// memory. The lock is taken after the apply and before the dispatcher
// starts: a claim reads resources but locks none, so claims go on.
func TestClaimsBoundedWhileCompletionsStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 2})
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(resultBody(decodeEnvelope(r), `{}`))
	}))
	const batch, pending = 8, 300
	e.applyMany("leaf", pending)
	tx, err := e.db.Pool.Begin(e.ctx)
	must(t, err)
	defer tx.Rollback(e.ctx) //nolint:errcheck // committed below; a failed test's rollback needs no check
	_, err = tx.Exec(e.ctx, `LOCK TABLE resources IN EXCLUSIVE MODE`)
	must(t, err)

	e.dispatcher(dispatch.Config{BatchSize: batch})
	e.listen()
	// The bound: 2 slots and one claim tracked, the completer's queue (2
	// batches), the batch it gathered and the two it is blocked writing.
	const bound = 2 + batch + 2*batch + batch + 2*batch
	claimed := func() int { return e.count(`SELECT count(*) FROM work_queue WHERE state = 'claimed'`) }
	waitFor(t, 10*time.Second, "the dispatcher to claim", func() bool { return claimed() >= batch })
	waitFor(t, 10*time.Second, "a completion to wait on the lock", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	time.Sleep(2 * time.Second) // a dispatcher without the bound claims on
	if n := claimed(); n > bound {
		t.Fatalf("%d tasks claimed while no result could be recorded, want at most %d", n, bound)
	}
	if n := e.count(`SELECT count(*) FROM work_queue`); n != pending {
		t.Fatalf("%d work rows while no result could be recorded, want all %d", n, pending)
	}
	must(t, tx.Commit(e.ctx))
	e.waitReady("leaf", pending, 60*time.Second)
}

// TestCompletionWritesOverlap: a completion write blocked in the database
// (here on a row lock its apply needs) does not hold back the results
// behind it: the completer writes another batch meanwhile.
func TestCompletionWritesOverlap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(resultBody(decodeEnvelope(r), `{}`))
	})}
	s.set(rec)
	a := e.apply("leaf", "a", map[string]any{})
	tx, err := e.db.Pool.Begin(e.ctx)
	must(t, err)
	defer tx.Rollback(e.ctx) //nolint:errcheck // committed below; a failed test's rollback needs no check
	_, err = tx.Exec(e.ctx, `SELECT 1 FROM resources WHERE id = $1 FOR UPDATE`, a)
	must(t, err)
	e.dispatcher(dispatch.Config{BatchSize: 1})
	e.listen()
	waitFor(t, 10*time.Second, "a's result to be written", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	e.apply("leaf", "b", map[string]any{})
	e.waitPhase("leaf", "b", "Ready", 10*time.Second) // while a's write waits
	must(t, tx.Commit(e.ctx))
	e.waitPhase("leaf", "a", "Ready", 10*time.Second)
}

// TestCompletionBatchCountsTasks: a completion batch is cut at BatchSize
// tasks; the delivery-log record each attempt adds does not count towards
// it (counted, it halved every completion write).
func TestCompletionBatchCountsTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	s.set(verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(resultBody(decodeEnvelope(r), `{}`))
	}))
	const batch = 8
	// No timed flush: only a full batch is written.
	e.dispatcher(dispatch.Config{BatchSize: batch, FlushEvery: time.Hour})
	e.listen()
	e.applyMany("leaf", 2*batch)
	e.waitReady("leaf", 2*batch, 20*time.Second)
	// A write is observed after its commit: the last may land a moment
	// after the resources read Ready.
	var n uint64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mf, ok := metricFamily(t, e, "converge_dispatch_completion_duration_seconds")
		if !ok {
			t.Fatal("no completion duration metric")
		}
		if n = mf.GetMetric()[0].GetHistogram().GetSampleCount(); n >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if n != 2 {
		t.Fatalf("%d tasks completed in %d writes, want 2 of %d", 2*batch, n, batch)
	}
}
