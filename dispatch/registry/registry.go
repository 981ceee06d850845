// Package registry is a dispatch pod's live view of the provider endpoints:
// their configuration (re-read from the endpoints table on every
// endpoints_changed NOTIFY, and on a failsafe interval), and the runtime
// state that decides where each task may go — in-flight counts against
// max_concurrency, per-(kind, kind_version) readiness from health probes, the
// circuit breaker, a 429 back-off, a 410 disable, and the tokens this pod
// leased from a rate-limited endpoint's shared bucket (rate.go).
//
// Endpoints belong to namespaces. A task of namespace N and pair K goes to
// N's endpoints serving K, or, when N has none serving K (enabled or not),
// to the default namespace's: the route key (Route) is "N:K" or the bare
// "K", and the claim takes each namespace's tasks under its route keys
// (Claimable; claims.sql's claim_routable).
//
// An endpoint is ready for a pair when it serves the pair, is enabled and
// usable (its secret opens, its target passes the egress policy), is not
// backing off, its breaker is not open (half-open admits one trial), its
// rate limit's shared bucket (if any) is not dry, and — if it has a health URL —
// its probes say the pair is ready. A pair with no
// ready endpoint on this pod is not claimed: its resources park, and
// PairStatus says why.
//
// max_concurrency is enforced per pod on this pod's share of the shard space
// (Config.Share), so N dispatch pods together stay within it while each
// serves about 1/N of the tasks; every pod may send at least one.
package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/breaker"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/internal/startstop"
	"github.com/convergeplane/converge/webhooksdk"
)

// Config tunes a Registry. Zero fields take the defaults.
type Config struct {
	// Box opens the endpoints' signing secrets. Required.
	Box *store.SecretBox
	// Egress is the outbound policy for every endpoint's client.
	Egress egress.Policy
	// Resolver resolves target names; nil uses the system resolver.
	Resolver *net.Resolver
	// UserAgent is sent with every request. Defaults to "converge-dispatch".
	UserAgent string
	// MaxResponseBytes caps a task response body. Defaults to 16 MiB.
	MaxResponseBytes int64
	// Refresh is the failsafe re-read interval, behind the NOTIFY.
	// Defaults to 30s.
	Refresh time.Duration
	// Breaker configures every endpoint's circuit breaker.
	Breaker breaker.Config
	// HealthyThreshold and UnhealthyThreshold are the consecutive probe
	// results that flip a pair ready / unready, for endpoints that do not set
	// their own. Default to 2 and 3. The first probe result decides at once.
	HealthyThreshold, UnhealthyThreshold int
	// HealthInterval is the probe interval of endpoints that do not set
	// their own. Defaults to 10s.
	HealthInterval time.Duration
	// Share returns the fraction of each endpoint's max_concurrency this pod
	// may use (its share of the shard space). Defaults to 1.
	Share func() float64
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// AWS returns the base AWS configuration of the Lambda targets
	// (credentials, their chain). Defaults to config.LoadDefaultConfig,
	// called once, when the first Lambda endpoint is seen.
	AWS func(context.Context) (aws.Config, error)
	// Source names this pod in the alerts it logs (a breaker opened or
	// closed, a kind parked by readiness: each pod's own view).
	Source string
}

// Defaults for Config.
const (
	UserAgentDefault          = "converge-dispatch"
	MaxResponseBytesDefault   = 16 << 20
	RefreshDefault            = 30 * time.Second
	HealthyThresholdDefault   = 2
	UnhealthyThresholdDefault = 3
	HealthIntervalDefault     = 10 * time.Second
	// InvokeHealthIntervalDefault is the probe interval of Lambda targets
	// (health type invoke): each probe is a billed invocation.
	InvokeHealthIntervalDefault = 60 * time.Second
	// probeMaxBody caps a health answer.
	probeMaxBody = 64 << 10
)

