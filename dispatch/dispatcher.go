package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/breaker"
	"github.com/convergeplane/converge/dispatch/callback"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/health"
	"github.com/convergeplane/converge/dispatch/registry"
	"github.com/convergeplane/converge/internal/pgrun"
	"github.com/convergeplane/converge/internal/startstop"
	"github.com/convergeplane/converge/webhooksdk"
)

// Config tunes a Dispatcher and its callback receiver: the two halves of the
// protocol are configured once, here, so the tokens the dispatcher mints, the
// leases it grants on a 202 and the URL it sends are the ones its receiver
// verifies, extends and serves. Zero fields take the defaults below;
// SecretBox, TokenKey and CallbackBaseURL are required.
type Config struct {
	// Claimer names this pod in claimed_by (its cluster member id).
	// Defaults to "dispatch".
	Claimer string
	// Range returns this pod's shard range, re-read on every claim so a
	// reshard takes effect at once. Defaults to every shard. The range's
	// share of the 256 shards is also this pod's share of each endpoint's
	// max_concurrency.
	Range func() (lo, hi int)
	// BatchSize caps one claim and one completion batch. Defaults to 256.
	BatchSize int
	// Lease is the claim lease of a task being delivered; it is renewed every
	// Lease/3. Defaults to 60s.
	Lease time.Duration
	// Poll is the failsafe claim interval behind the work_ready wake.
	// Defaults to 250ms.
	Poll time.Duration
	// FlushEvery bounds how long a finished delivery waits to be completed
	// in a batch. Defaults to 2ms.
	FlushEvery time.Duration
	// QueueWait is how long a claimed task may wait for a free endpoint slot
	// (a claim can return more of one kind than its endpoints can take)
	// before it is released, without burning an attempt. Defaults to 2s.
	QueueWait time.Duration
	// DrainTimeout bounds Stop's wait for deliveries in flight; past it they
	// are cancelled and their tasks released. Defaults to 30s.
	DrainTimeout time.Duration

	// CallbackBaseURL is the externally reachable base of the callback API
	// (a load balancer in front of every dispatch pod; the listen address in
	// dev mode): envelopes carry CallbackBaseURL + "/v1/tasks/{id}/outcome",
	// and Callbacks serves those routes.
	CallbackBaseURL string
	// TokenKey signs callback tokens, and Callbacks verifies them with it;
	// every dispatch pod must share it. At least 32 bytes.
	TokenKey []byte
	// PreviousTokenKeys still verify, during a key rotation.
	PreviousTokenKeys [][]byte
	// AsyncLease is the lease of an accepted (202) task without a deadline;
	// provider heartbeats renew it by as much. Defaults to
	// callback.AsyncLeaseDefault.
	AsyncLease time.Duration
	// CallbackGrace is how long past its deadline an accepted task's
	// callback is still awaited (and a heartbeat may extend its lease to).
	// Defaults to callback.GraceDefault.
	CallbackGrace time.Duration
	// TokenTTL bounds the callback token of a task without a deadline.
	// Defaults to callback.TokenTTLDefault.
	TokenTTL time.Duration
	// MaxCallbackBytes caps an outcome a provider calls back with. Defaults
	// to callback.MaxBodyDefault.
	MaxCallbackBytes int64

	// SecretBox opens endpoint signing secrets. Required.
	SecretBox *store.SecretBox
	// DevMode also permits loopback endpoints, over plain http too. Never in
	// production.
	DevMode bool
	// AllowHTTP permits plain-http endpoints outside dev mode.
	AllowHTTP bool
	// AllowCIDRs permits endpoint addresses in otherwise blocked ranges.
	AllowCIDRs []netip.Prefix
	// Resolver resolves endpoint names; nil uses the system resolver.
	Resolver *net.Resolver
	// AWS returns the base AWS configuration of Lambda targets; nil loads
	// the default chain (config.LoadDefaultConfig).
	AWS func(context.Context) (aws.Config, error)

	// Version is sent in the User-Agent (converge-dispatch/<version>).
	// Defaults to "dev".
	Version string
	// MaxResponseBytes caps a provider's answer. Defaults to 16 MiB.
	MaxResponseBytes int64
	// MaxRetryAfter caps a Retry-After honoured from a provider. Defaults
	// to 5m.
	MaxRetryAfter time.Duration
	// RateLimitBackoff is the back-off after a 429 without Retry-After.
	// Defaults to 1s.
	RateLimitBackoff time.Duration
	// Breaker configures each endpoint's circuit breaker.
	Breaker breaker.Config
	// HealthyThreshold, UnhealthyThreshold and HealthInterval are the probe
	// defaults for endpoints that do not set their own (2, 3, 10s).
	HealthyThreshold, UnhealthyThreshold int
	HealthInterval                       time.Duration
	// ProbeTimeout bounds one health probe. Defaults to 5s.
	ProbeTimeout time.Duration
	// RegistryRefresh is the failsafe endpoint re-read interval behind the
	// endpoints_changed NOTIFY. Defaults to 30s.
	RegistryRefresh time.Duration
	// PendingEvery is how often the pending_tasks and oldest_pending_seconds
	// gauges are recounted.
	// Defaults to 10s; negative disables it.
	PendingEvery time.Duration

	// Metrics registers the dispatcher's metrics and its receiver's. Nil
	// skips registration.
	Metrics prometheus.Registerer
	// Tracer, when set, records a span per delivery and per HTTP attempt,
	// and its receiver one per callback (see trace.go). Nil records none;
	// every attempt carries a traceparent header either way.
	Tracer trace.TracerProvider
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// Defaults for Config.
const (
	BatchSizeDefault        = 256
	LeaseDefault            = 60 * time.Second
	PollDefault             = 250 * time.Millisecond
	FlushEveryDefault       = 2 * time.Millisecond
	QueueWaitDefault        = 2 * time.Second
	DrainTimeoutDefault     = 30 * time.Second
	MaxRetryAfterDefault    = 5 * time.Minute
	RateLimitBackoffDefault = time.Second
	PendingEveryDefault     = 10 * time.Second
)

func (c Config) withDefaults() Config {
	c.Claimer = cmp.Or(c.Claimer, "dispatch")
	if c.Range == nil {
		c.Range = func() (int, int) { return 0, 255 }
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.Poll = cmp.Or(c.Poll, PollDefault)
	c.FlushEvery = cmp.Or(c.FlushEvery, FlushEveryDefault)
	c.QueueWait = cmp.Or(c.QueueWait, QueueWaitDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.AsyncLease = cmp.Or(c.AsyncLease, callback.AsyncLeaseDefault)
	c.CallbackGrace = cmp.Or(c.CallbackGrace, callback.GraceDefault)
	c.TokenTTL = cmp.Or(c.TokenTTL, callback.TokenTTLDefault)
	c.Version = cmp.Or(c.Version, "dev")
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, MaxRetryAfterDefault)
	c.RateLimitBackoff = cmp.Or(c.RateLimitBackoff, RateLimitBackoffDefault)
	c.PendingEvery = cmp.Or(c.PendingEvery, PendingEveryDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.SecretBox == nil {
		errs = append(errs, errors.New("SecretBox is required"))
	}
	if len(c.TokenKey) < callback.TokenKeyMinBytes {
		errs = append(errs, fmt.Errorf("TokenKey must be at least %d bytes", callback.TokenKeyMinBytes))
	}
	if u, err := url.Parse(c.CallbackBaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, fmt.Errorf("CallbackBaseURL %q must be an absolute http(s) URL", c.CallbackBaseURL))
	}
	if c.Lease < 3*time.Second {
		errs = append(errs, errors.New("the Lease must be at least 3s (it is renewed every Lease/3)"))
	}
	if c.BatchSize < 1 {
		errs = append(errs, errors.New("BatchSize must be positive"))
	}
	return errors.Join(errs...)
}

// Wakeups are the NOTIFY subscriptions that wake a Dispatcher early; both
// are optional (the dispatcher polls behind them). Subscribe them on the
// store's Listener before it starts.
type Wakeups struct {
	// WorkReady is a "work_ready" subscription.
	WorkReady <-chan struct{}
	// EndpointsChanged is an "endpoints_changed" subscription.
	EndpointsChanged <-chan struct{}
}

// Dispatcher is the dispatch duty of one pod. See the package doc.
type Dispatcher struct {
	cfg    Config
	eng    *engine.Engine
	st     *store.Store // the delivery log and endpoints
	reg    *registry.Registry
	prober *health.Prober
	tokens *callback.Tokens
	cb     *callback.Handler
	m      *metrics
	tracer trace.Tracer // nil: tracing off
	log    *slog.Logger
	wake   <-chan struct{}
	regCh  <-chan struct{}
	cbBase string
	loop   startstop.Loop

	delivering atomic.Int64
	async      *asyncWatch
	// work is the context of this run's deliveries (set by run before any
	// starts, read by them until run returns): a batch's request runs on
	// it, each task on its own child of it.
	work context.Context
	// jobs hands deliveries to this run's idle delivery workers (set and
	// closed by run, used by its goroutine only).
	jobs chan job

	mu      sync.Mutex
	tracked map[string]*item // delivering and queued tasks, heartbeated
	// throttled is set while claims are held back by the tracked cap; the
	// next untrack then signals settled, which wakes the claim loop.
	throttled atomic.Bool
	settled   chan struct{}
}

// New returns a Dispatcher with its callback receiver (see Callbacks), both
// built from cfg, working tasks through eng and its endpoints and delivery
// log through st. It validates cfg and registers the metrics.
func New(cfg Config, eng *engine.Engine, st *store.Store, wake Wakeups) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("dispatcher config: %w", err)
	}
	tokens, err := callback.NewTokens(cfg.TokenKey, cfg.PreviousTokenKeys...)
	if err != nil {
		return nil, fmt.Errorf("dispatcher config: %w", err)
	}
	reg, err := registry.New(registry.Config{
		Box:                cfg.SecretBox,
		Egress:             egress.Policy{DevMode: cfg.DevMode, AllowHTTP: cfg.AllowHTTP, AllowCIDRs: cfg.AllowCIDRs},
		Resolver:           cfg.Resolver,
		AWS:                cfg.AWS,
		Source:             cfg.Claimer,
		UserAgent:          "converge-dispatch/" + cfg.Version,
		MaxResponseBytes:   cfg.MaxResponseBytes,
		Refresh:            cfg.RegistryRefresh,
		Breaker:            cfg.Breaker,
		HealthyThreshold:   cfg.HealthyThreshold,
		UnhealthyThreshold: cfg.UnhealthyThreshold,
		HealthInterval:     cfg.HealthInterval,
		Share:              func() float64 { lo, hi := cfg.Range(); return float64(hi-lo+1) / 256 },
		Logger:             cfg.Logger,
	}, st, wake.EndpointsChanged)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	d := &Dispatcher{
		cfg:     cfg,
		eng:     eng,
		st:      st,
		reg:     reg,
		prober:  health.New(health.Config{Timeout: cfg.ProbeTimeout, Logger: cfg.Logger}, reg),
		tokens:  tokens,
		log:     cfg.Logger,
		wake:    wake.WorkReady,
		regCh:   reg.Subscribe(),
		cbBase:  strings.TrimSuffix(cfg.CallbackBaseURL, "/"),
		tracked: map[string]*item{},
		settled: make(chan struct{}, 1),
	}
	if cfg.Tracer != nil {
		d.tracer = cfg.Tracer.Tracer(tracerName)
	}
	d.async = newAsyncWatch(d)
	if d.m, err = newMetrics(cfg.Metrics, reg); err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	d.cb, err = callback.NewHandler(callback.Config{Tokens: tokens, Engine: eng, Store: st, MaxBodyBytes: cfg.MaxCallbackBytes,
		AsyncLease: cfg.AsyncLease, Grace: cfg.CallbackGrace, Metrics: cfg.Metrics, Tracer: cfg.Tracer, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: %w", err)
	}
	return d, nil
}

// Callbacks returns the receiver of this dispatcher's asynchronous results:
// the handler of /v1/tasks/{id}/outcome and /v1/tasks/{id}/heartbeat
// (package callback), verifying the tokens this dispatcher mints and
// extending leases as it does. Serve it at the root of the listener
// CallbackBaseURL reaches. It is stateless apart from the database, so it
// serves the callbacks of every pod's tasks, before Start and after Stop
// too.
func (d *Dispatcher) Callbacks() http.Handler { return d.cb }

// SetTokenKeys makes key the key callback tokens are minted with, and key
// and previous the keys they are verified with, on this dispatcher and its
// callback receiver at once (a key rotation taken up while running).
func (d *Dispatcher) SetTokenKeys(key []byte, previous ...[]byte) error {
	return d.tokens.SetKeys(key, previous...)
}

// Registry returns the live endpoint registry: PairStatus for why a kind
// parks, Status for the endpoint detail (health, breaker, in-flight).
func (d *Dispatcher) Registry() *registry.Registry { return d.reg }

// ErrNoProbe is TestEndpoint's refusal: this pod has not loaded the
// endpoint, or the endpoint has no health target.
var ErrNoProbe = errors.New("the endpoint has no health target this pod can send to")

// TestEndpoint sends endpoint name one signed health request now (the
// probe of docs/protocol.md §10, which every SDK answers) and returns its
// round trip. It is a look, not a probe: the answer moves neither the
// endpoint's readiness nor its circuit breaker, and it is not recorded in
// the delivery log.
func (d *Dispatcher) TestEndpoint(ctx context.Context, name string) (health.Answer, error) {
	if err := d.reg.Refresh(ctx); err != nil {
		return health.Answer{}, err
	}
	pr, ok := d.reg.ProbeOf(name)
	if !ok {
		return health.Answer{}, ErrNoProbe
	}
	return health.Send(ctx, pr, d.prober.Timeout()), nil
}

// InFlight returns the number of tasks this pod holds: being delivered or
// waiting for a slot (for the cluster member heartbeat).
func (d *Dispatcher) InFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.tracked)
}

