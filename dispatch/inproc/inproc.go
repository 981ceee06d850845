// Package inproc runs reactions as Go functions inside the process: it
// claims tasks through the same engine.TaskClaim / TaskCompleteMany API the HTTP
// dispatcher uses, builds the same envelope, hands the handler registered
// for the task's (kind, kind_version) the webhooksdk.Request a provider's
// Work would receive, and completes in batches. Tests and benchmarks drive the engine with it; the
// production path is the push dispatcher.
package inproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/internal/startstop"
	"github.com/convergeplane/converge/webhooksdk"
)

// Handler runs one task, as webhooksdk.Provider's Work does. Return an error
// made with Terminal to pin the resource Failed for its generation; any other
// error is retried.
type Handler interface {
	Handle(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	return f(ctx, req)
}

type terminalError struct{ err error }

func (e terminalError) Error() string { return e.err.Error() }
func (e terminalError) Unwrap() error { return e.err }

// Terminal marks err as not worth retrying.
func Terminal(err error) error { return terminalError{err} }

// Config tunes an Executor. Zero fields take the defaults below.
type Config struct {
	// Claimer names this executor in claimed_by. Defaults to "inproc".
	Claimer string
	// Range returns the shard range to claim from. Defaults to every shard.
	Range func() (lo, hi int)
	// Handlers maps "kind/version" to its handler. Only these pairs are
	// claimed.
	Handlers map[string]Handler
	// Concurrency is how many handlers run at once. Defaults to 64.
	Concurrency int
	// BatchSize caps one claim. Defaults to 256.
	BatchSize int
	// Lease is the claim lease; in-flight tasks are renewed at Lease/3.
	// Defaults to 60s.
	Lease time.Duration
	// Poll is the failsafe claim interval for a missed wake. Defaults to 250ms.
	Poll time.Duration
	// FlushEvery bounds how long a finished result waits to be completed in
	// a batch. Defaults to 2ms.
	FlushEvery time.Duration
	// Writers is how many completion batches are written at once while the
	// next one gathers. Defaults to 2.
	Writers int
}

// Defaults for Config.
const (
	ConcurrencyDefault = 64
	BatchSizeDefault   = 256
	LeaseDefault       = 60 * time.Second
	PollDefault        = 250 * time.Millisecond
	FlushEveryDefault  = 2 * time.Millisecond
	WritersDefault     = 2
)

func (c Config) withDefaults() Config {
	c.Claimer = cmp.Or(c.Claimer, "inproc")
	if c.Range == nil {
		c.Range = func() (int, int) { return 0, 255 }
	}
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.Poll = cmp.Or(c.Poll, PollDefault)
	c.FlushEvery = cmp.Or(c.FlushEvery, FlushEveryDefault)
	c.Writers = cmp.Or(c.Writers, WritersDefault)
	return c
}

// Executor is the in-process dispatcher.
type Executor struct {
	cfg    Config
	engine *engine.Engine
	wake   <-chan struct{}
	log    *slog.Logger
	pairs  []string
	loop   startstop.Loop

	mu       sync.Mutex
	inflight map[string]model.Task
}

// New returns an Executor woken by wake (a work_ready subscription; nil
// polls only).
func New(cfg Config, eng *engine.Engine, wake <-chan struct{}, log *slog.Logger) *Executor {
	cfg = cfg.withDefaults()
	pairs := make([]string, 0, len(cfg.Handlers))
	for p := range cfg.Handlers {
		pairs = append(pairs, p)
	}
	return &Executor{cfg: cfg, engine: eng, wake: wake, log: log, pairs: pairs, inflight: map[string]model.Task{}}
}

// Start launches the claim loop.
func (e *Executor) Start(ctx context.Context) error {
	e.loop.Start(ctx, e.run)
	return nil
}

// Stop stops claiming, lets running handlers finish, completes their results
// and returns.
func (e *Executor) Stop() { e.loop.Stop() }

type done struct {
	task model.Task
	res  webhooksdk.Result
}

func (e *Executor) run(ctx context.Context) {
	results := make(chan done, e.cfg.Concurrency)
	slots := make(chan struct{}, e.cfg.Concurrency)
	var (
		wg        sync.WaitGroup
		completer sync.WaitGroup
	)
	completer.Add(1)
	go func() {
		defer completer.Done()
		e.complete(context.WithoutCancel(ctx), results)
	}()
	hbDone := make(chan struct{})
	go e.heartbeat(ctx, hbDone)

	poll := time.NewTicker(e.cfg.Poll)
	defer poll.Stop()
	for ctx.Err() == nil {
		free := e.cfg.Concurrency - len(slots)
		n := 0
		if free > 0 {
			var err error
			n, err = e.claimAndRun(ctx, min(free, e.cfg.BatchSize), slots, results, &wg)
			if err != nil && !errors.Is(err, context.Canceled) {
				e.log.Error("claim failed", "err", err)
			}
		}
		if n > 0 && n == min(free, e.cfg.BatchSize) {
			continue // a full batch: there is likely more
		}
		select {
		case <-ctx.Done():
		case <-e.wake:
		case <-poll.C:
		case <-slotFreed(slots, free == 0):
		}
	}
	wg.Wait()
	close(results)
	completer.Wait()
	close(hbDone)
}

// slotFreed returns a channel that fires soon when the executor is saturated,
// so it re-claims as handlers finish instead of waiting for the poll.
func slotFreed(slots chan struct{}, full bool) <-chan time.Time {
	if !full {
		return nil
	}
	return time.After(time.Millisecond)
}

func (e *Executor) claimAndRun(ctx context.Context, limit int, slots chan struct{}, results chan<- done, wg *sync.WaitGroup) (int, error) {
	lo, hi := e.cfg.Range()
	tasks, err := e.engine.TaskClaim(ctx, engine.TaskClaimParams{Claimer: e.cfg.Claimer, Lo: lo, Hi: hi,
		Pairs: e.pairs, Limit: limit, Lease: e.cfg.Lease})
	if err != nil || len(tasks) == 0 {
		return 0, err
	}
	envs, failed, err := e.engine.RequestBuild(ctx, tasks)
	if err != nil {
		// Give the claims back so another pass (or the reaper) retries them.
		if rerr := e.engine.TaskRelease(context.WithoutCancel(ctx), engine.TaskReleaseParams{Tasks: tasks, Reason: "request build failed"}); rerr != nil {
			e.log.Error("release after failed build", "err", rerr)
		}
		return 0, err
	}
	for i, t := range tasks {
		if failed[i] != nil {
			results <- done{task: t, res: webhooksdk.Result{Error: &webhooksdk.Error{Message: failed[i].Error(), Terminal: true}}}
			continue
		}
		slots <- struct{}{}
		e.track(t, true)
		wg.Add(1)
		go func(t model.Task, req webhooksdk.Request) {
			defer wg.Done()
			defer func() { <-slots }()
			res := e.invoke(ctx, t, req)
			e.track(t, false)
			results <- done{task: t, res: res}
		}(t, webhooksdk.NewRequest(&envs[i]))
	}
	return len(tasks), nil
}

func (e *Executor) invoke(ctx context.Context, t model.Task, req webhooksdk.Request) (res webhooksdk.Result) {
	h := e.cfg.Handlers[t.Kind+"/"+strconv.Itoa(int(t.KindVersion))]
	// Handlers run to completion on shutdown (bounded by their deadline).
	hctx := context.WithoutCancel(ctx)
	if !t.Deadline.IsZero() {
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadline(hctx, t.Deadline)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			res = webhooksdk.Result{Error: &webhooksdk.Error{Message: fmt.Sprintf("handler panicked: %v", p)}}
		}
	}()
	out, err := h.Handle(hctx, req)
	switch {
	case err == nil && hctx.Err() != nil:
		return webhooksdk.Result{Error: &webhooksdk.Error{Message: "task deadline exceeded"}}
	case err == nil:
		return webhooksdk.Result{Outcome: &out}
	}
	var term terminalError
	if errors.As(err, &term) {
		return webhooksdk.Result{Error: &webhooksdk.Error{Message: err.Error(), Terminal: true}}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return webhooksdk.Result{Error: &webhooksdk.Error{Message: "task deadline exceeded: " + err.Error()}}
	}
	return webhooksdk.Result{Error: &webhooksdk.Error{Message: err.Error()}}
}

