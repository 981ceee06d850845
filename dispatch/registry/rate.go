package registry

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Rate limits (docs/operations.md "Rate limits"). An endpoint with a
// rate_limit has one token bucket shared by every dispatch pod, a row of
// endpoint_rate_buckets. A pod never asks the database per request: it
// leases a chunk of tokens (about rateChunkPeriod's worth at the effective
// rate) and spends them locally, one per request (a batch is one request),
// leasing the next chunk ahead, when half the chunk is spent. While the pod
// holds no token its endpoint takes no claim; when the bucket is dry the
// lease says how long until it holds a chunk again, and until then the
// endpoint's pairs say "rate limited".
//
// Worst case: tokens leave the bucket no faster than its rule allows
// (burst + rate·w in any window w), and a pod holds at most
// 1.5 chunks it leased earlier; so in any window w every pod together sends
// at most burst + rate·w + pods·1.5·chunk requests. A pod that dies strands
// the tokens it held (at most 1.5 chunks): they are never sent.

const (
	// rateChunkPeriod is the time's worth of tokens (at the effective rate)
	// a pod leases at once.
	rateChunkPeriod = 100 * time.Millisecond
	// rateLeaseTimeout bounds one lease.
	rateLeaseTimeout = 5 * time.Second
	// rateLeaseRetry is how long a pod whose lease failed (the database
	// is unreachable) sends nothing to the endpoint before trying again.
	rateLeaseRetry = time.Second
	// rateDemand is how long after its last request an endpoint is still
	// busy: when the bucket fills again, its next chunk is leased at once.
	rateDemand = time.Second
)

// limiter is an endpoint's rate limit on this pod: the tokens it leased and
// has not spent. Guarded by reg.mu.
type limiter struct {
	rate      float64 // configured requests per second; 0 = unlimited
	burst     int
	effective float64 // as the last lease said
	tokens    int     // leased, unspent
	// waitedChunk: the tokens in hand were leased after a lease came back
	// short (the bucket ran dry), so the requests they send waited.
	waitedChunk bool
	short       bool      // the last lease granted less than it asked
	waited      int64     // requests sent on waited tokens, to report with the next lease
	waitedTotal int64     // requests this pod sent after waiting (the metric)
	dryUntil    time.Time // the bucket is dry until then: no lease, no claim
	leasing     bool      // a lease is in flight
	wanted      bool      // a delivery waits for a token
	lastSpend   time.Time
	leases      int64 // leases this pod started (database round trips)
}

// limited reports whether the endpoint has a rate limit.
func (l *limiter) limited() bool { return l.rate > 0 }

// chunk is how many tokens a lease asks for: rateChunkPeriod's worth at
// the effective rate, at least 1, at most the burst.
func (l *limiter) chunk() int {
	eff := l.effective
	if eff <= 0 {
		eff = l.rate
	}
	return max(1, min(int(math.Ceil(eff*rateChunkPeriod.Seconds())), l.burst))
}

// configureRateLocked takes the endpoint's rate settings; a changed limit
// drops the tokens leased under the old one (a lease in flight still lands).
func (e *Endpoint) configureRateLocked(rate *float64, burst *int) {
	l := &e.rate
	r, b := 0.0, 0
	if rate != nil && burst != nil {
		r, b = *rate, *burst
	}
	if r == l.rate && b == l.burst {
		return
	}
	*l = limiter{rate: r, burst: b, effective: r, waitedTotal: l.waitedTotal, leases: l.leases, leasing: l.leasing}
}

// rateCapacityLocked returns how many requests the rate limit lets the
// endpoint start now (-1: unlimited), or 0 and why not. With no token in
// hand and the bucket not known to be dry it allows one: a claim that
// finds work makes the delivery ask for a lease (Acquire), so an idle
// endpoint leases nothing.
func (e *Endpoint) rateCapacityLocked(now time.Time) (int, string) {
	l := &e.rate
	switch {
	case !l.limited():
		return -1, ""
	case l.tokens > 0:
		return l.tokens, ""
	case now.Before(l.dryUntil):
		return 0, fmt.Sprintf("endpoint %s is rate limited (%s requests/s): no token before %s", e.name,
			rateText(l.effective, l.rate), l.dryUntil.UTC().Format("15:04:05.000"))
	case l.leasing:
		return 0, "" // saturated for a moment: tokens are on their way
	}
	return 1, ""
}