// Start loads the endpoints, starts probing them and claiming.
func (d *Dispatcher) Start(ctx context.Context) error {
	if err := d.reg.Start(ctx); err != nil {
		return err
	}
	if err := d.prober.Start(ctx); err != nil {
		return err
	}
	d.loop.Start(ctx, d.run)
	return nil
}

// Stop stops claiming, releases tasks still waiting for a slot, waits up to
// DrainTimeout for deliveries in flight (renewing their leases meanwhile)
// and completes their results, then cancels those still in flight and
// releases their tasks: claimable again at once, at the same claim epoch,
// so a late answer to the cancelled delivery is refused. Then it stops
// probing. Tasks accepted asynchronously (202) keep their claims, with
// their async lease: their callbacks may land on any pod, and the reaper
// re-pends any whose lease lapses without one.
func (d *Dispatcher) Stop() {
	d.loop.Stop()
	d.prober.Stop()
	d.reg.Stop()
}

// Running reports whether the claim loop runs (for readiness): from Start
// until Stop, or the context Start was given, ends it.
func (d *Dispatcher) Running() bool { return d.loop.Running() }

// errSuperseded and errShutdown are the causes a delivery's context is
// cancelled with.
var (
	errSuperseded = errors.New("task superseded: its claim was lost")
	errShutdown   = errors.New("dispatcher stopped before the delivery finished")
)

