// Package reaper runs the control plane's backstop passes on a timer: it
// reclaims tasks whose lease lapsed (a dead dispatcher), re-schedules lagging
// resources the reactive cascade missed (crash recovery), drops work nobody
// claimed for a long window, recounts per-kind in-flight caps, sweeps
// orphans whose grace expired, re-pends resources of kinds that resync,
// bounds per-resource event logs, and prunes the delivery log by age and
// per endpoint by count, drops expired idempotency keys, and prunes the
// audit trail by age. Every pass
// is shard-range scoped, SKIP LOCKED, and probes an index that is empty on a
// settled fleet, so an idle tick costs a few index lookups.
package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/startstop"
)

// Config tunes a Reaper. Zero fields take the defaults below.
type Config struct {
	// Range returns the shard range to reap. Defaults to every shard.
	Range func() (lo, hi int)
	// Interval between ticks. Defaults to 5s.
	Interval time.Duration
	// RetryWindow is how long a lagging resource with no live task waits
	// before the reaper re-schedules it. Defaults to 30s. That sweep scans
	// the range's resources (no index may mention synced_gen, or the drain's
	// updates could not be HOT), so a sweep starts at most every
	// RetryWindow/4; one that finds a full Limit goes on over the next
	// passes until a call comes back short.
	RetryWindow time.Duration
	// UnclaimedWindow is how long a never-claimed task stays queued before
	// it is dropped. Defaults to 24h.
	UnclaimedWindow time.Duration
	// EventsKeep is how many events each resource keeps. Defaults to 100.
	EventsKeep int
	// Limit bounds each pass. Defaults to 1000.
	Limit int
	// MemberRetention is how long a member that stopped heartbeating stays
	// in the cluster view (as not ready) before it is forgotten. Defaults
	// to 1h.
	MemberRetention time.Duration
	// DeliveryMaxAge is how long the delivery log keeps an attempt.
	// Defaults to store.DeliveryLogMaxAgeDefault (168h).
	DeliveryMaxAge time.Duration
	// DeliveryKeep is how many attempts the delivery log keeps per
	// endpoint. Defaults to store.DeliveryLogKeepDefault (10,000).
	DeliveryKeep int
	// AuditRetention is how long the audit trail keeps a request; the
	// reaper prunes older ones with the delivery log. Defaults to
	// store.AuditRetentionDefault (90 days).
	AuditRetention time.Duration
	// DeliveryPruneEvery is the least time between two prunes of the
	// delivery log (the count prune walks each endpoint's newest
	// DeliveryKeep index entries). Defaults to 1m.
	DeliveryPruneEvery time.Duration
	// PhaseCountEvery is the interval of the resources-by-phase count
	// (converge_resources). Only the reaper whose range starts at shard 0
	// counts, the whole table, so the fleet counts once per interval.
	// Defaults to 30s; negative turns the count off.
	PhaseCountEvery time.Duration
	// PhaseCountTimeout is the count's statement timeout. Defaults to 10s.
	PhaseCountTimeout time.Duration
	// Metrics, if set, receives the converge_reaper_* metrics and
	// converge_resources.
	Metrics prometheus.Registerer
}

// Defaults for Config.
const (
	IntervalDefault          = 5 * time.Second
	RetryWindowDefault       = 30 * time.Second
	UnclaimedWindowDefault   = 24 * time.Hour
	EventsKeepDefault        = 100
	LimitDefault             = 1000
	MemberRetentionDefault   = time.Hour
	DeliveryPruneDefault     = time.Minute
	PhaseCountEveryDefault   = 30 * time.Second
	PhaseCountTimeoutDefault = 10 * time.Second
)