func (c Config) withDefaults() Config {
	c.UserAgent = cmp.Or(c.UserAgent, UserAgentDefault)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, MaxResponseBytesDefault)
	c.Refresh = cmp.Or(c.Refresh, RefreshDefault)
	c.Breaker = c.Breaker.WithDefaults()
	c.HealthyThreshold = cmp.Or(c.HealthyThreshold, HealthyThresholdDefault)
	c.UnhealthyThreshold = cmp.Or(c.UnhealthyThreshold, UnhealthyThresholdDefault)
	c.HealthInterval = cmp.Or(c.HealthInterval, HealthIntervalDefault)
	if c.Share == nil {
		c.Share = func() float64 { return 1 }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.AWS == nil {
		c.AWS = func(ctx context.Context) (aws.Config, error) { return config.LoadDefaultConfig(ctx) }
	}
	return c
}

// Registry is the live endpoint view. Its methods are safe for concurrent
// use.
type Registry struct {
	cfg    Config
	st     *store.Store
	wake   <-chan struct{}
	loop   startstop.Loop
	shared *http.Client // endpoints without their own TLS settings
	freed  chan struct{}
	// alerts queues the pod-local alerts for alertLoop to log, so a
	// breaker or a probe never waits for the database under mu.
	alerts    chan store.AlertEvent
	alertLoop startstop.Loop
	// bg runs the rate limit's leases and throttle reports (rate.go) on
	// bgCtx; Stop cancels them and waits.
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc

	mu     sync.Mutex
	loaded bool
	eps    map[string]*Endpoint
	byPair map[string][]*Endpoint // by route key
	pairOf map[string]string      // a route key's bare pair
	subs   []chan struct{}
	rr     int
	// stopped: Stop was called; no more background work starts.
	stopped bool
	aws     *aws.Config // loaded with the first Lambda endpoint
}

// New returns a Registry reading endpoints through st, woken by wake (an
// endpoints_changed subscription; nil polls only).
func New(cfg Config, st *store.Store, wake <-chan struct{}) (*Registry, error) {
	cfg = cfg.withDefaults()
	if cfg.Box == nil {
		return nil, errors.New("registry: a SecretBox is required to open endpoint secrets")
	}
	shared, err := egress.NewClient(egress.ClientConfig{Policy: cfg.Egress, Resolver: cfg.Resolver, MaxIdleConnsPerHost: 1024})
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	return &Registry{cfg: cfg, st: st, wake: wake, shared: shared, freed: make(chan struct{}, 1), bgCtx: bgCtx, bgCancel: bgCancel,
		alerts: make(chan store.AlertEvent, alertQueue), eps: map[string]*Endpoint{}, byPair: map[string][]*Endpoint{},
		pairOf: map[string]string{}}, nil
}

// Start loads the endpoints, then keeps them fresh until Stop.
func (r *Registry) Start(ctx context.Context) error {
	r.loop.Start(ctx, r.run)
	r.alertLoop.Start(context.WithoutCancel(ctx), r.logAlerts)
	return nil
}

// Stop stops refreshing and leasing rate-limit tokens, logs the alerts
// still queued and closes idle connections.
func (r *Registry) Stop() {
	r.loop.Stop()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.bgCancel()
	r.bg.Wait()
	r.alertLoop.Stop()
	r.shared.CloseIdleConnections()
}

// alertQueue bounds the pod-local alerts waiting to be logged.
const alertQueue = 256

// alert queues a pod-local alert without blocking; a full queue (the
// database has been unreachable for a while) drops it, logged.
func (r *Registry) alert(ev store.AlertEvent) {
	ev.Source = r.cfg.Source
	select {
	case r.alerts <- ev:
	default:
		r.cfg.Logger.Error("alert queue full: alert dropped", "type", ev.Type, "endpoint", ev.Endpoint, "kind", ev.Kind)
	}
}

