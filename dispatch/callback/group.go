package callback

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/webhooksdk"
)

// group commits concurrent callbacks together: the first callback to arrive
// opens a batch and, after a short window, waits for the previous batch's
// write to finish — the batch stays open meanwhile, so everything arriving
// during a write joins the next one — then completes the whole batch in one
// TaskCompleteMany round trip; each callback answers with its own status. Under
// load this turns N concurrent single-row transactions, which contend with
// each other, into one batched write at a time per pod; a lone callback
// waits only the window. There is no background goroutine: each batch's
// first caller does its write. The applied callbacks' rows of the delivery
// log follow in one insert per batch, once every caller has its answer and
// the next batch's write may start: held across that insert, the write
// slot made every batch wait on the previous one's log too. There is one
// write slot, not two: a second writer cut batches early, and the smaller
// batches cost the unbatched async path more than the overlap gained.
type group struct {
	eng    *engine.Engine
	st     *store.Store // the delivery log
	log    *slog.Logger
	window time.Duration
	max    int
	writer chan struct{} // held by the batch being written

	mu   sync.Mutex
	open *batch
}

type batch struct {
	items    []engine.Completion
	records  []*store.Delivery // per item; nil: not logged
	full     chan struct{}     // closed when the batch reached max
	done     chan struct{}     // closed once statuses/err are set
	statuses []engine.CompleteStatus
	err      error
}

// complete records one result as part of a batch and returns its status;
// rec (nil: none) is its row of the delivery log, written if it is applied.
func (g *group) complete(ctx context.Context, t model.Task, r webhooksdk.Result, rec *store.Delivery) (engine.CompleteStatus, error) {
	g.mu.Lock()
	b := g.open
	leader := b == nil
	if leader {
		b = &batch{full: make(chan struct{}), done: make(chan struct{})}
		g.open = b
	}
	i := len(b.items)
	b.items = append(b.items, engine.Completion{Task: t, Result: r})
	b.records = append(b.records, rec)
	if len(b.items) >= g.max {
		g.open = nil
		close(b.full)
	}
	g.mu.Unlock()

	if leader {
		timer := time.NewTimer(g.window)
		select {
		case <-timer.C:
		case <-b.full:
			timer.Stop()
		}
		g.writer <- struct{}{} // the batch keeps filling until the previous write is done
		g.mu.Lock()
		if g.open == b {
			g.open = nil
		}
		g.mu.Unlock()
		// The batch belongs to every caller in it: one caller going away
		// must not cancel the others' writes.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		b.statuses, b.err = g.eng.TaskCompleteMany(wctx, b.items)
		<-g.writer
		close(b.done)
		g.record(wctx, b)
		cancel()
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		// The result may still be applied; a retry finds it a duplicate.
		return "", ctx.Err()
	}
	if b.err != nil {
		return "", b.err
	}
	return b.statuses[i], nil
}

// record writes the delivery log's rows of the batch's applied callbacks.
func (g *group) record(ctx context.Context, b *batch) {
	if b.err != nil {
		return
	}
	var recs []store.Delivery
	for i, rec := range b.records {
		if rec != nil && b.statuses[i] == engine.Applied {
			recs = append(recs, *rec)
		}
	}
	if err := g.st.RecordDeliveries(ctx, recs); err != nil {
		g.log.Warn("callback: cannot record deliveries", "err", err, "callbacks", len(recs))
	}
}
