package startstop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoop(t *testing.T) {
	t.Parallel()
	var l Loop
	l.Stop() // before Start: no-op

	var runs atomic.Int32
	started := make(chan struct{})
	ok := l.Start(context.Background(), func(ctx context.Context) {
		runs.Add(1)
		close(started)
		<-ctx.Done()
	})
	if !ok {
		t.Fatal("first Start returned false")
	}
	<-started
	if l.Start(context.Background(), func(context.Context) { runs.Add(1) }) {
		t.Fatal("second Start while running returned true")
	}
	l.Stop()
	l.Stop() // twice: no-op
	if got := runs.Load(); got != 1 {
		t.Fatalf("runs = %d, want 1", got)
	}
	// Restartable after Stop.
	done := make(chan struct{})
	if !l.Start(context.Background(), func(ctx context.Context) { close(done); <-ctx.Done() }) {
		t.Fatal("Start after Stop returned false")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("restarted loop never ran")
	}
	l.Stop()
}

func TestWakeCoalesces(t *testing.T) {
	t.Parallel()
	ch := make(chan struct{}, 1)
	for range 10 {
		Wake(ch)
	}
	if len(ch) != 1 {
		t.Fatalf("len = %d, want 1", len(ch))
	}
}

// TestLoopRunning: Running is true while run runs, and false once it has
// returned: after Stop, after the parent context ends, or by itself.
func TestLoopRunning(t *testing.T) {
	t.Parallel()
	var l Loop
	if l.Running() {
		t.Fatal("Running before Start")
	}
	parent, cancel := context.WithCancel(context.Background())
	l.Start(parent, func(ctx context.Context) { <-ctx.Done() })
	if !l.Running() {
		t.Fatal("not Running after Start")
	}
	cancel()
	waitUntil(t, "the loop to end with its parent", func() bool { return !l.Running() })
	l.Stop()

	returned := make(chan struct{})
	l.Start(context.Background(), func(context.Context) { close(returned) })
	<-returned
	waitUntil(t, "a loop that returned by itself to report so", func() bool { return !l.Running() })
	l.Stop()

	l.Start(context.Background(), func(ctx context.Context) { <-ctx.Done() })
	l.Stop()
	if l.Running() {
		t.Fatal("Running after Stop")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a flag set by another goroutine
	}
}