func (e *Executor) track(t model.Task, add bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if add {
		e.inflight[t.ID] = t
	} else {
		delete(e.inflight, t.ID)
	}
}

// complete batches finished results into TaskCompleteMany calls, up to
// Writers of them at once. A completion applies its outcomes, so one write
// is most of the database work a task costs; written one at a time, the
// results behind a write filled the channel and held the handlers (and
// their slots) until it committed. Two batches never hold the same claim (a
// task is claimed again only after its completion committed), so parallel
// writes cannot reorder one task's writes; two writes meeting on a
// composite's rows deadlock at worst, which TaskCompleteMany runs again.
func (e *Executor) complete(ctx context.Context, results <-chan done) {
	var (
		batch   []engine.Completion
		writers sync.WaitGroup
		slots   = make(chan struct{}, e.cfg.Writers)
	)
	defer writers.Wait()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		b := batch
		batch = make([]engine.Completion, 0, len(b))
		slots <- struct{}{} // wait for a writer
		writers.Go(func() {
			defer func() { <-slots }()
			if _, err := e.engine.TaskCompleteMany(ctx, b); err != nil {
				// The claims stay held; their leases lapse and the reaper
				// re-pends them, so the work re-runs rather than being lost.
				e.log.Error("complete failed", "err", err, "tasks", len(b))
			}
		})
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case d, ok := <-results:
			if !ok {
				flush()
				return
			}
			batch = append(batch, engine.Completion{Task: d.task, Result: d.res})
			if len(batch) == 1 {
				timer.Reset(e.cfg.FlushEvery)
			}
			if len(batch) >= e.cfg.BatchSize {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// heartbeat renews the leases of running tasks.
func (e *Executor) heartbeat(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(e.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		e.mu.Lock()
		tasks := make([]model.Task, 0, len(e.inflight))
		for _, t := range e.inflight {
			tasks = append(tasks, t)
		}
		e.mu.Unlock()
		if len(tasks) == 0 {
			continue
		}
		if _, err := e.engine.LeaseExtend(context.WithoutCancel(ctx), tasks, e.cfg.Lease); err != nil {
			e.log.Warn("lease renewal failed", "err", err)
		}
	}
}