func (c Config) withDefaults() Config {
	if c.Range == nil {
		c.Range = func() (int, int) { return 0, 255 }
	}
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.RetryWindow = cmp.Or(c.RetryWindow, RetryWindowDefault)
	c.UnclaimedWindow = cmp.Or(c.UnclaimedWindow, UnclaimedWindowDefault)
	c.EventsKeep = cmp.Or(c.EventsKeep, EventsKeepDefault)
	c.Limit = cmp.Or(c.Limit, LimitDefault)
	c.MemberRetention = cmp.Or(c.MemberRetention, MemberRetentionDefault)
	c.DeliveryMaxAge = cmp.Or(c.DeliveryMaxAge, store.DeliveryLogMaxAgeDefault)
	c.DeliveryKeep = cmp.Or(c.DeliveryKeep, store.DeliveryLogKeepDefault)
	c.AuditRetention = cmp.Or(c.AuditRetention, store.AuditRetentionDefault)
	c.DeliveryPruneEvery = cmp.Or(c.DeliveryPruneEvery, DeliveryPruneDefault)
	c.PhaseCountEvery = cmp.Or(c.PhaseCountEvery, PhaseCountEveryDefault)
	c.PhaseCountTimeout = cmp.Or(c.PhaseCountTimeout, PhaseCountTimeoutDefault)
	return c
}

// Reaper is the reaper duty.
type Reaper struct {
	cfg     Config
	engine  *engine.Engine
	store   *store.Store // the delivery log, idempotency keys, audit trail, cluster members
	log     *slog.Logger
	loop    startstop.Loop
	eventWM int64
	swept   time.Time // the last lagging sweep
	pruned  time.Time // the last delivery log prune
	// resynced is when each resync kind ("kind/version") was last scanned
	// to the end.
	resynced map[string]time.Time
	m        metrics
}

// metrics are the reaper's: what its passes find is what a healthy fleet
// rarely needs, so a lasting rate of reclaims or requeues points at dying
// dispatchers or a lost cascade.
type metrics struct {
	lag       prometheus.Gauge
	passes    prometheus.Counter
	errors    prometheus.Counter
	duration  prometheus.Histogram
	reclaimed prometheus.Counter
	requeued  prometheus.Counter
	dropped   prometheus.Counter
	// resources is converge_resources: the phase count's last result, on
	// the one pod that counts.
	resources *prometheus.GaugeVec
}

func newMetrics() metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "converge", Subsystem: "reaper", Name: name, Help: help})
	}
	return metrics{
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "converge", Subsystem: "reaper", Name: "event_prune_lag",
			Help: "Event ids logged since this pod's event prune last looked (0 when caught up): a pod that falls behind a burst works it off over its next passes."}),
		passes: counter("passes_total", "Reaper passes run, failed ones included."),
		errors: counter("errors_total", "Reaper passes that failed (each is logged as \"reaper pass failed\")."),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "converge", Subsystem: "reaper", Name: "pass_duration_seconds",
			Help:    "Time one reaper pass took, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12), // 1ms .. ~24s
		}),
		reclaimed: counter("reclaimed_total", "Claimed tasks whose lease lapsed (a dead or stalled dispatcher), put back to pending."),
		requeued:  counter("requeued_total", "Lagging resources with no live task re-scheduled (work the reactive cascade missed, e.g. after a crash)."),
		dropped:   counter("dropped_unclaimed_total", "Tasks dropped because nobody claimed them within the unclaimed window."),
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "converge", Name: "resources",
			Help: "Resources by kind, kind_version and phase, counted periodically (every 30s by default) by the one control pod whose shard range starts at 0 (other pods export none)."},
			[]string{"kind", "kind_version", "phase"}),
	}
}

