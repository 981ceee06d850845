package registry

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/breaker"
	"github.com/convergeplane/converge/dispatch/transport"
)

// EndpointStatus is an endpoint's runtime state on this pod, for the
// endpoint detail and the metrics.
type EndpointStatus struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled"`
	// Unusable says why no delivery can be made (bad secret, refused
	// target, bad TLS files); "" if usable.
	Unusable string `json:"unusable,omitempty"`
	InFlight int    `json:"in_flight"`
	// Limit is this pod's share of max_concurrency.
	Limit        int           `json:"limit"`
	Breaker      breaker.State `json:"-"`
	BreakerState string        `json:"breaker_state" enum:"closed,half-open,open"`
	BreakerUntil *time.Time    `json:"breaker_until,omitempty"`
	BackoffUntil *time.Time    `json:"backoff_until,omitempty"`
	BackoffWhy   string        `json:"backoff_reason,omitempty"`
	// RateLimit is the configured requests per second (0: unlimited),
	// EffectiveRate the rate as this pod's last lease said (lower while an
	// adaptive endpoint recovers from a throttle), RateTokens the tokens
	// this pod holds, RateWaited the requests it sent only after waiting
	// for a token, and RateLeases the leases of the shared bucket it
	// started (each one database round trip).
	RateLimit     float64         `json:"rate_limit,omitempty"`
	EffectiveRate float64         `json:"effective_rate,omitempty"`
	RateTokens    int             `json:"rate_tokens,omitempty"`
	RateWaited    int64           `json:"rate_waited,omitempty"`
	RateLeases    int64           `json:"rate_leases,omitempty"`
	LastProbe     *time.Time      `json:"last_probe,omitempty"`
	ProbeError    string          `json:"probe_error,omitempty"`
	Kinds         []PairReadiness `json:"kinds"`
}

// PairReadiness is whether the endpoint takes one pair's tasks now.
type PairReadiness struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
	Ready       bool   `json:"ready"`
	Reason      string `json:"reason,omitempty"`
}