// rateText is the effective rate, and the configured one when lower.
func rateText(eff, rate float64) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	if eff > 0 && eff < rate {
		return f(eff) + " of " + f(rate)
	}
	return f(rate)
}

// hasTokenLocked reports whether the rate limit lets a request start now;
// with no token in hand it asks for a lease, whose arrival wakes the claim
// loop.
func (e *Endpoint) hasTokenLocked(now time.Time) bool {
	l := &e.rate
	if !l.limited() || l.tokens > 0 {
		return true
	}
	l.wanted = true
	if !l.leasing && !now.Before(l.dryUntil) {
		e.leaseLocked()
	}
	return false
}

// takeTokenLocked spends a token for one request (hasTokenLocked said
// there is one). Leasing the next chunk starts when half of this one is
// spent.
func (e *Endpoint) takeTokenLocked(now time.Time) {
	l := &e.rate
	if !l.limited() {
		return
	}
	l.tokens--
	l.lastSpend = now
	if l.waitedChunk {
		l.waited++
		l.waitedTotal++
	}
	if !l.leasing && 2*l.tokens <= l.chunk() && !now.Before(l.dryUntil) {
		e.leaseLocked()
	}
}

// goLocked runs f in the background until the registry stops; false once
// it has.
func (r *Registry) goLocked(f func(ctx context.Context)) bool {
	if r.stopped {
		return false
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		f(r.bgCtx)
	}()
	return true
}

// leaseLocked starts leasing a chunk.
func (e *Endpoint) leaseLocked() {
	l := &e.rate
	want, waited := l.chunk(), l.waited
	if e.reg.goLocked(func(ctx context.Context) { e.lease(ctx, want, waited) }) {
		l.leasing, l.waited = true, 0
		l.leases++
	}
}

// lease takes up to want tokens from the shared bucket, reporting waited
// requests, and wakes the claim loop with what it got.
func (e *Endpoint) lease(ctx context.Context, want int, waited int64) {
	ctx, cancel := context.WithTimeout(ctx, rateLeaseTimeout)
	got, err := e.reg.st.LeaseRateTokens(ctx, e.name, want, waited)
	cancel()
	r := e.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &e.rate
	l.leasing = false
	now := time.Now()
	if err != nil {
		if r.stopped {
			return
		}
		r.cfg.Logger.Error("cannot lease rate-limit tokens; holding the endpoint's deliveries back", "endpoint", e.name, "err", err)
		l.waited += waited
		e.dryLocked(now.Add(rateLeaseRetry))
		return
	}
	if !l.limited() {
		return // the limit was removed meanwhile
	}
	if got.Effective > 0 {
		l.effective = got.Effective
	}
	l.tokens += got.Granted
	if got.Granted > 0 {
		l.waitedChunk = l.short
		l.dryUntil, l.wanted = time.Time{}, false
	}
	l.short = got.Granted < want
	if got.Granted == 0 {
		e.dryLocked(now.Add(max(got.Wait, time.Millisecond)))
		return
	}
	r.notifyLocked()
}

// dryLocked holds the endpoint back until until, then leases again if a
// delivery waits or it was busy, and wakes the claim loop either way.
func (e *Endpoint) dryLocked(until time.Time) {
	e.rate.dryUntil = until
	r := e.reg
	r.notifyLocked()
	time.AfterFunc(time.Until(until), func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		l := &e.rate
		now := time.Now()
		if r.stopped || e.removed || !l.limited() || l.leasing || l.tokens > 0 || now.Before(l.dryUntil) {
			return
		}
		if l.wanted || now.Sub(l.lastSpend) < rateDemand {
			e.leaseLocked()
			return
		}
		r.notifyLocked()
	})
}

// Throttled records that the endpoint's provider throttled a request (a
// 429, or a Lambda TooManyRequests). On a rate-limited endpoint it drops
// the tokens this pod holds and reports the throttle to the shared bucket,
// where an adaptive endpoint's rate is lowered for every pod.
func (e *Endpoint) Throttled() {
	r := e.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	if !e.rate.limited() {
		return
	}
	e.rate.tokens = 0
	r.goLocked(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, rateLeaseTimeout)
		eff, err := r.st.ReportRateThrottle(ctx, e.name)
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case err != nil && !r.stopped:
			r.cfg.Logger.Error("cannot report a throttle to the endpoint's shared rate limit", "endpoint", e.name, "err", err)
		case err == nil && eff > 0 && e.rate.limited():
			e.rate.effective = eff
		}
	})
}