// New returns a Reaper. It fails only if cfg.Metrics refuses a metric.
func New(cfg Config, eng *engine.Engine, st *store.Store, log *slog.Logger) (*Reaper, error) {
	r := &Reaper{cfg: cfg.withDefaults(), engine: eng, store: st, log: log, eventWM: engine.EventPruneFromEnd, resynced: map[string]time.Time{},
		m: newMetrics()}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{r.m.lag, r.m.passes, r.m.errors, r.m.duration, r.m.reclaimed, r.m.requeued, r.m.dropped,
			r.m.resources} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("reaper metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Start launches the reaper loop.
func (r *Reaper) Start(ctx context.Context) error {
	r.loop.Start(ctx, r.run)
	return nil
}

// Stop stops the loop.
func (r *Reaper) Stop() { r.loop.Stop() }

// Running reports whether the reaper loop runs (for readiness).
func (r *Reaper) Running() bool { return r.loop.Running() }

func (r *Reaper) run(ctx context.Context) {
	if r.cfg.PhaseCountEvery > 0 {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() { defer close(done); r.countPhases(ctx) }()
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		tctx, cancel := context.WithTimeout(ctx, r.cfg.Interval*4)
		err := r.RunOnce(tctx)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			r.m.errors.Inc()
			r.log.Error("reaper pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// countPhases refreshes converge_resources every PhaseCountEvery while
// this reaper's range starts at shard 0, and drops its series while it does
// not, so one pod exports them. The count reads the whole table, apart
// from the passes: a slow count never delays a reclaim.
func (r *Reaper) countPhases(ctx context.Context) {
	t := time.NewTicker(r.cfg.PhaseCountEvery)
	defer t.Stop()
	for {
		if lo, _ := r.cfg.Range(); lo != 0 {
			r.m.resources.Reset()
		} else if counts, err := r.engine.ResourceCountByPhase(ctx, r.cfg.PhaseCountTimeout); err == nil {
			r.m.resources.Reset()
			for _, c := range counts {
				r.m.resources.WithLabelValues(c.Kind, strconv.Itoa(c.KindVersion), c.Phase).Set(float64(c.Resources))
			}
		} else if ctx.Err() == nil {
			r.log.Warn("resource count by phase failed; converge_resources keeps its last values", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce runs every pass once and reports what it did at debug level.
func (r *Reaper) RunOnce(ctx context.Context) error {
	start := time.Now()
	err := r.pass(ctx)
	r.m.passes.Inc()
	r.m.duration.Observe(time.Since(start).Seconds())
	return err
}

// pass runs each backstop pass in turn, counting what they did.
func (r *Reaper) pass(ctx context.Context) error {
	lo, hi := r.cfg.Range()
	p := engine.ReapParams{Lo: lo, Hi: hi, Limit: r.cfg.Limit}
	reclaimed, err := r.engine.LeaseReapExpired(ctx, p)
	if err != nil {
		return err
	}
	r.m.reclaimed.Add(float64(reclaimed))
	var requeued int
	if time.Since(r.swept) >= r.cfg.RetryWindow/4 {
		if requeued, err = r.requeueLagging(ctx, lo, hi); err != nil {
			return err
		}
	}
	dropped, err := r.engine.TaskDeleteUnclaimed(ctx, engine.ReapParams{Lo: lo, Hi: hi, Limit: r.cfg.Limit, Window: r.cfg.UnclaimedWindow})
	if err != nil {
		return err
	}
	r.m.dropped.Add(float64(dropped))
	if err := r.engine.InflightRecount(ctx, lo, hi); err != nil {
		return err
	}
	orphans, err := r.engine.OrphanSweepExpired(ctx, p)
	if err != nil {
		return err
	}
	resyncs, err := r.resync(ctx, p)
	if err != nil {
		return err
	}
	if err := r.pruneEvents(ctx, lo, hi); err != nil {
		return err
	}
	forgotten, err := r.store.ForgetMembers(ctx, r.cfg.MemberRetention)
	if err != nil {
		return err
	}
	var aged, counted, keys, audited int64
	if time.Since(r.pruned) >= r.cfg.DeliveryPruneEvery {
		// Every control pod prunes the whole log and the idempotency keys
		// (neither is sharded); the deletes are idempotent, so pods racing
		// only repeat a cheap walk.
		window := r.cfg.Limit * 10
		if aged, counted, err = r.store.PruneDeliveries(ctx, r.cfg.DeliveryMaxAge, r.cfg.DeliveryKeep, window); err != nil {
			return err
		}
		if keys, err = r.store.PruneIdempotencyKeys(ctx, window); err != nil {
			return err
		}
		if audited, err = r.store.PruneAudit(ctx, r.cfg.AuditRetention, window); err != nil {
			return err
		}
		// A full window of aged rows: more may be due, so the next pass
		// prunes again rather than a DeliveryPruneEvery later.
		if aged < int64(window) && keys < int64(window) && audited < int64(window) {
			r.pruned = time.Now()
		}
	}
	if reclaimed+requeued+dropped+orphans+forgotten > 0 {
		r.log.Info("reaper pass", "reclaimed", reclaimed, "requeued", requeued, "dropped", dropped, "orphans_swept", orphans,
			"members_forgotten", forgotten)
	}
	if aged+counted+keys+audited > 0 {
		r.log.Debug("reaper pass", "deliveries_aged_out", aged, "deliveries_over_keep", counted, "idempotency_keys_expired", keys,
			"audit_entries_expired", audited)
	}
	if resyncs > 0 {
		r.log.Debug("reaper pass", "resyncs", resyncs)
	}
	return nil
}

// resync re-pends the due resources of every kind that resyncs. The set
// of kinds is read each pass, so enabling resync on a kind for the first
// time needs no restart. A kind's resources are scanned (no index may
// mention the columns the drain writes) at most every quarter interval,
// unless the last scan hit the limit: then the rest is taken next pass.
func (r *Reaper) resync(ctx context.Context, p engine.ReapParams) (int, error) {
	kinds, err := r.engine.ResyncKindList(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, k := range kinds {
		key := fmt.Sprintf("%s/%d", k.Kind, k.KindVersion)
		if time.Since(r.resynced[key]) < k.Interval/4 {
			continue
		}
		n, err := r.engine.ResyncSchedule(ctx, k, p)
		if err != nil {
			return total, err
		}
		total += n
		if n < p.Limit {
			r.resynced[key] = time.Now()
		}
	}
	return total, nil
}

// requeueLagging re-schedules lagging resources that have no task, Limit
// at a time, until a call finds fewer or half an interval is spent; the
// sweep is done once a call comes back short. A lost queue (the UNLOGGED
// work_queue after a crash) of a million resources is so requeued in
// minutes: one call a sweep, Limit every RetryWindow/4, took hours.
func (r *Reaper) requeueLagging(ctx context.Context, lo, hi int) (int, error) {
	p := engine.ReapParams{Lo: lo, Hi: hi, Limit: r.cfg.Limit, Window: r.cfg.RetryWindow}
	total := 0
	for start := time.Now(); ; {
		n, err := r.engine.ResourceRequeueLagging(ctx, p)
		if err != nil {
			return total, err
		}
		total += n
		r.m.requeued.Add(float64(n))
		if n < p.Limit {
			r.swept = time.Now()
			return total, nil
		}
		if time.Since(start) >= r.cfg.Interval/2 {
			return total, nil // the next pass goes on
		}
	}
}

// pruneEvents walks the event log from the watermark in windows of
// Limit*10 ids until it is caught up or has spent half an interval, so a
// burst of events is worked off over the next passes without starving the
// others.
func (r *Reaper) pruneEvents(ctx context.Context, lo, hi int) error {
	window := r.cfg.Limit * 10
	for start := time.Now(); ; { // at least one window a pass
		wm, last, err := r.engine.EventPrune(ctx, engine.EventPruneParams{Lo: lo, Hi: hi, SinceID: r.eventWM, Keep: r.cfg.EventsKeep, Limit: window})
		if err != nil {
			return err
		}
		caughtUp := r.eventWM >= 0 && wm < r.eventWM+int64(window)
		r.eventWM = wm
		r.m.lag.Set(float64(max(last-wm, 0)))
		if caughtUp || time.Since(start) >= r.cfg.Interval/2 {
			return nil
		}
	}
}
