package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/webhooksdk"
	sdklambda "github.com/convergeplane/converge/webhooksdk/lambda"
)

// batchSizes wraps a handler, recording how many tasks each task request
// carried (1 for a single envelope).
type batchSizes struct {
	next  http.Handler
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req webhooksdk.Batch
	_ = json.Unmarshal(body, &req)
	b.mu.Lock()
	switch req.Type {
	case webhooksdk.EnvelopeBatch:
		b.sizes = append(b.sizes, len(req.Tasks))
	case webhooksdk.EnvelopeTask:
		b.sizes = append(b.sizes, 1)
	}
	b.mu.Unlock()
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	b.next.ServeHTTP(w, r)
}

func (b *batchSizes) largest() (largest, requests int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.sizes {
		largest = max(largest, n)
	}
	return largest, len(b.sizes)
}

// TestBatchConverges: under load, an endpoint with max_batch 8 gets
// requests carrying several tasks (never more than 8) through webhooksdk,
// and every task converges, once; with max_batch 1 every request is a
// single task, as before batching existed.
func TestBatchConverges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		maxBatch int
	}{{"max_batch 8", 8}, {"max_batch 1", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
			s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 2, maxBatch: tc.maxBatch})
			h := e.sdk(s, nil, newProvider("leaf", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
				time.Sleep(2 * time.Millisecond)
				return echo(ctx, req)
			}))
			sizes := &batchSizes{next: h}
			s.set(sizes)
			e.applyMany("leaf", 200)
			e.dispatcher(dispatch.Config{})
			e.listen()
			e.waitReady("leaf", 200, 60*time.Second)
			largest, requests := sizes.largest()
			t.Logf("%d requests, the largest carrying %d tasks", requests, largest)
			switch {
			case tc.maxBatch > 1 && (largest < 2 || largest > tc.maxBatch):
				t.Errorf("largest request carried %d tasks, want 2..%d", largest, tc.maxBatch)
			case tc.maxBatch == 1 && (largest != 1 || requests < 200):
				t.Errorf("%d requests, the largest carrying %d tasks; want 200+ single tasks", requests, largest)
			}
			e.checkNoDoubleApply()
		})
	}
}

