// Package breaker is the per-endpoint circuit breaker: it sheds an endpoint
// that keeps failing so its tasks stop burning attempts against it, and lets
// a single trial through now and then to find out when it recovers.
//
// States:
//
//	closed ──N consecutive failures──▶ open ──cooldown elapsed──▶ half-open
//	  ▲                                  ▲                           │
//	  └──────────trial succeeds──────────┼───────────────────────────┘
//	                                     └────trial fails (cooldown doubles)
//
// Closed lets everything through and counts consecutive failures; any
// success resets the count. Open lets nothing through until the cooldown
// elapses. Half-open lets exactly one trial through (a task delivery or a
// health probe); its success closes the breaker and resets the cooldown, its
// failure re-opens it with the cooldown doubled (up to MaxCooldown). A trial
// that ends without a verdict (cancelled, rate-limited) gives the slot back.
//
// What counts as a failure is the caller's call; the dispatcher counts
// network errors, timeouts, 3xx and 5xx, not 4xx or 429.
package breaker

import (
	"cmp"
	"sync"
	"time"
)

// State is the breaker's state. The values are the endpoint_breaker_state
// metric's.
type State int

// The states.
const (
	Closed   State = 0
	HalfOpen State = 1
	Open     State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "unknown"
}

// Config tunes a Breaker. Zero fields take the defaults.
type Config struct {
	// Failures is how many consecutive failures open the breaker.
	// Defaults to 5.
	Failures int
	// Cooldown is how long the breaker stays open before a trial. It doubles
	// on each failed trial. Defaults to 10s.
	Cooldown time.Duration
	// MaxCooldown caps the doubled cooldown. Defaults to 5m.
	MaxCooldown time.Duration
}

// Defaults for Config.
const (
	FailuresDefault    = 5
	CooldownDefault    = 10 * time.Second
	MaxCooldownDefault = 5 * time.Minute
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Failures = cmp.Or(c.Failures, FailuresDefault)
	c.Cooldown = cmp.Or(c.Cooldown, CooldownDefault)
	c.MaxCooldown = max(cmp.Or(c.MaxCooldown, MaxCooldownDefault), c.Cooldown)
	return c
}

// Breaker is one endpoint's breaker. It is safe for concurrent use.
type Breaker struct {
	cfg Config

	mu       sync.Mutex
	open     bool      // open or half-open
	until    time.Time // while open: when a trial may start
	cooldown time.Duration
	trial    bool // a half-open trial is in flight
	failures int  // consecutive, while closed
}

// New returns a closed breaker.
func New(cfg Config) *Breaker {
	cfg = cfg.WithDefaults()
	return &Breaker{cfg: cfg, cooldown: cfg.Cooldown}
}

// State reports the state at now: HalfOpen once the cooldown has elapsed,
// whether or not the trial has started.
func (b *Breaker) State(now time.Time) State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateLocked(now)
}

func (b *Breaker) stateLocked(now time.Time) State {
	switch {
	case !b.open:
		return Closed
	case now.Before(b.until):
		return Open
	}
	return HalfOpen
}

// Capacity reports how many requests may start now: -1 for unlimited
// (closed), 1 when a trial may start, 0 otherwise.
func (b *Breaker) Capacity(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(now) {
	case Closed:
		return -1
	case HalfOpen:
		if !b.trial {
			return 1
		}
	}
	return 0
}

// Allow reports whether a request may start now; in half-open it admits the
// one trial, which the caller must end with Success, Failure or Abandon.
// It returns trial=true for that request.
func (b *Breaker) Allow(now time.Time) (ok, trial bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(now) {
	case Closed:
		return true, false
	case HalfOpen:
		if !b.trial {
			b.trial = true
			return true, true
		}
	}
	return false, false
}

// Success records a success: it closes the breaker.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open, b.trial, b.failures = false, false, 0
	b.cooldown = b.cfg.Cooldown
}

// Failure records a failure at now. A failed trial re-opens the breaker with
// a doubled cooldown; while closed, the Failures-th consecutive failure opens
// it. A failure of a request started before the breaker opened changes
// nothing.
func (b *Breaker) Failure(now time.Time, trial bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case trial:
		b.trial = false
		b.cooldown = min(b.cooldown*2, b.cfg.MaxCooldown)
		b.open, b.until = true, now.Add(b.cooldown)
	case !b.open:
		b.failures++
		if b.failures >= b.cfg.Failures {
			b.open, b.until, b.failures = true, now.Add(b.cooldown), 0
		}
	}
}

// Abandon ends a trial without a verdict, so another may start.
func (b *Breaker) Abandon(trial bool) {
	if !trial {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.trial = false
}

// Until returns when an open breaker admits its next trial (zero if closed).
func (b *Breaker) Until() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return time.Time{}
	}
	return b.until
}
