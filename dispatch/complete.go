package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// flushTimeout bounds one batch write.
const flushTimeout = 30 * time.Second

// completeWriters is how many batches the completer writes at once. A
// completion applies its outcomes (complete_tasks), so one write is most of
// the database work a task costs; with one writer, results waited on the
// write before them, which held back the batched deliveries most. Two
// writes of one pod can meet on a composite's shared rows; a deadlock
// between them is broken by PostgreSQL and the write runs again.
const completeWriters = 2

// batch is one write's worth of finished deliveries.
type batch struct {
	completes []engine.Completion
	releases  map[relKey][]model.Task
	attempts  []store.Delivery
}

// relKey groups releases that share a delay and a reason.
type relKey struct {
	delay  time.Duration
	reason string
}

// completer batches the outcomes of finished deliveries into one round trip
// per kind of write: one insert of the batch's attempts into the delivery
// log, TaskCompleteMany for results (which applies them), TaskRelease per (delay,
// reason). A batch goes out when it holds BatchSize tasks (completions and
// releases: an attempt's log record rides with its task, and counted too
// it halved every batch) or FlushEvery after its first op, so a burst is
// written at database speed and a lone result waits at most FlushEvery; up to completeWriters batches are
// written at once, and the next one gathers meanwhile. It returns once ops
// is closed and the last batch is written.
func (d *Dispatcher) completer(ctx context.Context, ops <-chan op) {
	var (
		cur     = batch{releases: map[relKey][]model.Task{}}
		n       int // ops gathered
		tasks   int // of which completions and releases
		writers sync.WaitGroup
		slots   = make(chan struct{}, completeWriters)
	)
	defer writers.Wait()
	flush := func() {
		if n == 0 {
			return
		}
		b := cur
		cur, n, tasks = batch{releases: map[relKey][]model.Task{}}, 0, 0
		slots <- struct{}{} // wait for a writer
		writers.Go(func() {
			defer func() { <-slots }()
			d.write(ctx, b)
		})
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
				cur.completes = append(cur.completes, engine.Completion{Task: o.task, Result: o.result, Abandoned: o.abandoned})
				tasks++
			case opRelease:
				k := relKey{o.delay.Round(100 * time.Millisecond), o.reason}
				cur.releases[k] = append(cur.releases[k], o.task)
				tasks++
			case opRecord:
				cur.attempts = append(cur.attempts, o.delivery)
			}
			n++
			if n == 1 {
				timer.Reset(d.cfg.FlushEvery)
			}
			if tasks >= d.cfg.BatchSize {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// write writes one batch. Two batches never hold the same claim (a task is
// claimed again only after its release or completion committed), so
// writes in parallel cannot reorder one task's writes.
func (d *Dispatcher) write(ctx context.Context, b batch) {
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	// The delivery log's insert runs beside the completion on its own
	// connection: in line it lengthened every write.
	var logged sync.WaitGroup
	if len(b.attempts) > 0 {
		logged.Go(func() {
			if err := d.st.RecordDeliveries(fctx, b.attempts); err != nil {
				d.log.Warn("cannot record deliveries", "err", err, "attempts", len(b.attempts))
			}
		})
	}
	defer logged.Wait()
	if len(b.completes) > 0 {
		start := time.Now()
		if _, err := d.eng.TaskCompleteMany(fctx, b.completes); err != nil {
			// The claims stay held; their leases lapse and the reaper
			// re-pends them, so the work re-runs rather than being lost.
			d.log.Error("complete failed", "err", err, "tasks", len(b.completes))
			d.m.completeFails.Inc()
		} else {
			d.m.completions.Observe(time.Since(start).Seconds())
		}
	}
	for k, ts := range b.releases {
		if err := d.eng.TaskRelease(fctx, engine.TaskReleaseParams{Tasks: ts, Delay: k.delay, Reason: k.reason}); err != nil {
			d.log.Error("release failed", "err", err, "tasks", len(ts), "reason", k.reason)
		}
	}
}
