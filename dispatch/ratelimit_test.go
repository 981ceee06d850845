package dispatch_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/webhooksdk"
	sdklambda "github.com/convergeplane/converge/webhooksdk/lambda"
)

// arrivals wraps a provider, recording when each task request (a single
// envelope or a batch: one request either way) arrived and how many tasks
// it carried.
type arrivals struct {
	next http.Handler

	mu    sync.Mutex
	at    []time.Time
	tasks int
	most  int
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	body, _ := io.ReadAll(r.Body)
	var req webhooksdk.Batch
	_ = json.Unmarshal(body, &req)
	n := 0
	switch req.Type {
	case webhooksdk.EnvelopeBatch:
		n = len(req.Tasks)
	case webhooksdk.EnvelopeTask:
		n = 1
	}
	if n > 0 {
		a.mu.Lock()
		a.at = append(a.at, now)
		a.tasks += n
		a.most = max(a.most, n)
		a.mu.Unlock()
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	a.next.ServeHTTP(w, r)
}

func (a *arrivals) seen() (at []time.Time, tasks, most int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...), a.tasks, a.most
}

// rateBound is the most requests the rule of docs/operations.md "Rate
// limits" lets pods dispatch pods send in any window of length w to an
// endpoint limited to rate with burst: the bucket gives out at most
// burst + rate·w, and each pod may hold up to 1.5 chunks leased before the
// window (a chunk is 100 ms at the rate, at least 1, at most the burst).
func rateBound(rate float64, burst, pods int, w time.Duration) float64 {
	chunk := max(1, min(int(math.Ceil(rate*0.1)), burst))
	held := chunk/2 + chunk
	return float64(burst) + rate*w.Seconds() + float64(pods*held)
}

// checkRate fails when any window of one second, starting at an arrival,
// holds more requests than rateBound allows, or when the run as a whole was
// faster than the bound permits.
func checkRate(t *testing.T, at []time.Time, rate float64, burst, pods int) {
	t.Helper()
	if len(at) == 0 {
		t.Fatal("no requests arrived")
	}
	limit := rateBound(rate, burst, pods, time.Second)
	worst := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) < time.Second; j++ {
			n++
		}
		worst = max(worst, n)
	}
	span := at[len(at)-1].Sub(at[0])
	t.Logf("%d requests in %s (%.1f/s at a limit of %.0f/s); the busiest second held %d, the rule allows %.0f",
		len(at), span.Round(time.Millisecond), float64(len(at)-1)/span.Seconds(), rate, worst, limit)
	if float64(worst) > limit {
		t.Errorf("a one-second window held %d requests; the rule allows at most %.0f", worst, limit)
	}
	if float64(len(at)) > rateBound(rate, burst, pods, span) {
		t.Errorf("%d requests in %s; the rule allows at most %.0f", len(at), span, rateBound(rate, burst, pods, span))
	}
}