// batchHandler serves task requests, batched or single, signed with secret:
// answer returns the results for one task (none, one, or several), and a
// single task is answered with its first.
func batchHandler(secret string, answer func(env webhooksdk.Envelope) []webhooksdk.BatchResult) http.Handler {
	return verified(secret, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			webhooksdk.Envelope
			Tasks []webhooksdk.Envelope `json:"tasks"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &req)
		if req.Type == webhooksdk.EnvelopeTask {
			res := answer(req.Envelope)
			if res[0].Accepted {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			b, _ := json.Marshal(res[0].Result)
			_, _ = w.Write(b)
			return
		}
		resp := webhooksdk.BatchResponse{Type: webhooksdk.EnvelopeBatch}
		for _, env := range req.Tasks {
			for _, res := range answer(env) {
				b, _ := json.Marshal(res)
				resp.Results = append(resp.Results, b)
			}
		}
		b, _ := json.Marshal(resp)
		_, _ = w.Write(b)
	})
}

func outcomeOf(env webhooksdk.Envelope, status string) webhooksdk.BatchResult {
	return webhooksdk.BatchResult{Result: webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
		Outcome: &webhooksdk.Outcome{Status: json.RawMessage(status)}}}
}

// TestBatchMixedResults: one batch answered with an outcome, a terminal
// error and an accepted task: each lands as it would alone, and the
// accepted one waits for its own callback.
func TestBatchMixedResults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxBatch: 8})
	var (
		mu      sync.Mutex
		pending webhooksdk.Envelope
	)
	sized := &batchSizes{next: batchHandler(s.secret, func(env webhooksdk.Envelope) []webhooksdk.BatchResult {
		mu.Lock()
		defer mu.Unlock()
		switch env.Resource.Name {
		case "fail":
			return []webhooksdk.BatchResult{{Result: webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
				Error: &webhooksdk.Error{Message: "cidr overlaps", Terminal: true}}}}
		case "async":
			pending = env
			return []webhooksdk.BatchResult{{Result: webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch}, Accepted: true}}
		}
		return []webhooksdk.BatchResult{outcomeOf(env, `{"done":true}`)}
	})}
	s.set(sized)
	for _, n := range []string{"ok", "fail", "async"} {
		e.apply("leaf", n, map[string]any{"n": n})
	}
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitPhase("leaf", "ok", "Ready", 20*time.Second)
	e.waitPhase("leaf", "fail", "Failed", 20*time.Second)
	if largest, requests := sized.largest(); largest != 3 || requests != 1 {
		t.Fatalf("%d requests, the largest carrying %d tasks; want one batch of 3", requests, largest)
	}
	if p := e.phase("leaf", "async"); p != "Reconciling" {
		t.Fatalf("the accepted task's resource is %s before its callback, want Reconciling", p)
	}
	mu.Lock()
	env := pending
	mu.Unlock()
	if code, result := postCallback(t, env, outcomeOf(env, `{"late":true}`).Result); code != http.StatusOK || result != "applied" {
		t.Fatalf("callback answered %d %q, want 200 applied", code, result)
	}
	e.waitPhase("leaf", "async", "Ready", 20*time.Second)
	if v := metricValue(t, e, "converge_dispatch_deliveries_total", map[string]string{"endpoint": "leaves", "result": "accepted"}); v != 1 {
		t.Errorf("deliveries_total{accepted} = %v, want 1", v)
	}
	e.checkNoDoubleApply()
}

// TestBatchUnusableAnswers: in a batch answer, a result for another claim
// of the task (a stale epoch), a missing result and a duplicated one are
// never applied: those tasks fail transiently (recorded malformed) and
// converge on a later claim, while their neighbour's result is applied.
func TestBatchUnusableAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxBatch: 8})
	s.set(batchHandler(s.secret, func(env webhooksdk.Envelope) []webhooksdk.BatchResult {
		if env.Attempt > 1 {
			return []webhooksdk.BatchResult{outcomeOf(env, `{"from":"retry"}`)}
		}
		first := outcomeOf(env, `{"from":"first"}`)
		switch env.Resource.Name {
		case "stale":
			first.ClaimEpoch = env.ClaimEpoch - 1
		case "missing":
			return nil
		case "dup":
			return []webhooksdk.BatchResult{first, first}
		}
		return []webhooksdk.BatchResult{first}
	}))
	ids := map[string]string{}
	for _, n := range []string{"good", "stale", "missing", "dup"} {
		ids[n] = e.apply("leaf", n, map[string]any{"n": n})
	}
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitReady("leaf", 4, 30*time.Second)
	for name, id := range ids {
		var status string
		must(t, e.db.Pool.QueryRow(e.ctx, `SELECT status->>'from' FROM resources WHERE id = $1`, id).Scan(&status))
		want, failures := "retry", 1
		if name == "good" {
			want, failures = "first", 0
		}
		if status != want {
			t.Errorf("%s: status from the %s answer, want the %s", name, status, want)
		}
		// The delivery log is written beside the completion, so a moment after it.
		waitFor(t, 5*time.Second, fmt.Sprintf("%s: %d malformed deliveries recorded", name, failures), func() bool {
			return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'malformed'`, id) == failures
		})
	}
	e.checkNoDoubleApply()
}

