package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// flushTimeout bounds one batch write.
const flushTimeout = 30 * time.Second

// completer batches the outcomes of finished deliveries into one round trip
// per kind of write: one insert of the batch's attempts into the delivery
// log, CompleteBatch for results (which applies them), Release per (delay, reason). A batch goes out when BatchSize ops have gathered or FlushEvery
// after the first, so a burst is written at database speed and a lone
// result waits at most FlushEvery. It returns once ops is closed and the
// last batch is written.
func (d *Dispatcher) completer(ctx context.Context, ops <-chan op) {
	type relKey struct {
		delay  time.Duration
		reason string
	}
	var (
		completes []store.Completion
		releases  = map[relKey][]model.Task{}
		attempts  []store.Delivery
		n         int
	)
	flush := func() {
		if n == 0 {
			return
		}
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		defer cancel()
		// The delivery log's insert runs beside the completion on its own
		// connection: in line it lengthened every flush of this one
		// goroutine, which paces the dispatcher's completions.
		var logged sync.WaitGroup
		if len(attempts) > 0 {
			logged.Go(func() {
				if err := d.st.RecordDeliveries(fctx, attempts); err != nil {
					d.log.Warn("cannot record deliveries", "err", err, "attempts", len(attempts))
				}
			})
		}
		defer func() {
			logged.Wait()
			clear(attempts)
			attempts = attempts[:0]
		}()
		if len(completes) > 0 {
			start := time.Now()
			if _, err := d.st.CompleteBatch(fctx, completes); err != nil {
				// The claims stay held; their leases lapse and the reaper
				// re-pends them, so the work re-runs rather than being lost.
				d.log.Error("complete failed", "err", err, "tasks", len(completes))
				d.m.completeFails.Inc()
			} else {
				d.m.completions.Observe(time.Since(start).Seconds())
			}
			clear(completes)
			completes = completes[:0]
		}
		for k, ts := range releases {
			if err := d.st.Release(fctx, ts, k.delay, k.reason); err != nil {
				d.log.Error("release failed", "err", err, "tasks", len(ts), "reason", k.reason)
			}
			delete(releases, k)
		}
		n = 0
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case o, ok := <-ops:
			if !ok {
				flush()
				return
			}
			switch o.kind {
			case opComplete:
				completes = append(completes, store.Completion{Task: o.task, Result: o.result, Abandoned: o.abandoned})
			case opRelease:
				k := relKey{o.delay.Round(100 * time.Millisecond), o.reason}
				releases[k] = append(releases[k], o.task)
			case opRecord:
				attempts = append(attempts, o.delivery)
			}
			n++
			if n == 1 {
				timer.Reset(d.cfg.FlushEvery)
			}
			if n >= d.cfg.BatchSize {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}
