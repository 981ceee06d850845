// Package startstop gives every long-running service the same lifecycle:
// Start launches the service's goroutine and returns; Stop cancels it and
// returns only once it has fully stopped. Stop is safe to call twice and
// before Start.
package startstop

import (
	"context"
	"sync"
	"sync/atomic"
)

// Loop runs one goroutine between Start and Stop. Embed it in a service.
type Loop struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	running atomic.Bool
}

// Start runs run(ctx) in a new goroutine, with ctx cancelled by Stop or by
// the parent. It returns false (and does nothing) if the loop is running.
func (l *Loop) Start(parent context.Context, run func(ctx context.Context)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return false
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	l.running.Store(true)
	go func() {
		defer close(done)
		defer l.running.Store(false)
		run(ctx)
	}()
	return true
}

// Running reports whether the loop's goroutine is running: true from Start
// until run returns, whether Stop or the parent context ended it or it
// returned by itself. Readiness probes read it.
func (l *Loop) Running() bool { return l.running.Load() }

// Stop cancels the loop and waits for it to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Wake sends a non-blocking signal on a buffer-1 channel, so a burst of
// wakeups becomes one run.
func Wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
