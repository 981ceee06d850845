package webhooksdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// maxBatchAnswer caps the read of a batched callback's answer: MaxCallbackBatch items,
// each a task id, a status and a short detail.
const maxBatchAnswer = 1 << 20

// callbackBatcher coalesces the Results of tasks finishing together into one POST of a
// [CallbackBatch] per batch URL, so a burst of asynchronous completions costs the
// dispatcher one request instead of one each. Like the dispatcher's own callback group
// it has no goroutine of its own: the first Result to arrive waits the window (or until
// the batch is full) and then sends for everyone in it.
type callbackBatcher struct {
	e      *Endpoint
	window time.Duration
	max    int

	mu   sync.Mutex
	open map[string]*callbackBatch // by batch URL
}

type callbackBatch struct {
	items       []CallbackItem
	traceparent string        // the first item's: a request carries one
	full        chan struct{} // closed when the batch reached max
	done        chan struct{} // closed once answers/err are set
	answers     []CallbackItemAnswer
	err         error
}

// send delivers one Result as part of a batch to url and returns the status the
// dispatcher gave it. The request carries the first Result's traceparent. ok is false when the batch request failed as a whole (a network
// error, a dispatcher without the batch route, a malformed answer) or ctx ended first;
// the caller then sends the Result on its own.
func (b *callbackBatcher) send(ctx context.Context, url, token, traceparent string, result []byte) (status int, ok bool) {
	b.mu.Lock()
	cb := b.open[url]
	leader := cb == nil
	if leader {
		cb = &callbackBatch{traceparent: traceparent, full: make(chan struct{}), done: make(chan struct{})}
		b.open[url] = cb
	}
	i := len(cb.items)
	cb.items = append(cb.items, CallbackItem{Token: token, Result: result})
	if len(cb.items) >= b.max {
		delete(b.open, url)
		close(cb.full)
	}
	b.mu.Unlock()

	if leader {
		t := time.NewTimer(b.window)
		select {
		case <-t.C:
		case <-cb.full:
			t.Stop()
		}
		b.mu.Lock()
		if b.open[url] == cb {
			delete(b.open, url)
		}
		b.mu.Unlock()
		// The request belongs to every Result in it: this one's context ending must
		// not cancel the others'.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CallbackTimeoutDefault)
		cb.answers, cb.err = b.post(pctx, url, cb.traceparent, cb.items)
		cancel()
		close(cb.done)
	}
	select {
	case <-cb.done:
	case <-ctx.Done():
		return 0, false
	}
	if cb.err != nil {
		b.e.log.Warn("batched callback failed; sending the result on its own", "err", cb.err)
		return 0, false
	}
	return cb.answers[i].Status, true
}

// post sends one batch and returns its per-item answers, exactly one per item.
func (b *callbackBatcher) post(ctx context.Context, url, traceparent string, items []CallbackItem) ([]CallbackItemAnswer, error) {
	body, err := json.Marshal(CallbackBatch{Outcomes: items})
	if err != nil {
		return nil, fmt.Errorf("encode batched callback: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build batched callback: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "converge-webhooksdk")
	setTraceParent(req.Header, traceparent)
	resp, err := b.e.client.Do(req)
	if err != nil {
		return nil, err // *url.Error names the URL; the tokens are in the body
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBatchAnswer))
	if err != nil {
		return nil, fmt.Errorf("read batched callback answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("batched callback answered %d", resp.StatusCode)
	}
	var a CallbackBatchAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("decode batched callback answer: %w", err)
	}
	if len(a.Results) != len(items) {
		return nil, fmt.Errorf("batched callback answered %d results for %d outcomes", len(a.Results), len(items))
	}
	return a.Results, nil
}
