package breaker_test

import (
	"testing"
	"time"

	"github.com/convergeplane/converge/dispatch/breaker"
)

func TestBreaker(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	b := breaker.New(breaker.Config{Failures: 3, Cooldown: 10 * time.Second, MaxCooldown: 25 * time.Second})

	check := func(now time.Time, want breaker.State, wantCap int) {
		t.Helper()
		if got := b.State(now); got != want {
			t.Fatalf("state at +%s = %s, want %s", now.Sub(t0), got, want)
		}
		if got := b.Capacity(now); got != wantCap {
			t.Fatalf("capacity at +%s = %d, want %d", now.Sub(t0), got, wantCap)
		}
	}

	check(t0, breaker.Closed, -1)
	b.Failure(t0, false)
	b.Failure(t0, false)
	b.Success() // a success resets the consecutive count
	b.Failure(t0, false)
	b.Failure(t0, false)
	check(t0, breaker.Closed, -1)
	b.Failure(t0, false)
	check(t0, breaker.Open, 0)
	if ok, _ := b.Allow(t0.Add(9 * time.Second)); ok {
		t.Fatal("open breaker allowed a request")
	}

	// Cooldown elapsed: exactly one trial.
	t1 := t0.Add(10 * time.Second)
	check(t1, breaker.HalfOpen, 1)
	ok, trial := b.Allow(t1)
	if !ok || !trial {
		t.Fatalf("half-open Allow = %v, %v; want the trial", ok, trial)
	}
	check(t1, breaker.HalfOpen, 0)
	if ok, _ := b.Allow(t1); ok {
		t.Fatal("a second trial was allowed")
	}

	// A failed trial re-opens with the cooldown doubled (20s).
	b.Failure(t1, true)
	check(t1.Add(19*time.Second), breaker.Open, 0)
	t2 := t1.Add(20 * time.Second)
	check(t2, breaker.HalfOpen, 1)

	// An abandoned trial frees the slot.
	_, trial = b.Allow(t2)
	b.Abandon(trial)
	check(t2, breaker.HalfOpen, 1)

	// The cooldown is capped (25s, not 40s).
	_, trial = b.Allow(t2)
	b.Failure(t2, trial)
	check(t2.Add(25*time.Second), breaker.HalfOpen, 1)

	// A successful trial closes it and resets the cooldown.
	_, trial = b.Allow(t2.Add(25 * time.Second))
	if !trial {
		t.Fatal("no trial")
	}
	b.Success()
	check(t2.Add(25*time.Second), breaker.Closed, -1)
	t3 := t2.Add(time.Minute)
	for range 3 {
		b.Failure(t3, false)
	}
	check(t3.Add(9*time.Second), breaker.Open, 0)
	check(t3.Add(10*time.Second), breaker.HalfOpen, 1)
}