// item is one claimed task on this pod.
type item struct {
	task     model.Task
	env      webhooksdk.Envelope // without its type and callback: encode adds them
	pair     string              // its route key (registry.Route): its namespace's endpoints or the default's
	queuedAt time.Time
	ctx      context.Context
	cancel   context.CancelCauseFunc
}

func (d *Dispatcher) run(ctx context.Context) {
	// Deliveries run on a context that a soft stop does not cancel.
	work, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	d.work = work
	jobs := make(chan job)
	d.jobs = jobs
	bg := context.WithoutCancel(ctx)

	// With the batch gathering and the completeWriters being written, the
	// completer holds at most 1+completeWriters batches beyond this queue's:
	// five in all, as when it wrote one batch at a time behind a queue of four.
	ops := make(chan op, (4-completeWriters)*d.cfg.BatchSize)
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		d.completer(bg, ops)
	}()
	// The heartbeat outlives the claim loop: it renews the leases of the
	// deliveries a soft stop waits for, however long DrainTimeout is.
	aux, stopAux := context.WithCancel(bg)
	var auxWG sync.WaitGroup
	auxWG.Add(3)
	go func() { defer auxWG.Done(); d.heartbeat(aux) }()
	go func() { defer auxWG.Done(); d.async.run(aux) }()
	go func() { defer auxWG.Done(); d.countPending(aux) }()

	var (
		wg    sync.WaitGroup
		queue []*item
	)
	poll := time.NewTicker(d.cfg.Poll)
	defer poll.Stop()
	polled := true
	for ctx.Err() == nil {
		queue = d.place(queue, ops, &wg)
		n, limit := d.claim(ctx, work, &queue, ops, &wg, polled)
		polled = false
		if n > 0 && n == limit {
			continue // a full batch: there is likely more
		}
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-d.regCh:
		case <-d.reg.Freed():
		case <-d.settled:
		case <-poll.C:
			polled = true
		}
	}

	// Soft stop: give back what never started, let deliveries finish.
	for _, it := range queue {
		d.untrack(it)
		ops <- op{kind: opRelease, task: it.task, reason: "dispatcher stopping before a slot was free"}
	}
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
	}()
	timer := time.NewTimer(d.cfg.DrainTimeout)
	select {
	case <-drained:
		timer.Stop()
	case <-timer.C:
		d.log.Warn("drain timeout: cancelling deliveries in flight", "in_flight", d.delivering.Load())
		cancelWork(errShutdown)
		<-drained
	}
	close(jobs)
	close(ops)
	<-completed
	stopAux()
	auxWG.Wait()
	// Accepted tasks outlive this dispatcher: give those not yet extended
	// their async lease now, so their callbacks still find them claimed.
	hctx, cancel := context.WithTimeout(bg, flushTimeout)
	d.async.extendAll(hctx)
	cancel()
}

