package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/convergeplane/converge/control/drainer"
	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/internal/testkit/applylog"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/convergeplane/converge/internal/testkit/workload"
	"github.com/convergeplane/converge/webhooksdk"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a control plane on a private database: the drain duty, the
// callback API on loopback, and any dispatchers a test starts.
type env struct {
	t        *testing.T
	db       *pgtest.Database
	eng      *engine.Engine
	st       *store.Store
	box      *store.SecretBox
	lis      *store.Listener
	log      *slog.Logger
	ctx      context.Context
	tokenKey []byte
	cbURL    string
	cb       forward // the callback API: the first dispatcher's receiver
	metrics  *prometheus.Registry
}

// forward serves with the handler set last; 503 before one is.
type forward struct{ h atomic.Pointer[http.Handler] }

func (f *forward) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := f.h.Load()
	if h == nil {
		http.Error(w, "no dispatcher yet", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := pgtest.New(t)
	must(t, applylog.Install(t.Context(), db.Pool))
	log := slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng := engine.New(db.Pool, engine.Config{RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	st := store.New(db.Pool, store.Config{})
	box, tokenKey := workload.Keys(t)
	e := &env{t: t, db: db, eng: eng, st: st, box: box, lis: st.NewListener(log), log: log, ctx: t.Context(),
		tokenKey: tokenKey, metrics: prometheus.NewRegistry()}

	dr := drainer.New(drainer.Config{Poll: 50 * time.Millisecond},
		eng, e.lis.Subscribe("outbox_ready"), log)
	must(t, dr.Start(e.ctx))
	t.Cleanup(dr.Stop)

	// The callback API is on loopback before any dispatcher exists, since a
	// dispatcher needs its URL; the first one's receiver serves it.
	srv := httptest.NewServer(&e.cb)
	t.Cleanup(srv.Close)
	e.cbURL = srv.URL
	return e
}

// tlog sends log lines to the test log.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// dispatcher starts a dispatcher in dev mode (plain-http loopback
// endpoints allowed) unless cfg sets an egress allowance (AllowHTTP or
// AllowCIDRs). Start the listener after.
func (e *env) dispatcher(cfg dispatch.Config) *dispatch.Dispatcher {
	e.t.Helper()
	cfg.SecretBox = e.box
	cfg.TokenKey = e.tokenKey
	if cfg.CallbackBaseURL == "" {
		cfg.CallbackBaseURL = e.cbURL
	}
	if cfg.Poll == 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	cfg.Version = "test"
	if cfg.Metrics == nil {
		cfg.Metrics = e.metrics
	}
	if !cfg.AllowHTTP && len(cfg.AllowCIDRs) == 0 {
		cfg.DevMode = true // loopback providers; tests of the egress policy opt out
	}
	d, err := dispatch.New(cfg, e.eng, e.st, dispatch.Wakeups{
		WorkReady: e.lis.Subscribe("work_ready"), EndpointsChanged: e.lis.Subscribe("endpoints_changed")})
	must(e.t, err)
	cb := d.Callbacks()
	e.cb.h.CompareAndSwap(nil, &cb)
	must(e.t, d.Start(e.ctx))
	e.t.Cleanup(d.Stop)
	return d
}

// listen starts the shared listener; call after every Subscribe.
func (e *env) listen() {
	e.t.Helper()
	must(e.t, e.lis.Start(e.ctx))
	e.t.Cleanup(e.lis.Stop)
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Pool.Exec(context.WithoutCancel(e.ctx), sql, args...)
	must(e.t, err)
}

const leafReactions = `[{"name":"work","trigger":"specChange","emits":["status","conditions"]}]`

// kind stores a leaf kind manifest with its policy.
func (e *env) kind(kind string, policy model.Policy) {
	e.t.Helper()
	p, _ := json.Marshal(policy)
	e.exec(`INSERT INTO kind_manifest (kind, kind_version, reactions, policy) VALUES ($1, 1, $2, $3)`, kind, leafReactions, p)
}

// apply creates a resource and schedules it, as the API does.
func (e *env) apply(kind, name string, spec any) string {
	e.t.Helper()
	b, _ := json.Marshal(spec)
	var id string
	must(e.t, e.db.Pool.QueryRow(e.ctx, `INSERT INTO resources (kind, kind_version, name, spec) VALUES ($1, 1, $2, $3) RETURNING id`,
		kind, name, b).Scan(&id))
	e.exec(`SELECT schedule_eligible(ARRAY[$1::uuid])`, id)
	return id
}

// applyMany creates n resources of kind in one statement and schedules them.
func (e *env) applyMany(kind string, n int) {
	e.t.Helper()
	e.exec(`WITH r AS (INSERT INTO resources (kind, kind_version, name, spec)
		SELECT $1, 1, $1 || '-' || i, jsonb_build_object('i', i) FROM generate_series(1, $2) i RETURNING id)
		SELECT schedule_eligible(array_agg(id)) FROM r`, kind, n)
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	must(e.t, e.db.Pool.QueryRow(context.WithoutCancel(e.ctx), sql, args...).Scan(&n))
	return n
}

func (e *env) phase(kind, name string) string {
	var p string
	if err := e.db.Pool.QueryRow(context.WithoutCancel(e.ctx), `SELECT phase FROM resources WHERE kind = $1 AND name = $2`, kind, name).Scan(&p); err != nil {
		return "missing"
	}
	return p
}

func (e *env) waitPhase(kind, name, phase string, within time.Duration) {
	e.t.Helper()
	waitFor(e.t, within, fmt.Sprintf("%s/%s to be %s", kind, name, phase), func() bool { return e.phase(kind, name) == phase })
}

func (e *env) waitReady(kind string, n int, within time.Duration) {
	e.t.Helper()
	waitFor(e.t, within, fmt.Sprintf("%d %s resources Ready", n, kind), func() bool {
		return e.count(`SELECT count(*) FROM resources WHERE kind = $1 AND phase = 'Ready'`, kind) == n
	})
}

// waitFor polls cond every 10ms until it holds or within passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-tick.C
	}
}

// checkNoDoubleApply fails if any (resource, generation) had a specChange
// outcome applied twice.
func (e *env) checkNoDoubleApply() {
	e.t.Helper()
	n, err := applylog.DoubleApplied(context.WithoutCancel(e.ctx), e.db.Pool)
	must(e.t, err)
	if n != 0 {
		e.t.Errorf("%d (resource, generation) pairs had their outcome applied twice", n)
	}
}

// endpointOpts shape a registered endpoint.
type endpointOpts struct {
	kinds          []string // "kind" at version 1; defaults to the server's kinds
	maxConcurrency int
	maxBatch       int
	health         bool // probe <url>/health
	healthy        int
	interval       int
	timeoutSecs    int
	maxRequest     int     // the target's max_request_bytes: larger envelopes go thin
	rate           float64 // rate_limit; 0 = unlimited
	burst          int     // 0 = the default, ceil(rate)
	adaptive       bool
}

// server is a provider endpoint on loopback whose handler can be swapped
// after the endpoint is registered (the secret exists only then).
type server struct {
	*httptest.Server
	name   string
	secret string
	h      atomic.Pointer[http.Handler]
}

func (s *server) set(h http.Handler) { s.h.Store(&h) }

// endpoint starts a loopback server, registers it as endpoint name for the
// kinds, and returns it (handler not yet set: 503).
func (e *env) endpoint(name string, o endpointOpts) *server {
	e.t.Helper()
	s := &server{name: name}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := s.h.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	e.t.Cleanup(s.Close)
	p := store.PutEndpointParams{
		Name:               name,
		Target:             store.EndpointTarget{Type: store.TargetHTTPS, URL: s.URL + "/converge", MaxRequestBytes: o.maxRequest},
		MaxConcurrency:     o.maxConcurrency,
		MaxBatch:           o.maxBatch,
		RequestTimeoutSecs: o.timeoutSecs,
	}
	for _, k := range o.kinds {
		p.Kinds = append(p.Kinds, store.EndpointKind{Kind: k, KindVersion: 1})
	}
	if o.rate > 0 {
		p.RateLimit, p.RateAdaptive = &o.rate, o.adaptive
		if o.burst > 0 {
			p.Burst = &o.burst
		}
	}
	if o.health {
		p.Health = store.EndpointHealth{URL: s.URL + "/converge/health", IntervalSecs: max(o.interval, 1),
			HealthyThreshold: o.healthy, UnhealthyThreshold: 1}
	}
	_, secret, err := e.st.CreateEndpoint(e.ctx, e.box, p)
	must(e.t, err)
	s.secret = secret.Reveal()
	return s
}

// sdk serves providers with webhooksdk on s (the "real" provider).
func (e *env) sdk(s *server, opts []webhooksdk.Option, providers ...webhooksdk.Provider) *webhooksdk.Endpoint {
	e.t.Helper()
	opts = append([]webhooksdk.Option{webhooksdk.WithSecrets(s.secret), webhooksdk.WithLogger(e.log)}, opts...)
	h, err := webhooksdk.Handler(providers, opts...)
	must(e.t, err)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
	})
	s.set(h)
	return h
}

