package webhooksdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// batchOf returns n task envelopes for vpc/v1, task-1 … task-n, each with its own
// callback at b's receiver.
func (b *testBundle) batchOf(n int) []webhooksdk.Envelope {
	envs := make([]webhooksdk.Envelope, n)
	for i := range envs {
		envs[i] = b.envelope(false)
		envs[i].TaskID = "task-" + string(rune('a'+i))
		envs[i].ClaimEpoch = int64(10 + i)
		envs[i].Callback = b.cb.Callback(envs[i].TaskID)
	}
	return envs
}

func (b *testBundle) postBatch(t *testing.T, secret string, envs []webhooksdk.Envelope) response {
	t.Helper()
	body, err := json.Marshal(webhooksdk.Batch{Type: webhooksdk.EnvelopeBatch, Tasks: envs})
	if err != nil {
		t.Fatal(err)
	}
	return b.do(t, sdktest.NewSignedRequest(t, b.srv.URL, secret, sdktest.NewMessageID(), time.Time{}, body))
}

// batchResults decodes a batch response into its results by task id.
func batchResults(t *testing.T, resp response) map[string]webhooksdk.BatchResult {
	t.Helper()
	if resp.status != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.status)
	}
	var br webhooksdk.BatchResponse
	if err := json.Unmarshal(resp.body, &br); err != nil || br.Type != webhooksdk.EnvelopeBatch {
		t.Fatalf("not a batch response (%v): %s", err, resp.body)
	}
	out := map[string]webhooksdk.BatchResult{}
	for _, raw := range br.Results {
		var r webhooksdk.BatchResult
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("result %s: %v", raw, err)
		}
		out[r.TaskID] = r
	}
	return out
}

// TestHandlerBatch: a batched delivery is served task by task with the provider's
// unchanged code, and answered with one result per task: any mix of outcome, error and
// accepted.
func TestHandlerBatch(t *testing.T) {
	t.Parallel()

	t.Run("mixed results", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
			switch req.TaskID {
			case "task-b":
				return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("bad spec"))
			case "task-c":
				if err := g.wait(ctx); err != nil {
					return webhooksdk.Outcome{}, err
				}
			}
			return webhooksdk.Outcome{Status: json.RawMessage(`{"id":"` + req.TaskID + `"}`)}, nil
		}, webhooksdk.WithSyncBudget(100*time.Millisecond))
		envs := b.batchOf(4)
		envs[3].KindVersion = 9 // no provider here
		got := batchResults(t, b.postBatch(t, vectorSecret, envs))
		want := map[string]webhooksdk.BatchResult{
			"task-a": {Result: webhooksdk.Result{TaskID: "task-a", ClaimEpoch: 10, Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"id":"task-a"}`)}}},
			"task-b": {Result: webhooksdk.Result{TaskID: "task-b", ClaimEpoch: 11, Error: &webhooksdk.Error{Message: "bad spec", Terminal: true}}},
			"task-c": {Result: webhooksdk.Result{TaskID: "task-c", ClaimEpoch: 12}, Accepted: true},
			"task-d": {Result: webhooksdk.Result{TaskID: "task-d", ClaimEpoch: 13, Error: &webhooksdk.Error{Message: "404 Not Found: no provider for vpc/v9 at this endpoint"}}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("batch results (-want +got):\n%s", diff)
		}
		g.Open()
		post := b.cb.WaitOutcomes(t, 1, waitTimeout)[0]
		if r := post.Result(t); post.TaskID != "task-c" || r.ClaimEpoch != 12 || r.Outcome == nil {
			t.Fatalf("callback for %s = %+v, want task-c's outcome at epoch 12", post.TaskID, r)
		}
	})

	t.Run("concurrency limit", func(t *testing.T) {
		t.Parallel()
		var cur, peak atomic.Int32
		b := setup(t, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			n := cur.Add(1)
			defer cur.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(30 * time.Millisecond)
			return webhooksdk.Outcome{}, nil
		}, webhooksdk.WithBatchConcurrency(3))
		got := batchResults(t, b.postBatch(t, vectorSecret, b.batchOf(9)))
		for id, r := range got {
			if r.Outcome == nil {
				t.Errorf("%s: %+v, want an outcome", id, r)
			}
		}
		if len(got) != 9 || b.prov.calls.Load() != 9 {
			t.Fatalf("%d results, %d Work calls; want 9 and 9", len(got), b.prov.calls.Load())
		}
		if p := peak.Load(); p != 3 {
			t.Fatalf("peak concurrent Work = %d, want the limit 3", p)
		}
	})

	t.Run("signature verified once", func(t *testing.T) {
		t.Parallel()
		var checks atomic.Int32
		b := setup(t, nil, webhooksdk.WithClock(func() time.Time { checks.Add(1); return time.Now() }))
		if got := batchResults(t, b.postBatch(t, vectorSecret, b.batchOf(5))); len(got) != 5 {
			t.Fatalf("%d results, want 5", len(got))
		}
		if n := checks.Load(); n != 1 {
			t.Fatalf("signature checked %d times for one batch, want 1", n)
		}
	})

	t.Run("bad signature refuses the batch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		other := "whsec_" + "c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n"
		if resp := b.postBatch(t, other, b.batchOf(3)); resp.status != http.StatusUnauthorized {
			t.Fatalf("status = %d, want 401", resp.status)
		}
		if n := b.prov.calls.Load(); n != 0 {
			t.Fatalf("Work called %d times for a refused batch", n)
		}
	})

	t.Run("empty batch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		if resp := b.postBatch(t, vectorSecret, nil); resp.status != http.StatusBadRequest {
			t.Fatalf("status = %d, want 400", resp.status)
		}
	})
}