// place starts queued tasks on endpoints with a free slot, keeps the rest in
// order, and releases those that waited longer than QueueWait. A slot on an
// endpoint with max_batch n takes up to n queued tasks of its pair in one
// batch: only those already waiting, so batching never delays a task — under
// light load a batch is a single task, sent as such.
func (d *Dispatcher) place(queue []*item, ops chan<- op, wg *sync.WaitGroup) []*item {
	if len(queue) == 0 {
		return queue
	}
	now := time.Now()
	kept := queue[:0]
	full := map[string]bool{}
	taken := map[*item]bool{} // joined an earlier item's batch
	for i, it := range queue {
		switch {
		case taken[it]:
			continue
		case it.ctx.Err() != nil: // superseded while waiting
			d.untrack(it)
			continue
		case !full[it.pair]:
			if slot, ok := d.reg.Acquire(it.pair); ok {
				items := []*item{it}
				for _, next := range queue[i+1:] {
					if len(items) == slot.Endpoint().MaxBatch() {
						break
					}
					if next.pair == it.pair && !taken[next] && next.ctx.Err() == nil {
						items = append(items, next)
						taken[next] = true
					}
				}
				d.launch(items, slot, ops, wg)
				continue
			}
			full[it.pair] = true
		}
		if now.Sub(it.queuedAt) > d.cfg.QueueWait {
			d.untrack(it)
			ops <- op{kind: opRelease, task: it.task,
				reason: fmt.Sprintf("no endpoint for %s had a free slot within %s", it.pair, d.cfg.QueueWait)}
			continue
		}
		kept = append(kept, it)
	}
	clear(queue[len(kept):])
	return kept
}