// Status returns every endpoint's runtime state, by name.
func (r *Registry) Status() []EndpointStatus {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]EndpointStatus, 0, len(r.eps))
	for _, e := range r.eps {
		out = append(out, e.statusLocked(now))
	}
	slices.SortFunc(out, func(a, b EndpointStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// EndpointStatus returns one endpoint's runtime state.
func (r *Registry) EndpointStatus(name string) (EndpointStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.eps[name]
	if !ok {
		return EndpointStatus{}, false
	}
	return e.statusLocked(time.Now()), true
}

func (e *Endpoint) statusLocked(now time.Time) EndpointStatus {
	c := e.conf.Load()
	s := EndpointStatus{
		Name: e.name, Enabled: c.cfg.Enabled && e.goneReason == "", Unusable: c.unusable,
		InFlight: e.inflight, Limit: e.reg.limit(c), Breaker: e.breaker.State(now), ProbeError: e.probeErr,
	}
	s.BreakerState = s.Breaker.String()
	s.RateLimit, s.EffectiveRate, s.RateTokens, s.RateWaited, s.RateLeases = e.rate.rate, e.rate.effective, e.rate.tokens, e.rate.waitedTotal, e.rate.leases
	if u := e.breaker.Until(); !u.IsZero() {
		s.BreakerUntil = &u
	}
	if now.Before(e.backoffUntil) {
		u := e.backoffUntil
		s.BackoffUntil, s.BackoffWhy = &u, e.backoffWhy
	}
	if !e.lastProbe.IsZero() {
		p := e.lastProbe
		s.LastProbe = &p
	}
	for _, k := range c.cfg.Kinds {
		_, why := e.capacityLocked(k.Pair(), now)
		s.Kinds = append(s.Kinds, PairReadiness{Kind: k.Kind, KindVersion: k.KindVersion, Ready: why == "", Reason: why})
	}
	return s
}

// Probe is one endpoint's health-probe assignment, for the prober.
type Probe struct {
	Endpoint *Endpoint
	Target   transport.Target
	Interval time.Duration
}

// Probes returns the endpoints to probe: enabled, usable, with a health URL.
func (r *Registry) Probes() []Probe {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Probe
	for _, e := range r.eps {
		c := e.conf.Load()
		if c.probe == nil || !c.cfg.Enabled || e.goneReason != "" {
			continue
		}
		iv := r.cfg.HealthInterval
		if c.cfg.Health.Type == store.HealthInvoke {
			iv = InvokeHealthIntervalDefault
		}
		if c.cfg.Health.IntervalSecs > 0 {
			iv = time.Duration(c.cfg.Health.IntervalSecs) * time.Second
		}
		out = append(out, Probe{Endpoint: e, Target: c.probe, Interval: iv})
	}
	slices.SortFunc(out, func(a, b Probe) int { return cmp.Compare(a.Endpoint.name, b.Endpoint.name) })
	return out
}

// ProbeOf returns endpoint name's health-probe assignment, enabled or
// not, for a probe sent on demand; false when this pod does not know the
// endpoint or it has no health target (health type none).
func (r *Registry) ProbeOf(name string) (Probe, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.eps[name]
	if !ok {
		return Probe{}, false
	}
	c := e.conf.Load()
	if c.probe == nil {
		return Probe{}, false
	}
	return Probe{Endpoint: e, Target: c.probe}, true
}

// ProbeResult is one health probe's answer: Err if the probe failed (no
// answer, a non-200, an unreadable body), else the readiness the endpoint
// reported per "kind/version". Err's text is what readers of the
// endpoint's state are shown: a probe that got no answer carries a
// *transport.NoAnswerError, whose text is the classified reason and whose
// cause ReportProbe logs when the reason changes.
type ProbeResult struct {
	Err   error
	Ready map[string]bool
}

// ReportProbe records a probe result: each served pair's readiness moves
// after the configured run of agreeing results (the first result decides at
// once). A probe is also the breaker's trial when it is half-open: a
// healthy answer closes it, a failed probe re-opens it.
//
// Until the endpoint has first answered a probe properly (at its current
// health URL), a failed probe counts for nothing: not against the breaker
// (its trial is given back) and not as a first, deciding result. A provider
// commonly fails its first probes while it is being set up — it does not
// hold the signing secret yet — and that must not delay it once it answers.
// Its pairs stay unready meanwhile, with the failure as the reason.
func (e *Endpoint) ReportProbe(res ProbeResult) {
	now := time.Now()
	r := e.reg
	r.mu.Lock()
	early := res.Err != nil && !e.probedHealthy
	if res.Err == nil {
		e.probedHealthy = true
	}
	r.mu.Unlock()

	switch e.breaker.State(now) {
	case breaker.HalfOpen:
		if ok, trial := e.breaker.Allow(now); ok && trial {
			switch {
			case res.Err == nil:
				e.breaker.Success()
				e.breakerAlert(breaker.HalfOpen, e.breaker.State(now))
			case early:
				e.breaker.Abandon(trial)
			default:
				e.breaker.Failure(now, true)
			}
		}
	case breaker.Closed, breaker.Open:
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	e.lastProbe = now
	was := e.probeErr
	e.probeErr = ""
	if res.Err != nil {
		e.probeErr = res.Err.Error()
	}
	if na, ok := errors.AsType[*transport.NoAnswerError](res.Err); ok && e.probeErr != was {
		r.cfg.Logger.Warn("endpoint health probe got no answer", "endpoint", e.name, "reason", e.probeErr, "err", na.Err)
	}
	if e.health == nil {
		return
	}
	if early {
		for _, h := range e.health {
			h.reason = "not healthy yet: health probe failed: " + res.Err.Error()
		}
		return
	}
	c := e.conf.Load()
	up := cmp.Or(c.cfg.Health.HealthyThreshold, r.cfg.HealthyThreshold)
	down := cmp.Or(c.cfg.Health.UnhealthyThreshold, r.cfg.UnhealthyThreshold)
	changed := false
	for pair, h := range e.health {
		ready, listed := res.Ready[pair]
		ok := res.Err == nil && ready
		if ok {
			h.okRun++
			h.failRun = 0
		} else {
			h.failRun++
			h.okRun = 0
			switch {
			case res.Err != nil:
				h.reason = "health probe failed: " + res.Err.Error()
			case !listed:
				h.reason = fmt.Sprintf("its health answer does not list %s", pair)
			default:
				h.reason = fmt.Sprintf("it reports %s not ready", pair)
			}
		}
		was, wasKnown := h.ready, h.known
		switch {
		case !h.known:
			h.known, h.ready = true, ok
		case ok && !h.ready && h.okRun >= up:
			h.ready = true
		case !ok && h.ready && h.failRun >= down:
			h.ready = false
		}
		changed = changed || h.ready != was
		if !h.ready && (was || !wasKnown) {
			e.parkAlertLocked(pair, h.reason, now)
		}
	}
	if changed {
		r.notifyLocked()
	}
}

// parkAlertLocked queues kind.parked when pair, just turned unready at the
// endpoint, has no ready endpoint left on this pod: its resources park.
func (e *Endpoint) parkAlertLocked(pair, reason string, now time.Time) {
	r := e.reg
	for _, o := range r.byPair[pair] {
		if n, why := o.capacityLocked(pair, now); why == "" || n > 0 {
			return
		}
	}
	kind, v, _ := strings.Cut(pair, "/")
	version, _ := strconv.Atoi(v)
	r.alert(store.AlertEvent{Type: store.AlertKindParked, Endpoint: e.name, Kind: kind, KindVersion: version,
		Message: fmt.Sprintf("%s parked: no ready endpoint; endpoint %s: %s", pair, e.name, reason)})
}