// logAlerts logs the queued alerts until Stop, then those still queued.
func (r *Registry) logAlerts(ctx context.Context) {
	emit := func(ev store.AlertEvent) {
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := r.st.EmitAlert(ectx, ev); err != nil {
			r.cfg.Logger.Error("cannot log an alert", "type", ev.Type, "endpoint", ev.Endpoint, "kind", ev.Kind, "err", err)
		}
	}
	for {
		select {
		case ev := <-r.alerts:
			emit(ev)
		case <-ctx.Done():
			for {
				select {
				case ev := <-r.alerts:
					emit(ev)
				default:
					return
				}
			}
		}
	}
}

// breakerAlert queues breaker.opened when the endpoint's breaker went from
// closed to open, breaker.closed when a trial closed it. A failed trial
// re-opening it is no new alert.
func (e *Endpoint) breakerAlert(before, after breaker.State) {
	switch {
	case before == breaker.Closed && after == breaker.Open:
		e.reg.alert(store.AlertEvent{Type: store.AlertBreakerOpened, Endpoint: e.name,
			Message: fmt.Sprintf("endpoint %s: circuit breaker opened after repeated delivery failures; next trial at %s", e.name, e.breaker.Until().UTC().Format(time.RFC3339))})
	case before != breaker.Closed && after == breaker.Closed:
		e.reg.alert(store.AlertEvent{Type: store.AlertBreakerClosed, Endpoint: e.name,
			Message: fmt.Sprintf("endpoint %s: circuit breaker closed: a trial succeeded", e.name)})
	}
}

func (r *Registry) run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Refresh)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := r.Refresh(rctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("endpoint registry refresh failed", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// Subscribe returns a channel woken (coalesced) whenever readiness may have
// changed: a refresh, a probe flipping a pair, a disable.
func (r *Registry) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	r.subs = append(r.subs, ch)
	r.mu.Unlock()
	return ch
}

// Freed is woken (coalesced) whenever a delivery slot is given back.
func (r *Registry) Freed() <-chan struct{} { return r.freed }

func (r *Registry) notifyLocked() {
	for _, ch := range r.subs {
		startstop.Wake(ch)
	}
}

// Refresh re-reads the endpoints now. Unchanged endpoints keep their
// runtime state; a changed one keeps its in-flight count, breaker and the
// health of pairs it still serves.
func (r *Registry) Refresh(ctx context.Context) error {
	rows, err := r.st.DispatchEndpoints(ctx, r.cfg.Box)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool, len(rows))
	for _, d := range rows {
		seen[d.Name] = true
		e := r.eps[d.Name]
		if e == nil {
			e = &Endpoint{name: d.Name, reg: r, breaker: breaker.New(r.cfg.Breaker)}
			r.eps[d.Name] = e
		}
		if old := e.conf.Load(); old != nil && old.fingerprint == fingerprint(d) {
			continue
		}
		c := r.buildConf(d)
		if old := e.conf.Swap(c); old != nil && old.client != nil && old.client != c.client {
			old.client.CloseIdleConnections()
		}
		e.resetHealthLocked(c)
		e.configureRateLocked(c.cfg.RateLimit, c.cfg.Burst)
		if c.cfg.Enabled {
			e.goneReason = ""
		}
	}
	for name, e := range r.eps {
		if !seen[name] {
			e.removed = true
			if c := e.conf.Load(); c.client != nil {
				c.client.CloseIdleConnections()
			}
			delete(r.eps, name)
		}
	}
	r.byPair, r.pairOf = map[string][]*Endpoint{}, map[string]string{}
	names := make([]string, 0, len(r.eps))
	for n := range r.eps {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		e := r.eps[n]
		c := e.conf.Load().cfg
		for _, k := range c.Kinds {
			key := routeKey(c.Namespace, k.Pair())
			r.byPair[key] = append(r.byPair[key], e)
			r.pairOf[key] = k.Pair()
		}
	}
	r.loaded = true
	r.notifyLocked()
	return nil
}

func fingerprint(d store.DispatchEndpoint) string {
	return fmt.Sprintf("%d/%d/%v", d.UpdatedAt.UnixNano(), len(d.Secrets), d.SecretErr != nil)
}

