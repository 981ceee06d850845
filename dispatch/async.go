package dispatch

import (
	"container/heap"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/internal/startstop"
)

// asyncTimeoutMessage is the transient error an accepted task gets when its
// lease lapses with no callback.
const asyncTimeoutMessage = "async task timed out without a callback: the endpoint accepted it (202) but neither called back nor heartbeated before the lease lapsed"

// asyncWatch looks after accepted (202) tasks, in two phases.
//
// Hold: at the 202 the task still has most of its dispatch lease (renewed
// every Lease/3 while it was delivered), and most callbacks land well within
// it, so the lease is not extended at once — that would cost a round trip
// per batch for nothing. Shortly before the dispatch lease could lapse (or
// at the deadline plus grace, if sooner), the tasks still claimed get their
// async lease (callback.LeaseFor) in one batched LeaseExtend; the others
// were completed by their callbacks and are dropped.
//
// Expire: when an extended task's lease is due, TaskExpireAsync completes it
// with a transient error if the lease really lapsed (burning an attempt, so
// it is retried with backoff), or re-arms the watch at the new lease end if
// a provider heartbeat moved it, or drops it if its callback landed.
//
// Only the pod that saw the 202 watches; if it dies, the reaper re-pends the
// task when its lease lapses.
type asyncWatch struct {
	d    *Dispatcher
	wake chan struct{}

	mu sync.Mutex
	h  dueHeap
}

func newAsyncWatch(d *Dispatcher) *asyncWatch {
	return &asyncWatch{d: d, wake: make(chan struct{}, 1)}
}

type dueTask struct {
	at       time.Time
	task     model.Task
	endpoint string // that accepted it
	extended bool   // phase two: the async lease is set; check for expiry
}

type dueHeap []dueTask

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueTask)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// hold starts watching a task endpoint just accepted with 202.
func (w *asyncWatch) hold(t model.Task, endpoint string, now time.Time) {
	due := now.Add(w.d.cfg.Lease / 3)
	if !t.Deadline.IsZero() {
		if end := t.Deadline.Add(w.d.cfg.CallbackGrace); end.Before(due) {
			due = end
		}
	}
	w.push(dueTask{at: due, task: t, endpoint: endpoint})
}

func (w *asyncWatch) push(dt dueTask) {
	w.mu.Lock()
	heap.Push(&w.h, dt)
	first := w.h[0].task.ID == dt.task.ID
	w.mu.Unlock()
	if first {
		startstop.Wake(w.wake)
	}
}

// slack lets a lease lapse in the database's clock before expiry is asked.
const asyncSlack = 250 * time.Millisecond

func (w *asyncWatch) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var due []dueTask
		next := now.Add(time.Hour)
		w.mu.Lock()
		for w.h.Len() > 0 && len(due) < w.d.cfg.BatchSize {
			top := w.h[0]
			at := top.at
			if top.extended {
				at = at.Add(asyncSlack)
			}
			if at.After(now) {
				next = at
				break
			}
			due = append(due, heap.Pop(&w.h).(dueTask))
		}
		w.mu.Unlock()
		if len(due) > 0 {
			w.process(ctx, due)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

func (w *asyncWatch) process(ctx context.Context, due []dueTask) {
	var holds, checks []dueTask
	for _, dt := range due {
		if dt.extended {
			checks = append(checks, dt)
		} else {
			holds = append(holds, dt)
		}
	}
	if len(holds) > 0 {
		w.extend(ctx, holds)
	}
	if len(checks) > 0 {
		w.expire(ctx, checks)
	}
}

// extendAll extends every task still in its hold phase now (at shutdown).
func (w *asyncWatch) extendAll(ctx context.Context) {
	w.mu.Lock()
	var holds []dueTask
	for _, dt := range w.h {
		if !dt.extended {
			holds = append(holds, dt)
		}
	}
	w.h = nil
	w.mu.Unlock()
	for i := 0; i < len(holds); i += w.d.cfg.BatchSize {
		w.extend(ctx, holds[i:min(i+w.d.cfg.BatchSize, len(holds))])
	}
}

// extend gives the still-claimed held tasks their async lease.
func (w *asyncWatch) extend(ctx context.Context, due []dueTask) {
	now := time.Now()
	byLease := map[time.Duration][]dueTask{}
	for _, dt := range due {
		l := callback.LeaseFor(dt.task.Deadline, w.d.cfg.AsyncLease, w.d.cfg.CallbackGrace, now).Round(time.Second)
		byLease[l] = append(byLease[l], dt)
	}
	for lease, dts := range byLease {
		ectx, cancel := context.WithTimeout(ctx, flushTimeout)
		held, err := w.d.eng.LeaseExtend(ectx, tasksOf(dts), lease)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.d.log.Warn("cannot extend the lease of accepted tasks; retrying", "err", err, "tasks", len(dts))
			for _, dt := range dts {
				dt.at = now.Add(time.Second)
				w.push(dt)
			}
			continue
		}
		for _, dt := range dts {
			if held[dt.task.ID] {
				dt.at, dt.extended = now.Add(lease), true
				w.push(dt)
			}
		}
	}
}

func tasksOf(dts []dueTask) []model.Task {
	ts := make([]model.Task, len(dts))
	for i, dt := range dts {
		ts[i] = dt.task
	}
	return ts
}

func (w *asyncWatch) expire(ctx context.Context, due []dueTask) {
	ectx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	checks, err := w.d.eng.TaskExpireAsync(ectx, tasksOf(due), asyncTimeoutMessage)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		w.d.log.Warn("cannot expire accepted tasks; retrying", "err", err, "tasks", len(due))
		retry := time.Now().Add(time.Second)
		for _, dt := range due {
			dt.at = retry
			w.push(dt)
		}
		return
	}
	var timeouts []store.Delivery
	for i, c := range checks {
		dt := due[i]
		switch c.State {
		case engine.AsyncExpired:
			w.d.m.asyncTimeouts.Inc()
			w.d.log.Info("accepted task timed out without a callback", "task_id", dt.task.ID, "claim_epoch", dt.task.ClaimEpoch,
				"endpoint", dt.endpoint, "kind", dt.task.Kind, "kind_version", dt.task.KindVersion)
			timeouts = append(timeouts, store.Delivery{Endpoint: dt.endpoint, TaskID: dt.task.ID,
				Resource: store.DeliveryResource{ID: dt.task.ResourceID, Kind: dt.task.Kind}, TaskType: string(dt.task.Type), ClaimEpoch: dt.task.ClaimEpoch, Attempt: dt.task.Attempts + 1,
				HTTPStatus: http.StatusAccepted, Classification: resultAsyncTimeout, Excerpt: asyncTimeoutMessage})
		case engine.AsyncHeld:
			dt.at = c.LeaseUntil
			w.push(dt)
		case engine.AsyncGone:
		}
	}
	if len(timeouts) > 0 {
		if err := w.d.st.RecordDeliveries(ectx, timeouts); err != nil {
			w.d.log.Warn("cannot record async timeouts", "err", err)
		}
	}
}
