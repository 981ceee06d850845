package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/webhooksdk"
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