// conf is an endpoint's immutable configuration snapshot, swapped whole on
// refresh so deliveries read it without a lock.
type conf struct {
	cfg         store.Endpoint
	fingerprint string
	unusable    string // why no delivery can be made; "" if usable
	current     *webhooksdk.Signer
	all         *webhooksdk.Signer // current + previous, until allUntil
	allUntil    time.Time
	task        transport.Target
	probe       transport.Target // nil: no health probe
	probeKey    string           // what is probed: health state survives a refresh while it is the same
	client      *http.Client     // a dedicated client (custom TLS), to close; nil for the shared one
	timeout     time.Duration
}

func (r *Registry) buildConf(d store.DispatchEndpoint) *conf {
	c := &conf{cfg: d.Endpoint, fingerprint: fingerprint(d), timeout: time.Duration(d.RequestTimeoutSecs) * time.Second}
	fail := func(format string, args ...any) *conf {
		c.unusable = fmt.Sprintf(format, args...)
		r.cfg.Logger.Warn("endpoint unusable", "endpoint", d.Name, "reason", c.unusable)
		return c
	}
	if d.SecretErr != nil {
		return fail("its signing secret cannot be opened (%v)", d.SecretErr)
	}
	secrets := make([]string, len(d.Secrets))
	for i, s := range d.Secrets {
		secrets[i] = s.Secret.Reveal()
	}
	var err error
	if c.current, err = webhooksdk.NewSigner(secrets[0]); err != nil {
		return fail("its signing secret is invalid (%v)", err)
	}
	c.all = c.current
	if len(secrets) > 1 {
		if c.all, err = webhooksdk.NewSigner(secrets...); err != nil {
			return fail("its previous signing secret is invalid (%v)", err)
		}
		c.allUntil = d.Secrets[1].Until
	}
	t := d.Target
	if t.IsLambda() {
		if err := r.buildLambda(c, d); err != nil {
			return fail("%v", err)
		}
		return c
	}
	if t.Type != store.TargetHTTPS {
		return fail("target type %q is not supported by this dispatcher", t.Type)
	}
	if err := egress.ValidateTargetURL(t.URL, r.cfg.Egress); err != nil {
		return fail("target %s is refused: %v", t.URL, err)
	}
	client := r.shared
	if t.CABundle != "" || t.ClientCertFile != "" {
		client, err = egress.NewClient(egress.ClientConfig{Policy: r.cfg.Egress, Resolver: r.cfg.Resolver,
			CABundle: []byte(t.CABundle), ClientCertFile: t.ClientCertFile, ClientKeyFile: t.ClientKeyFile,
			MaxIdleConnsPerHost: d.MaxConcurrency})
		if err != nil {
			return fail("its TLS settings are unusable: %v", err)
		}
		c.client = client
	}
	c.task = transport.NewHTTPS(client, t.URL, r.cfg.UserAgent, r.cfg.MaxResponseBytes)
	if h := d.Health.URL; h != "" {
		if err := egress.ValidateTargetURL(h, r.cfg.Egress); err != nil {
			return fail("health URL %s is refused: %v", h, err)
		}
		c.probe, c.probeKey = transport.NewHTTPS(client, h, r.cfg.UserAgent, probeMaxBody), h
	}
	return c
}