// TestBatchWholeRequest: a 5xx for a batch fails every task in it as a
// single delivery's 5xx would (each recorded server_error, retried under a
// new claim); a 202 for a whole batch accepts every task, each then
// completed by its own callback.
func TestBatchWholeRequest(t *testing.T) {
	t.Parallel()
	// setup registers a max_batch 8 endpoint served by h, applies four
	// leaves and starts a dispatcher, which claims them together.
	setup := func(t *testing.T, h func(s *server) http.Handler) (*env, []string) {
		e := newEnv(t)
		e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
		s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxBatch: 8})
		s.set(h(s))
		ids := make([]string, 4)
		for i := range ids {
			ids[i] = e.apply("leaf", string(rune('a'+i)), map[string]any{"i": i})
		}
		e.dispatcher(dispatch.Config{})
		e.listen()
		return e, ids
	}

	t.Run("5xx", func(t *testing.T) {
		t.Parallel()
		var first sync.Once
		sized := &batchSizes{}
		e, ids := setup(t, func(s *server) http.Handler {
			ok := batchHandler(s.secret, func(env webhooksdk.Envelope) []webhooksdk.BatchResult {
				return []webhooksdk.BatchResult{outcomeOf(env, `{"ok":true}`)}
			})
			sized.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				failed := false
				first.Do(func() {
					failed = true
					http.Error(w, "boom", http.StatusInternalServerError)
				})
				if !failed {
					ok.ServeHTTP(w, r)
				}
			})
			return sized
		})
		e.waitReady("leaf", len(ids), 30*time.Second)
		sized.mu.Lock()
		firstSize := sized.sizes[0]
		sized.mu.Unlock()
		if firstSize != len(ids) {
			t.Fatalf("the failed request carried %d tasks, want all %d", firstSize, len(ids))
		}
		for _, id := range ids {
			// The delivery log is written beside the release, so a moment after it.
			waitFor(t, 5*time.Second, "one server_error record for "+id+"'s first claim", func() bool {
				return e.count(`SELECT count(*) FROM endpoint_deliveries WHERE resource_id = $1 AND classification = 'server_error' AND claim_epoch = 1`, id) == 1
			})
		}
		e.checkNoDoubleApply()
	})

	t.Run("202", func(t *testing.T) {
		t.Parallel()
		var (
			mu       sync.Mutex
			accepted []webhooksdk.Envelope
		)
		e, ids := setup(t, func(s *server) http.Handler {
			return verified(s.secret, func(w http.ResponseWriter, r *http.Request) {
				var req webhooksdk.Batch
				body, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(body, &req)
				mu.Lock()
				accepted = append(accepted, req.Tasks...)
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
			})
		})
		var envs []webhooksdk.Envelope
		waitFor(t, 20*time.Second, "the batch to be accepted", func() bool {
			mu.Lock()
			defer mu.Unlock()
			envs = append([]webhooksdk.Envelope(nil), accepted...)
			return len(envs) == len(ids)
		})
		for _, env := range envs {
			if code, result := postCallback(t, env, outcomeOf(env, `{"ok":true}`).Result); code != http.StatusOK || result != "applied" {
				t.Errorf("callback for %s answered %d %q, want 200 applied", env.TaskID, code, result)
			}
		}
		e.waitReady("leaf", len(ids), 20*time.Second)
		e.checkNoDoubleApply()
	})
}

// TestBatchLambda: through a lambda target (sync and Event invokes, on the
// Invoke-API test server), a batch is one Invoke, served by
// webhooksdk/lambda, and every task converges.
func TestBatchLambda(t *testing.T) {
	t.Parallel()
	for _, invocation := range []string{store.InvocationSync, store.InvocationAsync} {
		t.Run(invocation, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
			fn, err := sdklambda.New([]webhooksdk.Provider{newProvider("leaf", echo)}, webhooksdk.WithLogger(e.log),
				webhooksdk.WithSecrets(string(lambdaSecret)))
			must(t, err)
			ls := lambdatest.New(t)
			var (
				mu    sync.Mutex
				sizes []int
			)
			f := ls.Add("leaf-fn", func(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
				var req webhooksdk.Batch
				_ = json.Unmarshal([]byte(ev.Body), &req)
				mu.Lock()
				sizes = append(sizes, len(req.Tasks))
				mu.Unlock()
				return fn.Serve(ctx, ev)
			})
			_, _, err = e.st.CreateEndpoint(e.ctx, e.box, store.PutEndpointParams{Name: "leaf-lambda", MaxBatch: 8,
				Kinds: []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
				Target: store.EndpointTarget{Type: store.TargetLambda, Function: "leaf-fn", Region: lambdatest.Region,
					Invocation: invocation, EndpointURL: ls.URL},
				Health: store.EndpointHealth{Type: store.HealthNone}, Secret: lambdaSecret})
			must(t, err)
			for i := range 4 {
				e.apply("leaf", string(rune('a'+i)), map[string]any{"i": i})
			}
			e.dispatcher(dispatch.Config{AWS: lambdatest.AWSConfig})
			e.listen()
			e.waitReady("leaf", 4, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if f.Invocations.Load() != 1 || len(sizes) != 1 || sizes[0] != 4 {
				t.Fatalf("%d invocations carrying %v tasks; want one batch of 4", f.Invocations.Load(), sizes)
			}
			e.checkNoDoubleApply()
		})
	}
}

// lambdaSecret is the signing secret TestBatchLambda's endpoint is created
// with, so its function holds it from the start.
const lambdaSecret store.EndpointSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