// claimTimeout bounds one claim and its request build.
const claimTimeout = 30 * time.Second

// claim claims up to the spare capacity of the ready endpoints, builds the
// requests and starts (or queues) each task. It returns how many it claimed
// and the limit it asked for.
func (d *Dispatcher) claim(ctx, work context.Context, queue *[]*item, ops chan<- op, wg *sync.WaitGroup, polled bool) (int, int) {
	queued := make(map[string]int, 4)
	for _, it := range *queue {
		queued[it.pair]++
	}
	pairs, own, spare, capacity := d.reg.Claimable(queued)
	// A task stays tracked from its claim until its result is handed to the
	// completer, and its endpoint slot is free again as soon as the answer
	// came. When the database records results slower than endpoints answer,
	// finished deliveries wait on the completer, so the slots alone do not
	// bound what this pod holds: at a million resources the claim loop kept
	// claiming while results piled up behind the completer, and the pod's
	// memory grew with them. Tracked tasks are capped at the endpoints'
	// capacity plus one claim; with the completer's queue, the batch it
	// gathers and the batches it is writing, a pod holds at most
	// capacity + 6·BatchSize tasks.
	room := capacity + d.cfg.BatchSize - d.InFlight()
	if room < min(spare, d.cfg.BatchSize) {
		d.throttled.Store(true)
	}
	limit := min(spare, d.cfg.BatchSize, room)
	if limit <= 0 || len(pairs) == 0 {
		return 0, 0
	}
	// While deliveries are in flight, wait for a worthwhile batch rather
	// than paying a claim round trip per freed slot.
	if !polled && d.delivering.Load() > 0 && limit < max(1, min(d.cfg.BatchSize, capacity)/4) {
		return 0, 0
	}
	lo, hi := d.cfg.Range()
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	tasks, err := d.claimTasks(ctx, engine.TaskClaimParams{Claimer: d.cfg.Claimer, Lo: lo, Hi: hi, Pairs: pairs, Own: own,
		Limit: limit, Lease: d.cfg.Lease})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.Error("claim failed", "err", err)
		}
		return 0, 0
	}
	if len(tasks) == 0 {
		return 0, limit
	}
	d.m.claimed(tasks)
	envs, failed, err := d.eng.RequestBuild(ctx, tasks)
	if err != nil {
		d.log.Error("build requests failed; releasing the claims", "err", err, "tasks", len(tasks))
		for _, t := range tasks {
			ops <- op{kind: opRelease, task: t, reason: "dispatcher could not build the request"}
		}
		return 0, 0
	}
	now := time.Now()
	for i, t := range tasks {
		if failed[i] != nil {
			// Never sent: no provider answer exists for this claim.
			ops <- op{kind: opComplete, task: t, abandoned: true,
				result: webhooksdk.Result{Error: &webhooksdk.Error{Message: failed[i].Error(), Terminal: true}}}
			continue
		}
		it := &item{task: t, env: envs[i], pair: d.reg.Route(t.Namespace, t.Kind+"/"+strconv.Itoa(t.KindVersion)), queuedAt: now}
		it.ctx, it.cancel = context.WithCancelCause(work)
		d.track(it)
		*queue = append(*queue, it)
	}
	*queue = d.place(*queue, ops, wg)
	return len(tasks), limit
}