// awsConfigLocked returns the base AWS configuration, loading it once.
func (r *Registry) awsConfigLocked() (aws.Config, error) {
	if r.aws != nil {
		return *r.aws, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := r.cfg.AWS(ctx)
	if err != nil {
		// The error may name the pod's files and credential endpoints: it
		// goes to the log; the endpoint's readers see that it failed.
		r.cfg.Logger.Warn("cannot load the AWS configuration", "err", err)
		return aws.Config{}, errors.New("the AWS configuration cannot be loaded (the dispatcher's log says why)")
	}
	r.aws = &cfg
	return cfg, nil
}

// buildLambda sets c's task and probe targets for a lambda or lambda_url
// endpoint. Its clients and credentials (an assumed role's, cached) live as
// long as the endpoint's configuration.
func (r *Registry) buildLambda(c *conf, d store.DispatchEndpoint) error {
	t := d.Target
	base, err := r.awsConfigLocked()
	if err != nil {
		return err
	}
	for _, u := range []string{t.URL, t.EndpointURL} {
		if u == "" {
			continue
		}
		if err := egress.ValidateTargetURL(u, r.cfg.Egress); err != nil {
			return fmt.Errorf("target %s is refused: %w", u, err)
		}
	}
	creds := base.Credentials
	if t.RoleARN != "" {
		stsc := sts.NewFromConfig(base, func(o *sts.Options) {
			o.Region, o.HTTPClient = t.Region, r.shared
		})
		creds = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsc, t.RoleARN, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = "converge-" + d.Name
		}))
	}
	if t.Type == store.TargetLambdaURL {
		if t.Auth == store.AuthNone {
			creds = nil
		} else if creds == nil {
			return errors.New("auth aws_iam needs AWS credentials, and none are configured")
		}
		c.task = transport.NewLambdaURL(r.shared, t.URL, r.cfg.UserAgent, r.cfg.MaxResponseBytes, creds, t.Region)
		if d.Health.Type == store.HealthInvoke {
			c.probe = transport.NewLambdaURL(r.shared, t.URL, r.cfg.UserAgent, probeMaxBody, creds, t.Region)
		}
	} else {
		// The dispatcher owns retry (the egress client makes one request per
		// attempt), and no timeout but the attempt's (request_timeout_secs),
		// so a slow function is never invoked twice for one claim.
		if creds == nil {
			return errors.New("a lambda target needs AWS credentials, and none are configured")
		}
		lc := transport.LambdaConfig{Function: t.Function, Qualifier: t.Qualifier, Region: t.Region, Endpoint: t.EndpointURL,
			Async: t.Invocation == store.InvocationAsync}
		c.task = transport.NewLambda(r.shared, lc, r.cfg.UserAgent, creds, r.cfg.MaxResponseBytes)
		if d.Health.Type == store.HealthInvoke {
			lc.Async = false // a probe's answer is needed: sync
			c.probe = transport.NewLambda(r.shared, lc, r.cfg.UserAgent, creds, probeMaxBody)
		}
	}
	if c.probe != nil {
		c.probeKey = "invoke " + t.Type + " " + t.Function + t.URL
	}
	return nil
}

// Endpoint is one endpoint's runtime state.
type Endpoint struct {
	name    string
	reg     *Registry
	breaker *breaker.Breaker
	conf    atomic.Pointer[conf]

	// Guarded by reg.mu.
	inflight     int
	backoffUntil time.Time
	backoffWhy   string
	goneReason   string // disabled here (410) before the table says so
	removed      bool
	health       map[string]*pairHealth // nil: no health URL
	lastProbe    time.Time
	probeErr     string
	healthURL    string // the conf's probeKey
	// probedHealthy: a probe of healthURL has been answered properly at
	// least once; until then failed probes do not count (ReportProbe).
	probedHealthy bool
	rate          limiter // the rate limit's tokens on this pod (rate.go)
}

// pairHealth is the probed readiness of one pair at one endpoint.
type pairHealth struct {
	known, ready   bool
	okRun, failRun int
	reason         string // why it is (or last was) not ready
}

// resetHealthLocked keeps the probed state of pairs the endpoint still
// serves at the same health URL.
func (e *Endpoint) resetHealthLocked(c *conf) {
	if c.probe == nil {
		e.health, e.healthURL, e.probedHealthy = nil, "", false
		return
	}
	old := e.health
	if e.healthURL != c.probeKey {
		old, e.probedHealthy = nil, false
	}
	e.health, e.healthURL = make(map[string]*pairHealth, len(c.cfg.Kinds)), c.probeKey
	for _, k := range c.cfg.Kinds {
		if h, ok := old[k.Pair()]; ok {
			e.health[k.Pair()] = h
		} else {
			e.health[k.Pair()] = &pairHealth{}
		}
	}
}

