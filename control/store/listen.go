package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"

	"github.com/convergeplane/converge/internal/startstop"
)

// Listener holds one connection LISTENing on a set of channels and fans each
// notification out to subscribers as a coalesced wake (buffer 1, never
// blocking). A notification is a latency hint, never a source of truth:
// subscribers also poll. On every (re)connect all subscribers are woken, since
// notifications sent while disconnected are lost.
type Listener struct {
	store *Store
	log   *slog.Logger
	loop  startstop.Loop

	mu   sync.Mutex
	subs map[string][]chan struct{}
}

// NewListener returns a Listener over the store's pool.
func (s *Store) NewListener(log *slog.Logger) *Listener {
	return &Listener{store: s, log: log, subs: map[string][]chan struct{}{}}
}

// Subscribe returns a channel woken on each notification of channel. Call it
// before Start.
func (l *Listener) Subscribe(channel string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	l.subs[channel] = append(l.subs[channel], ch)
	l.mu.Unlock()
	return ch
}

// Start begins listening.
func (l *Listener) Start(ctx context.Context) error {
	l.loop.Start(ctx, l.run)
	return nil
}

// Stop stops listening and releases the connection.
func (l *Listener) Stop() { l.loop.Stop() }

// Running reports whether the listen loop runs (for readiness); it keeps
// running, reconnecting, while the connection is down.
func (l *Listener) Running() bool { return l.loop.Running() }

func (l *Listener) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, bo)
		if ctx.Err() != nil {
			return
		}
		wait := bo.NextBackOff()
		l.log.Warn("listener connection lost; reconnecting", "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (l *Listener) listenOnce(ctx context.Context, bo backoff.BackOff) error {
	conn, err := l.store.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection carries LISTEN state; never hand it back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx)) // closing a dead conn
	l.mu.Lock()
	channels := make([]string, 0, len(l.subs))
	for ch := range l.subs {
		channels = append(channels, ch)
	}
	l.mu.Unlock()
	for _, ch := range channels {
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	bo.Reset()
	for _, ch := range channels {
		l.fire(ch)
	}
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		l.fire(n.Channel)
	}
}

func (l *Listener) fire(channel string) {
	l.mu.Lock()
	subs := l.subs[channel]
	l.mu.Unlock()
	for _, ch := range subs {
		startstop.Wake(ch)
	}
}
