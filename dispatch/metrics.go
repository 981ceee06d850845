package dispatch

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/registry"
)

// metrics are the dispatcher's Prometheus metrics, registered on the
// registerer the caller passes (never the global one).
type metrics struct {
	deliveries    *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	pending       *prometheus.GaugeVec
	oldest        *prometheus.GaugeVec
	claimedTasks  *prometheus.GaugeVec
	claims        *prometheus.CounterVec
	asyncTimeouts prometheus.Counter
	completions   prometheus.Histogram
	completeFails prometheus.Counter
	claimRetries  *prometheus.CounterVec

	// series caches the deliveries and duration series of each (endpoint,
	// result) observed: a delivery looks its two up by key instead of
	// hashing and checking its label values in each vector. Both vectors
	// keep every series they ever made, so the cache holds no more.
	series sync.Map // seriesKey → *deliverySeries
}

// seriesKey names one delivery's series.
type seriesKey struct{ endpoint, result string }

// deliverySeries are the series a delivery to one endpoint with one result
// counts in.
type deliverySeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

func newMetrics(r prometheus.Registerer, reg *registry.Registry) (*metrics, error) {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "deliveries_total",
			Help: "Delivery attempts by endpoint and result (ok, task_error, accepted, rate_limited, gone, redirect, client_error, server_error, retryable, unexpected, malformed, too_large, timeout, deadline, network, blocked, cancelled).",
		}, []string{"endpoint", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "delivery_duration_seconds",
			Help:    "Time from sending a delivery to its answer (or failure), by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14), // 0.5ms .. ~75s
		}, []string{"endpoint"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "pending_tasks",
			Help: "Tasks waiting to be claimed in this pod's shard range, by kind (recounted periodically).",
		}, []string{"kind", "kind_version"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "oldest_pending_seconds",
			Help: "How long the oldest claimable pending task in this pod's shard range has waited since its not_before, by kind (0 when none is claimable yet; recounted with pending_tasks).",
		}, []string{"kind", "kind_version"}),
		claimedTasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "claimed_tasks",
			Help: "Tasks claimed in this pod's shard range (by any pod) whose outcomes are not yet recorded, by kind (recounted with pending_tasks).",
		}, []string{"kind", "kind_version"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "claims_total",
			Help: "Tasks this pod claimed, by kind.",
		}, []string{"kind", "kind_version"}),
		asyncTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "async_timeouts_total",
			Help: "Accepted (202) tasks whose lease lapsed without a callback; each was retried.",
		}),
		completions: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "completion_duration_seconds",
			Help:    "Time of one completion write: a batch of results recorded and their outcomes applied (compositions queued for the drainer).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12), // 0.5ms .. ~12s
		}),
		completeFails: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "completion_errors_total",
			Help: "Completion writes that failed (logged as complete failed); their tasks re-run once their leases lapse.",
		}),
		claimRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "claim_retries_total",
			Help: "Claims run again at once, by reason (deadlock: PostgreSQL rolled the claim back to break a lock cycle).",
		}, []string{"reason"}),
	}
	m.claimRetries.WithLabelValues(reasonDeadlock) // exported at 0 from the start
	if r == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.duration, m.pending, m.oldest, m.claimedTasks, m.claims, m.asyncTimeouts, m.completions, m.completeFails,
		m.claimRetries, endpointCollector{reg}} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(endpoint, result string, d time.Duration) {
	k := seriesKey{endpoint, result}
	v, ok := m.series.Load(k)
	if !ok {
		v, _ = m.series.LoadOrStore(k, &deliverySeries{count: m.deliveries.WithLabelValues(endpoint, result),
			duration: m.duration.WithLabelValues(endpoint)})
	}
	s := v.(*deliverySeries)
	s.count.Inc()
	s.duration.Observe(d.Seconds())
}