// Name returns the endpoint's name.
func (e *Endpoint) Name() string { return e.name }

// RequestTimeout is the endpoint's per-request timeout.
func (e *Endpoint) RequestTimeout() time.Duration { return e.conf.Load().timeout }

// MaxRequestBytes is the largest envelope the endpoint takes whole: the
// smaller of its configured max_request_bytes and its transport's cap
// (transport.Limited), 0 when neither limits it.
func (e *Endpoint) MaxRequestBytes() int {
	c := e.conf.Load()
	n := c.cfg.Target.MaxRequestBytes
	if l, ok := c.task.(transport.Limited); ok && l.MaxRequestBytes() > 0 && (n == 0 || l.MaxRequestBytes() < n) {
		n = l.MaxRequestBytes()
	}
	return n
}

// MaxBatch is the most tasks the endpoint takes in one request (its
// max_batch, at least 1). A batch takes one slot.
func (e *Endpoint) MaxBatch() int { return max(1, e.conf.Load().cfg.MaxBatch) }

// Deliver sends d to the endpoint's task target.
func (e *Endpoint) Deliver(ctx context.Context, d *transport.Delivery) (*transport.Response, error) {
	c := e.conf.Load()
	if c.task == nil {
		return nil, errors.New("endpoint " + e.name + " is unusable: " + c.unusable)
	}
	return c.task.Deliver(ctx, d)
}

// Sign returns the webhook-signature for a delivery at ts: every secret in
// force at ts (both during a rotation's grace window).
func (e *Endpoint) Sign(msgID string, ts time.Time, body []byte) string {
	return e.signer(ts).Sign(msgID, ts, body)
}

func (e *Endpoint) signer(ts time.Time) *webhooksdk.Signer {
	c := e.conf.Load()
	if !c.allUntil.IsZero() && ts.Before(c.allUntil) {
		return c.all
	}
	return c.current
}

// Limit is this pod's share of the endpoint's max_concurrency.
func (r *Registry) limit(c *conf) int {
	return max(1, int(math.Ceil(float64(c.cfg.MaxConcurrency)*r.cfg.Share())))
}

// capacityLocked returns how many more deliveries of pair the endpoint may
// start now, or 0 and why it may start none. A saturated endpoint is ready
// (capacity 0, no reason).
func (e *Endpoint) capacityLocked(pair string, now time.Time) (int, string) {
	c := e.conf.Load()
	switch {
	case e.removed:
		return 0, fmt.Sprintf("endpoint %s was deleted", e.name)
	case !c.cfg.Enabled:
		return 0, fmt.Sprintf("endpoint %s is disabled: %s", e.name, cmp.Or(c.cfg.DisabledReason, "by the operator"))
	case e.goneReason != "":
		return 0, fmt.Sprintf("endpoint %s is disabled: %s", e.name, e.goneReason)
	case c.unusable != "":
		return 0, fmt.Sprintf("endpoint %s is unusable: %s", e.name, c.unusable)
	case now.Before(e.backoffUntil):
		return 0, fmt.Sprintf("endpoint %s backs off until %s (%s)", e.name, e.backoffUntil.UTC().Format(time.RFC3339), e.backoffWhy)
	}
	bc := e.breaker.Capacity(now)
	switch {
	case bc == 0 && e.breaker.State(now) == breaker.Open:
		return 0, fmt.Sprintf("endpoint %s: circuit breaker open after repeated delivery failures; next trial at %s", e.name, e.breaker.Until().UTC().Format(time.RFC3339))
	case bc == 0:
		return 0, fmt.Sprintf("endpoint %s: circuit breaker half-open, a trial delivery is in flight", e.name)
	}
	if e.health != nil {
		h := e.health[pair]
		switch {
		case h == nil:
			return 0, fmt.Sprintf("endpoint %s does not serve %s", e.name, pair)
		case !h.known && h.reason != "":
			return 0, fmt.Sprintf("endpoint %s: %s", e.name, h.reason)
		case !h.known:
			return 0, fmt.Sprintf("endpoint %s: waiting for its first health probe", e.name)
		case !h.ready:
			return 0, fmt.Sprintf("endpoint %s: %s", e.name, h.reason)
		}
	}
	spare := max(e.reg.limit(c)-e.inflight, 0)
	if bc >= 0 {
		spare = min(spare, bc)
	}
	rc, why := e.rateCapacityLocked(now)
	if why != "" {
		return 0, why
	}
	if rc >= 0 {
		spare = min(spare, rc)
	}
	return spare, ""
}