// claimAttempts bounds the claims one pass makes while PostgreSQL rolls
// them back to break deadlocks.
const claimAttempts = 3

// reasonDeadlock is the claim_retries_total reason of a claim run again
// after a deadlock.
const reasonDeadlock = "deadlock"

// claimTasks claims, and claims again at once when PostgreSQL rolled the
// claim back to break a deadlock (nothing of it remains, and the other
// side went through), up to claimAttempts in all; each retry is logged at
// WARN and counted. The engine's lock order keeps claims and completions
// from deadlocking each other (docs/operations.md); this is for what
// remains.
func (d *Dispatcher) claimTasks(ctx context.Context, p engine.TaskClaimParams) ([]model.Task, error) {
	for attempt := 1; ; attempt++ {
		tasks, err := d.eng.TaskClaim(ctx, p)
		if attempt == claimAttempts || !pgrun.IsDeadlock(err) {
			return tasks, err
		}
		d.m.claimRetries.WithLabelValues(reasonDeadlock).Inc()
		d.log.Warn("claim deadlocked; claiming again", "err", err, "attempt", attempt)
	}
}

// job is one delivery handed to a delivery worker.
type job struct {
	items []*item
	slot  *registry.Slot
	ops   chan<- op
	wg    *sync.WaitGroup
}

