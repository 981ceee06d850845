// Package drainer runs the drain duty: it applies the queued outcomes that
// compose (children, edges, configs; complete_tasks applies every other
// outcome where it arrives) from work_outbox through drain_outbox_batch,
// one root at a time off the completion's path, and closes rollup
// straddles through drain_rollup_rechecks. It wakes on the outbox_ready
// NOTIFY and polls as a failsafe, and drains in full batches until a batch
// comes back short, so a burst is applied at database speed.
package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/internal/startstop"
)

// Config tunes a Drainer. Zero fields take the defaults below.
type Config struct {
	// Range returns the shard range to drain. Defaults to every shard.
	Range func() (lo, hi int)
	// BatchSize is the most outcomes one drain transaction applies.
	// Defaults to 2000: each batch scans the outbox backlog once, so larger
	// batches mean fewer scans of it under load.
	BatchSize int
	// Poll is the failsafe interval for a missed wake. Defaults to 250ms.
	Poll time.Duration
	// Metrics, if set, receives the converge_drainer_* metrics when the
	// drainer starts.
	Metrics prometheus.Registerer
}

// Defaults for Config.
const (
	BatchSizeDefault = 2000
	PollDefault      = 250 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.Range == nil {
		c.Range = func() (int, int) { return 0, 255 }
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Poll = cmp.Or(c.Poll, PollDefault)
	return c
}

// Drainer is the drain duty.
type Drainer struct {
	cfg    Config
	engine *engine.Engine
	wake   <-chan struct{}
	log    *slog.Logger
	loop   startstop.Loop
	m      metrics
}

// metrics count what the drain applies. A batch is one drain_outbox_batch
// transaction that applied at least one outcome: the empty polls of an idle
// queue are not counted or timed.
type metrics struct {
	batches  prometheus.Counter
	items    prometheus.Counter
	duration prometheus.Histogram
	errors   prometheus.Counter
}

func newMetrics() metrics {
	return metrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "converge", Subsystem: "drainer", Name: "batches_total",
			Help: "Drain transactions that applied at least one task outcome."}),
		items: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "converge", Subsystem: "drainer", Name: "items_total",
			Help: "Task outcomes applied to resources by the drain."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "converge", Subsystem: "drainer", Name: "batch_duration_seconds",
			Help:    "Time one drain transaction that applied outcomes took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12), // 1ms .. ~24s
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "converge", Subsystem: "drainer", Name: "errors_total",
			Help: "Drain passes that failed (each is logged as \"drain failed\" and retried on the next wake or poll)."}),
	}
}

// New returns a Drainer woken by wake (typically a Listener subscription to
// outbox_ready; nil means poll only).
func New(cfg Config, eng *engine.Engine, wake <-chan struct{}, log *slog.Logger) *Drainer {
	return &Drainer{cfg: cfg.withDefaults(), engine: eng, wake: wake, log: log, m: newMetrics()}
}

// Start registers the metrics on cfg.Metrics (if set) and launches the
// drain loop.
func (d *Drainer) Start(ctx context.Context) error {
	if r := d.cfg.Metrics; r != nil {
		for _, c := range []prometheus.Collector{d.m.batches, d.m.items, d.m.duration, d.m.errors} {
			if err := r.Register(c); err != nil {
				return fmt.Errorf("drainer metrics: %w", err)
			}
		}
	}
	d.loop.Start(ctx, d.run)
	return nil
}

// Stop stops the loop; an in-flight batch finishes or rolls back.
func (d *Drainer) Stop() { d.loop.Stop() }

// Running reports whether the drain loop runs (for readiness).
func (d *Drainer) Running() bool { return d.loop.Running() }

func (d *Drainer) run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		if err := d.DrainOnce(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.m.errors.Inc()
			d.log.Error("drain failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-t.C:
		}
	}
}

// DrainOnce drains until the outbox (in range) is empty, then re-checks armed
// rollups.
func (d *Drainer) DrainOnce(ctx context.Context) error {
	lo, hi := d.cfg.Range()
	p := engine.DrainParams{Lo: lo, Hi: hi, Limit: d.cfg.BatchSize}
	for ctx.Err() == nil {
		start := time.Now()
		n, err := d.engine.OutboxDrain(ctx, p)
		if err != nil {
			return err
		}
		if n > 0 {
			d.m.batches.Inc()
			d.m.items.Add(float64(n))
			d.m.duration.Observe(time.Since(start).Seconds())
		}
		if n < d.cfg.BatchSize {
			break
		}
	}
	_, err := d.engine.RollupRecheckDrain(ctx, p)
	return err
}