// capacityLimitLocked is the most deliveries the endpoint may have in
// flight on this pod: its share of max_concurrency, and with a rate limit
// no more than a lease's chunk of tokens.
func (e *Endpoint) capacityLimitLocked() int {
	n := e.reg.limit(e.conf.Load())
	if e.rate.limited() {
		n = min(n, e.rate.chunk())
	}
	return n
}

// routeKey is the key of ns's endpoints serving pair: the bare pair for
// the default namespace's, "ns:pair" for another's.
func routeKey(ns, pair string) string {
	if ns == store.DefaultNamespace || ns == "" {
		return pair
	}
	return ns + ":" + pair
}

// Route returns the route key of a task of namespace ns and pair
// ("kind/version"): ns's own when ns has an endpoint serving pair (enabled
// or not), else the default namespace's. Acquire and Claimable's queued
// take route keys.
func (r *Registry) Route(ns, pair string) string {
	key := routeKey(ns, pair)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, own := r.byPair[key]; own {
		return key
	}
	return pair
}

// Claimable returns the route keys worth claiming now — those with ready
// endpoints whose spare capacity exceeds the tasks of that key already
// waiting locally (queued) — the route keys of the namespaces serving a
// pair themselves, ready or not (own: their tasks of that pair are never
// claimed for the default namespace's endpoints), how many tasks in all
// may be claimed (the spare capacity of the ready endpoints, less the
// queued), and the total capacity (this pod's limits) of those endpoints.
// Capacity counts tasks: a slot of an endpoint with max_batch n carries n.
// Pairs and own are engine.TaskClaimParams' Pairs and Own.
func (r *Registry) Claimable(queued map[string]int) (pairs, own []string, spare, capacity int) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var used map[*Endpoint]bool
	for key, list := range r.byPair {
		pair := r.pairOf[key]
		if key != pair {
			own = append(own, key)
		}
		sum := 0
		for _, e := range list {
			n, _ := e.capacityLocked(pair, now)
			if n <= 0 {
				continue
			}
			n *= e.MaxBatch()
			sum += n
			if used == nil {
				used = map[*Endpoint]bool{}
			}
			if !used[e] {
				used[e] = true
				spare += n
				capacity += e.capacityLimitLocked() * e.MaxBatch()
			}
		}
		if sum > queued[key] {
			pairs = append(pairs, key)
		}
	}
	for _, n := range queued {
		spare -= n
	}
	return pairs, own, max(spare, 0), capacity
}

// Verdict is what a finished delivery says about its endpoint's health.
type Verdict int

// Verdicts.
const (
	// Neutral: no verdict (cancelled, rate-limited, a 4xx for this task).
	Neutral Verdict = iota
	// Success: the endpoint answered properly.
	Success
	// Failure: network error, timeout, 3xx or 5xx; counts toward the breaker.
	Failure
)

// Slot is one acquired delivery slot on an endpoint. End it with Done.
type Slot struct {
	ep    *Endpoint
	trial bool
	done  atomic.Bool
}

// Endpoint returns the slot's endpoint.
func (s *Slot) Endpoint() *Endpoint { return s.ep }