// provider is a webhooksdk.Provider built from a function.
type provider struct {
	kind  string
	work  func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error)
	ready atomic.Bool
}

func newProvider(kind string, work func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error)) *provider {
	p := &provider{kind: kind, work: work}
	p.ready.Store(true)
	return p
}

func (p *provider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *provider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	return p.work(ctx, req)
}
func (p *provider) Ready() bool { return p.ready.Load() }

// echo reports the spec as the status.
func echo(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	return webhooksdk.Outcome{Status: req.Resource.Spec}, nil
}

// delivery is what a raw handler saw of one request.
type delivery struct {
	at     time.Time
	header http.Header
	env    webhooksdk.Envelope
	body   []byte
}

// recorder wraps a handler, recording each task delivery (not probes) and
// counting concurrent requests.
type recorder struct {
	next http.Handler

	mu         sync.Mutex
	deliveries []delivery
	cur, peak  atomic.Int32
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var env webhooksdk.Envelope
	_ = json.Unmarshal(body, &env)
	if env.Type == webhooksdk.EnvelopeTask {
		n := r.cur.Add(1)
		defer r.cur.Add(-1)
		for {
			p := r.peak.Load()
			if n <= p || r.peak.CompareAndSwap(p, n) {
				break
			}
		}
		r.mu.Lock()
		r.deliveries = append(r.deliveries, delivery{at: time.Now(), header: req.Header.Clone(), env: env, body: body})
		r.mu.Unlock()
	}
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	r.next.ServeHTTP(w, req)
}