// TestRateLimitSharedByDispatchers: two dispatchers (different member IDs,
// one database) share an endpoint's 20/s: the provider never sees more than
// the rule allows the two together, in any second or over the run, and
// every task converges. While the bucket is dry the kind's pairs say
// "rate limited", and the metrics show the limit and the waits.
func TestRateLimitSharedByDispatchers(t *testing.T) {
	t.Parallel()
	const (
		rate  = 20.0
		burst = 5
		tasks = 150
	)
	e := newEnv(t)
	e.kind("rl", model.Policy{})
	s := e.endpoint("limited", endpointOpts{kinds: []string{"rl"}, rate: rate, burst: burst})
	arr := &arrivals{next: e.sdk(s, nil, newProvider("rl", echo))}
	s.set(arr)
	d1 := e.dispatcher(dispatch.Config{Claimer: "pod-1"})
	m2 := prometheus.NewRegistry()
	d2 := e.dispatcher(dispatch.Config{Claimer: "pod-2", Metrics: m2})
	e.listen()
	e.applyMany("rl", tasks)
	waitFor(t, 30*time.Second, "the pair to say it is rate limited", func() bool {
		for _, d := range []*dispatch.Dispatcher{d1, d2} {
			if ok, why := d.Registry().PairStatus("rl", 1); !ok && strings.Contains(why, "rate limited") {
				return true
			}
		}
		return false
	})
	e.waitReady("rl", tasks, 60*time.Second)
	at, _, _ := arr.seen()
	checkRate(t, at, rate, burst, 2)

	// Both pods sent, each on its share of the one bucket.
	for i, reg := range []prometheus.Gatherer{e.metrics, m2} {
		sent, waited, limit := 0.0, 0.0, 0.0
		mfs, err := reg.Gather()
		must(t, err)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "converge_dispatch_deliveries_total":
					sent += m.GetCounter().GetValue()
				case "converge_dispatch_endpoint_rate_waited_total":
					waited += m.GetCounter().GetValue()
				case "converge_dispatch_endpoint_rate_limit":
					limit = m.GetGauge().GetValue()
				}
			}
		}
		t.Logf("pod-%d sent %.0f requests, %.0f of them after waiting for a token", i+1, sent, waited)
		if sent == 0 || limit != rate {
			t.Errorf("pod-%d: %.0f requests sent, rate_limit gauge %v; want some, and %v", i+1, sent, limit, rate)
		}
	}
	ep, err := e.st.GetEndpoint(e.ctx, "limited")
	must(t, err)
	if ep.RateState == nil || ep.RateState.Waited == 0 || ep.RateState.EffectiveRate != rate {
		t.Errorf("rate_state = %+v, want requests that waited, at the full rate", ep.RateState)
	}
	e.checkNoDoubleApply()
}

// TestRateLimitCountsABatchAsOneRequest: with max_batch 8, a request of
// several tasks spends one token: tasks go through faster than the rate,
// while requests keep to it.
func TestRateLimitCountsABatchAsOneRequest(t *testing.T) {
	t.Parallel()
	const (
		rate  = 10.0
		burst = 2
		tasks = 120
	)
	e := newEnv(t)
	e.kind("rb", model.Policy{TaskDeadlineSecs: 60})
	s := e.endpoint("batched", endpointOpts{kinds: []string{"rb"}, maxBatch: 8, rate: rate, burst: burst})
	arr := &arrivals{next: e.sdk(s, nil, newProvider("rb", echo))}
	s.set(arr)
	e.applyMany("rb", tasks)
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitReady("rb", tasks, 60*time.Second)
	at, sent, most := arr.seen()
	checkRate(t, at, rate, burst, 1)
	span := at[len(at)-1].Sub(at[0])
	if most < 2 || float64(sent) <= rateBound(rate, burst, 1, span) {
		t.Errorf("%d tasks in %d requests over %s (the largest carrying %d): want batches, and more tasks than the rule lets requests through (%.0f)",
			sent, len(at), span, most, rateBound(rate, burst, 1, span))
	}
}