// Done gives the slot back and records the delivery's verdict on the
// breaker. Calls after the first do nothing.
func (s *Slot) Done(v Verdict) {
	if s.done.Swap(true) {
		return
	}
	e := s.ep
	before := e.breaker.State(time.Now())
	switch v {
	case Success:
		e.breaker.Success()
	case Failure:
		e.breaker.Failure(time.Now(), s.trial)
	default:
		e.breaker.Abandon(s.trial)
	}
	e.breakerAlert(before, e.breaker.State(time.Now()))
	e.reg.mu.Lock()
	e.inflight--
	if v == Failure && e.breaker.State(time.Now()) == breaker.Open {
		e.reg.notifyLocked()
	}
	e.reg.mu.Unlock()
	startstop.Wake(e.reg.freed)
}

// Acquire takes a delivery slot on the least-loaded ready endpoint of a
// route key (Route), skipping the named endpoints (those a failover
// already tried).
func (r *Registry) Acquire(key string, exclude ...string) (*Slot, bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	list, pair := r.byPair[key], r.pairOf[key]
	var best *Endpoint
	r.rr++
	for i := range list {
		e := list[(i+r.rr)%len(list)] // rotate so ties spread
		if slices.Contains(exclude, e.name) {
			continue
		}
		if n, _ := e.capacityLocked(pair, now); n > 0 && (best == nil || e.inflight < best.inflight) && e.hasTokenLocked(now) {
			best = e
		}
	}
	if best == nil {
		return nil, false
	}
	ok, trial := best.breaker.Allow(now)
	if !ok {
		return nil, false
	}
	best.takeTokenLocked(now)
	best.inflight++
	return &Slot{ep: best, trial: trial}, true
}

// BackOff stops new deliveries to the endpoint until until (a 429, or a
// Retry-After on a failure). A later back-off wins.
func (e *Endpoint) BackOff(until time.Time, why string) {
	e.reg.mu.Lock()
	defer e.reg.mu.Unlock()
	if until.After(e.backoffUntil) {
		e.backoffUntil, e.backoffWhy = until, why
		e.reg.notifyLocked()
	}
}

// Disable stops deliveries to the endpoint on this pod at once; the caller
// records it in the table (store.DisableEndpoint) so every pod follows.
func (e *Endpoint) Disable(reason string) {
	e.reg.mu.Lock()
	defer e.reg.mu.Unlock()
	e.goneReason = reason
	e.reg.notifyLocked()
}

// PairStatus says whether a (kind, kind_version) has a ready endpoint of
// the default namespace on this pod, and if not, why its resources park:
// every endpoint serving it and what holds each back.
func (r *Registry) PairStatus(kind string, version int) (bool, string) {
	return r.RouteStatus(store.DefaultNamespace, kind, version)
}

// RouteStatus is PairStatus for the tasks of namespace ns: its own
// endpoints serving the pair if it has any (Route), else the default
// namespace's.
func (r *Registry) RouteStatus(ns, kind string, version int) (bool, string) {
	pair := fmt.Sprintf("%s/%d", kind, version)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded {
		return false, "the dispatcher has not loaded its endpoints yet"
	}
	list, of := r.byPair[routeKey(ns, pair)], " of namespace "+ns
	if len(list) == 0 || routeKey(ns, pair) == pair {
		list, of = r.byPair[pair], ""
	}
	if len(list) == 0 {
		return false, fmt.Sprintf("no endpoint is registered for %s/%d", kind, version)
	}
	reasons := make([]string, 0, len(list))
	for _, e := range list {
		n, why := e.capacityLocked(pair, now)
		if why == "" || n > 0 {
			return true, ""
		}
		reasons = append(reasons, why)
	}
	return false, fmt.Sprintf("no ready endpoint%s for %s/%d: %s", of, kind, version, strings.Join(reasons, "; "))
}

// InFlight is the number of deliveries in flight on this pod.
func (r *Registry) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.eps {
		n += e.inflight
	}
	return n
}