// setPending replaces the queue gauges with counts: a kind with nothing
// pending (or nothing claimed) has no series of that gauge.
func (m *metrics) setPending(counts []engine.PendingCount) {
	m.pending.Reset()
	m.oldest.Reset()
	m.claimedTasks.Reset()
	for _, c := range counts {
		v := strconv.Itoa(c.KindVersion)
		if c.Pending > 0 {
			m.pending.WithLabelValues(c.Kind, v).Set(float64(c.Pending))
			m.oldest.WithLabelValues(c.Kind, v).Set(c.OldestSeconds)
		}
		if c.Claimed > 0 {
			m.claimedTasks.WithLabelValues(c.Kind, v).Set(float64(c.Claimed))
		}
	}
}

// claimed counts tasks this pod claimed, a series lookup per run of tasks
// of one kind.
func (m *metrics) claimed(tasks []model.Task) {
	for i := 0; i < len(tasks); {
		t, j := tasks[i], i+1
		for j < len(tasks) && tasks[j].Kind == t.Kind && tasks[j].KindVersion == t.KindVersion {
			j++
		}
		m.claims.WithLabelValues(t.Kind, strconv.Itoa(t.KindVersion)).Add(float64(j - i))
		i = j
	}
}

// The endpoint gauges' descriptors: immutable, built once.
var ( // immutable descriptors
	inflightDesc = prometheus.NewDesc("converge_dispatch_endpoint_inflight",
		"Deliveries in flight per endpoint on this pod.", []string{"endpoint"}, nil)
	limitDesc = prometheus.NewDesc("converge_dispatch_endpoint_limit",
		"This pod's share of the endpoint's max_concurrency.", []string{"endpoint"}, nil)
	breakerDesc = prometheus.NewDesc("converge_dispatch_endpoint_breaker_state",
		"Circuit breaker state per endpoint: 0 closed, 1 half-open, 2 open.", []string{"endpoint"}, nil)
	rateLimitDesc = prometheus.NewDesc("converge_dispatch_endpoint_rate_limit",
		"The endpoint's configured rate limit (requests per second), for endpoints that have one.", []string{"endpoint"}, nil)
	rateEffectiveDesc = prometheus.NewDesc("converge_dispatch_endpoint_rate_effective",
		"The endpoint's effective rate (requests per second) as this pod's last lease of its shared bucket said; below rate_limit while an adaptive endpoint recovers from a throttle.", []string{"endpoint"}, nil)
	rateWaitedDesc = prometheus.NewDesc("converge_dispatch_endpoint_rate_waited_total",
		"Requests this pod sent to the endpoint only after waiting for a rate-limit token (its shared bucket had run dry).", []string{"endpoint"}, nil)
	readyDesc = prometheus.NewDesc("converge_dispatch_endpoint_ready",
		"1 if the endpoint takes tasks of the (kind, kind_version) now.", []string{"endpoint", "kind", "kind_version"}, nil)
)

// endpointCollector reads the registry at scrape time, so the gauges follow
// endpoints as they come and go.
type endpointCollector struct{ reg *registry.Registry }

func (c endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- limitDesc
	ch <- breakerDesc
	ch <- rateLimitDesc
	ch <- rateEffectiveDesc
	ch <- rateWaitedDesc
	ch <- readyDesc
}

func (c endpointCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.reg.Status() {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(s.InFlight), s.Name)
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(s.Limit), s.Name)
		ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, float64(s.Breaker), s.Name)
		if s.RateLimit > 0 {
			ch <- prometheus.MustNewConstMetric(rateLimitDesc, prometheus.GaugeValue, s.RateLimit, s.Name)
			ch <- prometheus.MustNewConstMetric(rateEffectiveDesc, prometheus.GaugeValue, s.EffectiveRate, s.Name)
			ch <- prometheus.MustNewConstMetric(rateWaitedDesc, prometheus.CounterValue, float64(s.RateWaited), s.Name)
		}
		for _, k := range s.Kinds {
			v := 0.0
			if k.Ready {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, s.Name, k.Kind, strconv.Itoa(k.KindVersion))
		}
	}
}