func (r *recorder) seen() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.deliveries...)
}

// verified wraps fn so it only runs for requests signed with secret.
func verified(secret string, fn http.HandlerFunc) http.Handler {
	s, err := webhooksdk.ParseSecret(secret)
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhooksdk.Verify([]webhooksdk.Secret{s}, r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		fn(w, r)
	})
}

// resultBody is an inline 200 answer for env with status.
func resultBody(env webhooksdk.Envelope, status string) []byte {
	b, _ := json.Marshal(webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
		Outcome: &webhooksdk.Outcome{Status: json.RawMessage(status)}})
	return b
}

func decodeEnvelope(r *http.Request) webhooksdk.Envelope {
	body, _ := io.ReadAll(r.Body)
	var env webhooksdk.Envelope
	_ = json.Unmarshal(body, &env)
	return env
}

func metricFamily(t *testing.T, e *env, name string) (*dto.MetricFamily, bool) {
	t.Helper()
	mfs, err := e.metrics.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf, true
		}
	}
	return nil, false
}

// metricValue returns the value of the series of name whose labels include
// labels (0 if none).
func metricValue(t *testing.T, e *env, name string, labels map[string]string) float64 {
	t.Helper()
	mf, ok := metricFamily(t, e, name)
	if !ok {
		return 0
	}
	for _, m := range mf.GetMetric() {
		match := 0
		for _, l := range m.GetLabel() {
			if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
