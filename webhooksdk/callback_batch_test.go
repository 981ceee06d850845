package webhooksdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

// batchDispatcher fakes a dispatcher's callback routes: the batched one
// (answering each item with itemStatus, or the whole request with
// batchStatus when that is set) and the single one (answering 200).
type batchDispatcher struct {
	srv         *httptest.Server
	batchStatus int
	itemStatus  func(attempt int) int // by how many times the task was seen

	mu      sync.Mutex
	traces  []string        // the traceparent of every request
	batches [][]string      // task ids per batched request
	singles []string        // task ids of single callbacks
	seen    map[string]int  // task id -> posts
	done    map[string]bool // task id -> answered 200
	changed chan struct{}
}

func newBatchDispatcher(t *testing.T) *batchDispatcher {
	d := &batchDispatcher{itemStatus: func(int) int { return http.StatusOK }, seen: map[string]int{}, done: map[string]bool{},
		changed: make(chan struct{}, 1024)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks/outcomes", func(w http.ResponseWriter, r *http.Request) {
		if d.batchStatus != 0 {
			http.Error(w, "no", d.batchStatus)
			return
		}
		var b webhooksdk.CallbackBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("batched callback body: %v", err)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		var ids []string
		d.mu.Lock()
		d.traces = append(d.traces, r.Header.Get("traceparent"))
		d.mu.Unlock()
		a := webhooksdk.CallbackBatchAnswer{Results: make([]webhooksdk.CallbackItemAnswer, len(b.Outcomes))}
		d.mu.Lock()
		for i, it := range b.Outcomes {
			var res webhooksdk.Result
			if err := json.Unmarshal(it.Result, &res); err != nil || it.Token != "tok-"+res.TaskID {
				t.Errorf("item %d: token %q, result %s (%v)", i, it.Token, it.Result, err)
			}
			ids = append(ids, res.TaskID)
			d.seen[res.TaskID]++
			a.Results[i] = webhooksdk.CallbackItemAnswer{TaskID: res.TaskID, Status: d.itemStatus(d.seen[res.TaskID])}
			d.done[res.TaskID] = d.done[res.TaskID] || a.Results[i].Status == http.StatusOK
		}
		d.batches = append(d.batches, ids)
		d.mu.Unlock()
		d.changed <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
	})
	mux.HandleFunc("POST /v1/tasks/{id}/outcome", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if r.Header.Get("Authorization") != "Bearer tok-"+id {
			t.Errorf("single callback for %s: Authorization %q", id, r.Header.Get("Authorization"))
		}
		d.mu.Lock()
		d.traces = append(d.traces, r.Header.Get("traceparent"))
		d.singles = append(d.singles, id)
		d.seen[id]++
		d.done[id] = true
		d.mu.Unlock()
		d.changed <- struct{}{}
		w.WriteHeader(http.StatusOK)
	})
	d.srv = httptest.NewServer(mux)
	t.Cleanup(d.srv.Close)
	return d
}

// waitDone waits until every task in ids was answered 200.
func (d *batchDispatcher) waitDone(t *testing.T, ids []string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		d.mu.Lock()
		n := 0
		for _, id := range ids {
			if d.done[id] {
				n++
			}
		}
		d.mu.Unlock()
		if n == len(ids) {
			return
		}
		select {
		case <-d.changed:
		case <-deadline:
			t.Fatalf("%d of %d results delivered", n, len(ids))
		}
	}
}

// TestCallbackBatch: asynchronous Results finishing together reach a
// dispatcher that offers a batch URL in one batched callback, each with its
// own token; a dispatcher without the route gets each on its own, and an
// item the batch answers 503 is retried on its own.
func TestCallbackBatch(t *testing.T) {
	t.Parallel()
	const n = 8
	const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	run := func(t *testing.T, d *batchDispatcher, opts ...webhooksdk.Option) []string {
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{}, g.wait(ctx)
		}, append([]webhooksdk.Option{webhooksdk.WithSyncBudget(0), webhooksdk.WithCallbackBatch(50*time.Millisecond, 64)}, opts...)...)
		var ids []string
		for i := range n {
			env := b.envelope(false)
			env.TaskID = fmt.Sprintf("task-%d", i)
			env.Callback = &webhooksdk.Callback{URL: d.srv.URL + "/v1/tasks/" + env.TaskID + "/outcome", Token: "tok-" + env.TaskID,
				BatchURL: d.srv.URL + "/v1/tasks/outcomes"}
			body, _ := json.Marshal(env)
			req := sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, "", time.Time{}, body)
			req.Header.Set("traceparent", trace)
			if resp := b.do(t, req); resp.status != http.StatusAccepted {
				t.Fatalf("status = %d, want 202", resp.status)
			}
			ids = append(ids, env.TaskID)
		}
		g.Open()
		d.waitDone(t, ids)
		shutdown(t, b)
		return ids
	}

	t.Run("together in one request", func(t *testing.T) {
		t.Parallel()
		d := newBatchDispatcher(t)
		run(t, d)
		if len(d.singles) != 0 || len(d.batches) != 1 || len(d.batches[0]) != n {
			t.Fatalf("batches %v, singles %v; want one batch of %d", d.batches, d.singles, n)
		}
		if len(d.traces) != 1 || d.traces[0] != trace {
			t.Errorf("the batch's traceparent = %q, want the delivery's %q", d.traces, trace)
		}
	})
	t.Run("max 1 sends each on its own", func(t *testing.T) {
		t.Parallel()
		d := newBatchDispatcher(t)
		run(t, d, webhooksdk.WithCallbackBatch(0, 1))
		if len(d.batches) != 0 || len(d.singles) != n {
			t.Fatalf("batches %v, singles %v; want %d singles", d.batches, d.singles, n)
		}
		for _, tp := range d.traces {
			if tp != trace {
				t.Errorf("a single callback's traceparent = %q, want the delivery's %q", tp, trace)
			}
		}
	})
	t.Run("a dispatcher without the route", func(t *testing.T) {
		t.Parallel()
		d := newBatchDispatcher(t)
		d.batchStatus = http.StatusNotFound
		run(t, d)
		if len(d.singles) != n {
			t.Fatalf("singles %v; want all %d results sent on their own", d.singles, n)
		}
	})
	t.Run("an item answered 503 is retried", func(t *testing.T) {
		t.Parallel()
		d := newBatchDispatcher(t)
		d.itemStatus = func(attempt int) int {
			if attempt == 1 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}
		ids := run(t, d)
		if len(d.singles) != n {
			t.Fatalf("singles %v; want each of the %d items retried on its own", d.singles, len(ids))
		}
	})
}
