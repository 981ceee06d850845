// Package health is the dispatch pod's readiness prober. Each endpoint with
// a health URL gets a signed POST {"type":"health"} on a jittered interval
// and must answer 200 {"kinds": [{"kind", "kind_version", "ready"}]}; the
// answers feed the registry, which flips each (kind, kind_version) ready or
// unready after a run of agreeing results. A probe is also a circuit
// breaker's trial while the breaker is half-open.
//
// Every pod probes the endpoints itself: readiness is a local view, so a
// network partition between one pod and one endpoint parks that endpoint's
// kinds on that pod only.
package health

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/registry"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/internal/startstop"
	"github.com/convergeplane/converge/webhooksdk"
)

// Config tunes a Prober. Zero fields take the defaults.
type Config struct {
	// Timeout bounds one probe. Defaults to 5s.
	Timeout time.Duration
	// Jitter spreads each interval by ±Jitter (a fraction), so pods and
	// endpoints do not probe in lockstep. Defaults to 0.2.
	Jitter float64
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// Defaults for Config.
const (
	TimeoutDefault = 5 * time.Second
	JitterDefault  = 0.2
)

// Prober probes the registry's endpoints until stopped.
type Prober struct {
	cfg     Config
	reg     *registry.Registry
	changed <-chan struct{}
	loop    startstop.Loop
}

// New returns a Prober for reg's endpoints.
func New(cfg Config, reg *registry.Registry) *Prober {
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Jitter <= 0 || cfg.Jitter >= 1 {
		cfg.Jitter = JitterDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Prober{cfg: cfg, reg: reg, changed: reg.Subscribe()}
}

// Start launches the probe loop. A newly seen endpoint is probed at once.
func (p *Prober) Start(ctx context.Context) error {
	p.loop.Start(ctx, p.run)
	return nil
}

// Stop stops probing and waits for probes in flight.
func (p *Prober) Stop() { p.loop.Stop() }

func (p *Prober) run(ctx context.Context) {
	var (
		wg      sync.WaitGroup
		cur     = map[*registry.Endpoint]registry.Probe{}
		next    = map[*registry.Endpoint]time.Time{}
		running = map[*registry.Endpoint]bool{}
		done    = make(chan *registry.Endpoint)
	)
	defer wg.Wait()
	resync := func() {
		fresh := map[*registry.Endpoint]registry.Probe{}
		for _, pr := range p.reg.Probes() {
			fresh[pr.Endpoint] = pr
			if _, ok := next[pr.Endpoint]; !ok {
				next[pr.Endpoint] = time.Now()
			}
		}
		for e := range next {
			if _, ok := fresh[e]; !ok {
				delete(next, e)
			}
		}
		cur = fresh
	}
	resync()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		earliest := now.Add(time.Hour)
		for e, at := range next {
			if running[e] {
				continue
			}
			if !at.After(now) {
				running[e] = true
				pr := cur[e]
				wg.Add(1)
				go func() {
					defer wg.Done()
					e.ReportProbe(p.Probe(ctx, pr))
					select {
					case done <- e:
					case <-ctx.Done():
					}
				}()
				continue
			}
			earliest = minTime(earliest, at)
		}
		timer.Reset(time.Until(earliest))
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
			resync()
		case e := <-done:
			delete(running, e)
			if pr, ok := cur[e]; ok {
				next[e] = time.Now().Add(p.jitter(pr.Interval))
			}
		case <-timer.C:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (p *Prober) jitter(d time.Duration) time.Duration {
	f := 1 + p.cfg.Jitter*(2*rand.Float64()-1) // jitter, not security
	return time.Duration(float64(d) * f)
}

var probeBody = []byte(`{"type":"health"}`) // constant bytes

// Probe sends one signed health probe and reads the answer.
func (p *Prober) Probe(ctx context.Context, pr registry.Probe) registry.ProbeResult {
	a := Send(ctx, pr, p.cfg.Timeout)
	if a.Err != nil {
		return registry.ProbeResult{Err: a.Err}
	}
	return registry.ProbeResult{Ready: a.Ready}
}

// Timeout is how long one probe may take (Config.Timeout).
func (p *Prober) Timeout() time.Duration { return p.cfg.Timeout }

// Answer is the round trip of one signed health request.
type Answer struct {
	// Status is the answer's HTTP status; 0 when none came.
	Status int
	// Latency is from sending to the answer (or to the failure).
	Latency time.Duration
	// Class is "ok" for a healthy answer (200, readable), else its
	// failure class, named as the delivery log names an attempt's:
	// rate_limited, redirect, client_error, server_error, too_large,
	// malformed, timeout, blocked, gone or network.
	Class string
	// Ready is the readiness the endpoint reported per
	// "kind/kind_version" (Class ok).
	Ready map[string]bool
	// Excerpt is the answer body's first bytes, or the reason no answer
	// came.
	Excerpt string
	// Err is why the answer is not a healthy one, as a probe reports it;
	// nil when Class is ok.
	Err error
}

// Send POSTs one signed {"type":"health"} (docs/protocol.md §10) to pr's
// health target within timeout and reads the answer: the probe's round
// trip, for the prober and for an operator's test delivery.
func Send(ctx context.Context, pr registry.Probe, timeout time.Duration) Answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := time.Now()
	msgID := "msg_health_" + randomHex()
	resp, err := pr.Target.Deliver(ctx, &transport.Delivery{
		MsgID: msgID, Timestamp: now, Body: probeBody,
		Signature: pr.Endpoint.Sign(msgID, now, probeBody),
	})
	a := Answer{Latency: time.Since(now)}
	if err != nil {
		// Shown as its class (dns, refused, tls…): the error itself names
		// the pod's resolver and addresses; the registry logs it.
		a.Err = &transport.NoAnswerError{Err: err}
		a.Class, a.Excerpt = noAnswerClass(err), a.Err.Error()
		return a
	}
	a.Status, a.Excerpt = resp.Status, excerpt(resp.Body)
	switch {
	case resp.Status != http.StatusOK:
		a.Class = statusClass(resp.Status)
		a.Err = fmt.Errorf("answered %d %s: %s", resp.Status, http.StatusText(resp.Status), a.Excerpt)
	case resp.Truncated:
		a.Class, a.Err = "too_large", fmt.Errorf("answer exceeds %d bytes", len(resp.Body))
	default:
		if a.Ready, err = readiness(resp.Body); err != nil {
			a.Class, a.Err = "malformed", err
		} else {
			a.Class = "ok"
		}
	}
	return a
}

// noAnswerClass classifies a request that got no answer.
func noAnswerClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, egress.ErrBlocked):
		return "blocked"
	case errors.As(err, new(*transport.UnavailableError)):
		return "gone"
	}
	return "network"
}

// statusClass classifies an answer other than 200.
func statusClass(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limited"
	case status >= 300 && status < 400:
		return "redirect"
	case status >= 400 && status < 500:
		return "client_error"
	case status >= 500:
		return "server_error"
	}
	return "malformed"
}

// readiness decodes a probe's 200 answer, a webhooksdk.HealthResponse,
// into each pair's readiness, keyed "kind/kind_version".
func readiness(body []byte) (map[string]bool, error) {
	var hr webhooksdk.HealthResponse
	if err := json.Unmarshal(body, &hr); err != nil {
		return nil, fmt.Errorf("unreadable answer: %v", err)
	}
	ready := make(map[string]bool, len(hr.Kinds))
	for _, k := range hr.Kinds {
		ready[fmt.Sprintf("%s/%d", k.Kind, k.KindVersion)] = k.Ready
	}
	return ready, nil
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b[:min(len(b), 200)]), "?"))
	if s == "" {
		return "(empty body)"
	}
	return s
}

func randomHex() string {
	var b [12]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
