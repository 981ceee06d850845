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