// TestRateLimitAdaptive: a 429 from an adaptive endpoint's provider halves
// the effective rate for every pod (the shared row says so, and the pod's
// metric once it leases again); 60 s without another throttle restore it.
func TestRateLimitAdaptive(t *testing.T) {
	t.Parallel()
	const rate = 20.0
	e := newEnv(t)
	e.kind("ra", model.Policy{})
	s := e.endpoint("adaptive", endpointOpts{kinds: []string{"ra"}, rate: rate, adaptive: true})
	h := e.sdk(s, nil, newProvider("ra", echo))
	var mu sync.Mutex
	throttle := true
	s.set(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := throttle
		throttle = false
		mu.Unlock()
		if first && r.Header.Get("webhook-id") != "" && !strings.HasSuffix(r.URL.Path, "/health") {
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		h.ServeHTTP(w, r)
	}))
	e.dispatcher(dispatch.Config{RateLimitBackoff: 50 * time.Millisecond})
	e.listen()
	e.apply("ra", "a", map[string]any{})
	e.waitPhase("ra", "a", "Ready", 30*time.Second)

	effective := func() float64 {
		ep, err := e.st.GetEndpoint(e.ctx, "adaptive")
		must(t, err)
		if ep.RateState == nil {
			t.Fatal("no rate_state on a rate-limited endpoint")
		}
		return ep.RateState.EffectiveRate
	}
	waitFor(t, 10*time.Second, "the throttle to be recorded", func() bool {
		ep, err := e.st.GetEndpoint(e.ctx, "adaptive")
		must(t, err)
		return ep.RateState != nil && ep.RateState.Throttles == 1
	})
	// Halved at the throttle, climbing by 20/60 per second since.
	if eff := effective(); eff < rate/2 || eff > rate/2+rate/60*10 {
		t.Fatalf("effective rate %v after a 429, want about %v", eff, rate/2)
	}
	// The pod learns it with its next lease.
	e.apply("ra", "b", map[string]any{})
	e.waitPhase("ra", "b", "Ready", 30*time.Second)
	if got := metricValue(t, e, "converge_dispatch_endpoint_rate_effective", map[string]string{"endpoint": "adaptive"}); got >= rate {
		t.Errorf("the pod's effective-rate gauge reads %v after the 429, want below %v", got, rate)
	}
	// 60 s later (the bucket's clock moved back) it is whole again.
	e.exec(`UPDATE endpoint_rate_buckets SET lowered_at = lowered_at - interval '60 seconds', refilled_at = refilled_at - interval '60 seconds'`)
	if eff := effective(); eff != rate {
		t.Fatalf("effective rate %v 60 s after the throttle, want %v", eff, rate)
	}
	// The pod may hold a token leased before the clock moved: the second
	// delivery needs a lease made after it.
	for _, name := range []string{"c", "d"} {
		e.apply("ra", name, map[string]any{})
		e.waitPhase("ra", name, "Ready", 30*time.Second)
	}
	waitFor(t, 10*time.Second, "the pod's effective-rate gauge to read the whole rate again", func() bool {
		return metricValue(t, e, "converge_dispatch_endpoint_rate_effective", map[string]string{"endpoint": "adaptive"}) == rate
	})
}

// TestRateLimitAdaptiveLambdaThrottle: a Lambda TooManyRequestsException
// (the transport answers it as a 429) lowers an adaptive endpoint's rate
// as a 429 does, and the task still converges without a burnt attempt.
func TestRateLimitAdaptiveLambdaThrottle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{TaskDeadlineSecs: 30})
	fn, err := sdklambda.New([]webhooksdk.Provider{newProvider("leaf", echo)}, webhooksdk.WithLogger(e.log),
		webhooksdk.WithSecrets(string(lambdaSecret)))
	must(t, err)
	ls := lambdatest.New(t)
	f := ls.Add("leaf-fn", fn.Serve)
	f.Throttle.Store(1)
	rate := 8.0
	_, _, err = e.st.CreateEndpoint(e.ctx, e.box, store.PutEndpointParams{Name: "leaf-lambda", RateLimit: &rate, RateAdaptive: true,
		Kinds:  []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target: store.EndpointTarget{Type: store.TargetLambda, Function: "leaf-fn", Region: lambdatest.Region, EndpointURL: ls.URL},
		Health: store.EndpointHealth{Type: store.HealthNone}, Secret: lambdaSecret})
	must(t, err)
	e.apply("leaf", "a", map[string]any{})
	e.dispatcher(dispatch.Config{AWS: lambdatest.AWSConfig, RateLimitBackoff: 50 * time.Millisecond})
	e.listen()
	e.waitReady("leaf", 1, 30*time.Second)
	if f.Throttled.Load() != 1 || f.Invocations.Load() != 1 {
		t.Fatalf("%d throttled, %d ran; want 1, 1", f.Throttled.Load(), f.Invocations.Load())
	}
	waitFor(t, 10*time.Second, "the throttle in the shared bucket", func() bool {
		ep, err := e.st.GetEndpoint(e.ctx, "leaf-lambda")
		must(t, err)
		return ep.RateState != nil && ep.RateState.Throttles == 1 && ep.RateState.EffectiveRate < rate
	})
}