// launch starts the delivery of items (one task, or a batch) on slot: on an
// idle delivery worker if one waits, else on a new one. A worker outlives its
// delivery and waits for the next until run closes jobs, so there are never
// more than the most deliveries in flight at once. A goroutine per delivery
// started on a small stack and grew it, by copying, deep in the encoder and
// the HTTP client every time.
func (d *Dispatcher) launch(items []*item, slot *registry.Slot, ops chan<- op, wg *sync.WaitGroup) {
	d.delivering.Add(1)
	wg.Add(1)
	j := job{items: items, slot: slot, ops: ops, wg: wg}
	select {
	case d.jobs <- j:
	default:
		go d.worker(d.jobs, j)
	}
}

// worker runs j, then the jobs it takes from jobs until jobs is closed.
func (d *Dispatcher) worker(jobs <-chan job, j job) {
	for ok := true; ok; j, ok = <-jobs {
		d.deliver(j.items, j.slot, j.ops)
		d.delivering.Add(-1)
		j.wg.Done()
	}
}

func (d *Dispatcher) track(it *item) {
	d.mu.Lock()
	d.tracked[it.task.ID] = it
	d.mu.Unlock()
}

func (d *Dispatcher) untrack(it *item) {
	d.mu.Lock()
	if d.tracked[it.task.ID] == it {
		delete(d.tracked, it.task.ID)
	}
	d.mu.Unlock()
	it.cancel(nil)
	if d.throttled.CompareAndSwap(true, false) {
		select {
		case d.settled <- struct{}{}:
		default:
		}
	}
}

// heartbeat renews the leases of tracked tasks every Lease/3, and cancels
// the delivery of any whose claim was lost (re-claimed after a stall, or its
// resource removed): its result could no longer be applied.
func (d *Dispatcher) heartbeat(ctx context.Context) {
	t := time.NewTicker(d.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		items := make([]*item, 0, len(d.tracked))
		for _, it := range d.tracked {
			items = append(items, it)
		}
		d.mu.Unlock()
		if len(items) == 0 {
			continue
		}
		tasks := make([]model.Task, len(items))
		for i, it := range items {
			tasks[i] = it.task
		}
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Lease/3)
		held, err := d.eng.LeaseExtend(hctx, tasks, d.cfg.Lease)
		cancel()
		if err != nil {
			d.log.Warn("lease renewal failed", "err", err, "tasks", len(tasks))
			continue
		}
		for _, it := range items {
			if !held[it.task.ID] {
				it.cancel(errSuperseded)
			}
		}
	}
}

// countPending refreshes the pending_tasks and oldest_pending_seconds gauges
// for this pod's range.
func (d *Dispatcher) countPending(ctx context.Context) {
	if d.cfg.PendingEvery < 0 {
		return
	}
	t := time.NewTicker(d.cfg.PendingEvery)
	defer t.Stop()
	for {
		lo, hi := d.cfg.Range()
		qctx, cancel := context.WithTimeout(ctx, d.cfg.PendingEvery)
		counts, err := d.eng.TaskCountPending(qctx, lo, hi)
		cancel()
		if err == nil {
			d.m.setPending(counts)
		} else if ctx.Err() == nil {
			d.log.Warn("pending task count failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
