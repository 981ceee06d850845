package workload

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awssdk "github.com/aws/aws-sdk-go-v2/aws"

	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/egress"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/dispatch/transport/lambdatest"
	"github.com/convergeplane/converge/webhooksdk"
	sdklambda "github.com/convergeplane/converge/webhooksdk/lambda"
)

// Provider is the no-op webhooksdk provider of the "leaf" kind every HTTP
// path posts to, served on loopback.
type Provider struct {
	// URL is where to POST signed envelopes.
	URL string
	// Secret is the signing secret it verifies requests with.
	Secret string

	h    *webhooksdk.Endpoint
	stop []func()
}

// NewProvider starts a provider answering inline 200s, or (async) 202s
// followed by a callback. Close it when done.
func NewProvider(tb testing.TB, async bool) *Provider {
	tb.Helper()
	secret, err := webhooksdk.GenerateSecret()
	must(tb, err)
	p := &Provider{Secret: secret}
	h, err := webhooksdk.Handler(p.providers(async), p.options(async)...)
	must(tb, err)
	p.h = h
	srv := httptest.NewServer(h)
	p.URL = srv.URL + "/converge"
	p.stop = append(p.stop, srv.Close)
	return p
}

// providers is the provider's one kind, leaf/1, doing Noop (async: after
// just long enough that the zero sync budget expires first).
func (p *Provider) providers(async bool) []webhooksdk.Provider {
	work := Noop
	if async {
		work = func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
			t := time.NewTimer(100 * time.Microsecond)
			defer t.Stop()
			<-t.C
			return Noop(ctx, req)
		}
	}
	return []webhooksdk.Provider{webhooksdk.WorkFunc("leaf", 1, work)}
}

// options are the provider's: its secret, no logging, and (async) a zero
// sync budget and a callback client that keeps its connections alive (the
// default transport keeps 2 per host).
func (p *Provider) options(async bool) []webhooksdk.Option {
	opts := []webhooksdk.Option{webhooksdk.WithSecrets(p.Secret), webhooksdk.WithLogger(discard)}
	if async {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = Concurrency
		opts = append(opts, webhooksdk.WithSyncBudget(0), webhooksdk.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
		p.stop = append(p.stop, tr.CloseIdleConnections)
	}
	return opts
}

// Close shuts the provider down.
func (p *Provider) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.h.Shutdown(ctx)
	for i := len(p.stop) - 1; i >= 0; i-- {
		p.stop[i]()
	}
}

// Envelope is leaf task i's envelope as the dispatcher sends it.
func Envelope(i int) webhooksdk.Envelope {
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	return webhooksdk.Envelope{Type: "task", TaskID: id, ClaimEpoch: 1, Attempt: 1, TaskType: "reconcile",
		Reaction: "work", Trigger: "specChange", Kind: "leaf", KindVersion: 1,
		Resource: &webhooksdk.Resource{ID: id, Kind: "leaf", KindVersion: 1, Name: "r-" + strconv.Itoa(i),
			Spec: json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`), Generation: 1, Phase: "Reconciling"},
		Callback: &webhooksdk.Callback{URL: "http://127.0.0.1:1/v1/tasks/" + id + "/outcome", Token: "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}
}

// H is the HTTP ceiling: Concurrency workers POST signed envelopes to a
// no-op provider through the egress client and the HTTPS target, as the
// dispatcher does, with no database.
func H(tb testing.TB, n int) float64 {
	tb.Helper()
	p := NewProvider(tb, false)
	defer p.Close()
	client, err := egress.NewClient(egress.ClientConfig{Policy: egress.Policy{DevMode: true}, MaxIdleConnsPerHost: Concurrency})
	must(tb, err)
	defer client.CloseIdleConnections()
	tgt := transport.NewHTTPS(client, p.URL, "converge-dispatch/bench", 16<<20)
	signer, err := webhooksdk.NewSigner(p.Secret)
	must(tb, err)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i], err = json.Marshal(Envelope(i))
		must(tb, err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				now := time.Now()
				msgID := "msg_h_" + strconv.Itoa(i)
				resp, err := tgt.Deliver(tb.Context(), &transport.Delivery{MsgID: msgID, Timestamp: now, Body: bodies[i],
					Signature: signer.Sign(msgID, now, bodies[i])})
				if err != nil || resp.Status != http.StatusOK {
					tb.Errorf("H delivery %d: %v %v", i, resp, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// Target is how the engine's push dispatcher reaches the provider.
type Target struct {
	// Async makes the provider answer 202 and call back.
	Async bool
	// Lambda puts the provider behind a lambda target (sync Invoke through
	// the Invoke-API test server) instead of an https one.
	Lambda bool
	// MaxBatch is the endpoint's max_batch; 0 or 1: no batching.
	MaxBatch int
}

// Dispatch is the engine with the push dispatcher wired to a no-op
// provider and the callback API, all on loopback.
type Dispatch struct {
	*DB
	// D is the running dispatcher.
	D *dispatch.Dispatcher
}

// Keys returns what a dispatcher is configured with to keep endpoint
// secrets and mint callback tokens: a fresh secret box and token key.
func Keys(tb testing.TB) (*store.SecretBox, []byte) {
	tb.Helper()
	key := make([]byte, store.SecretKeyBytes)
	_, _ = rand.Read(key)
	box, err := store.NewSecretBox(key)
	must(tb, err)
	tokenKey := make([]byte, 32)
	_, _ = rand.Read(tokenKey)
	return box, tokenKey
}

// NewDispatch starts the engine, the dispatcher and the provider on a
// fresh database and returns once the endpoint is ready. Close it when done.
func NewDispatch(tb testing.TB, t Target) *Dispatch {
	tb.Helper()
	x := NewDB(tb)
	box, tokenKey := Keys(tb)
	var cb atomic.Pointer[http.Handler] // the dispatcher's receiver, once it exists
	cbSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := cb.Load()
		if h == nil {
			http.Error(w, "no dispatcher yet", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	}))
	x.OnClose(cbSrv.Close)

	p := NewProvider(tb, t.Async)
	x.OnClose(p.Close)
	tgt := store.EndpointTarget{Type: store.TargetHTTPS, URL: p.URL}
	var aws func(context.Context) (awssdk.Config, error)
	if t.Lambda {
		fn, err := sdklambda.New(p.providers(t.Async), p.options(t.Async)...)
		must(tb, err)
		ls := lambdatest.New(tb)
		ls.Add("bench-fn", func(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
			return fn.Serve(ctx, ev)
		})
		tgt = store.EndpointTarget{Type: store.TargetLambda, Function: "bench-fn", Region: lambdatest.Region, EndpointURL: ls.URL}
		aws = lambdatest.AWSConfig
		x.OnClose(func() {
			if ls.Invalid.Load() != 0 {
				tb.Errorf("%d Invoke calls with an invalid signature", ls.Invalid.Load())
			}
		})
	}
	_, _, err := x.St.CreateEndpoint(x.ctx, box, store.PutEndpointParams{Name: "bench",
		Kinds:          []store.EndpointKind{{Kind: "leaf", KindVersion: 1}},
		Target:         tgt,
		Secret:         store.EndpointSecret(p.Secret),
		MaxConcurrency: Concurrency,
		MaxBatch:       t.MaxBatch})
	must(tb, err)

	d, err := dispatch.New(dispatch.Config{SecretBox: box, TokenKey: tokenKey, CallbackBaseURL: cbSrv.URL, DevMode: true,
		AWS: aws, Logger: discard}, x.Eng, x.St, dispatch.Wakeups{WorkReady: x.Lis.Subscribe("work_ready"),
		EndpointsChanged: x.Lis.Subscribe("endpoints_changed")})
	must(tb, err)
	h := d.Callbacks()
	cb.Store(&h)
	must(tb, d.Start(x.ctx))
	x.OnClose(d.Stop)
	x.Listen()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for ok, _ := d.Registry().PairStatus("leaf", 1); !ok; ok, _ = d.Registry().PairStatus("leaf", 1) {
		if time.Now().After(deadline) {
			tb.Fatal("the endpoint was not ready within 10s")
		}
		<-tick.C
	}
	return &Dispatch{DB: x, D: d}
}

// HTTP runs the engine with the push dispatcher (inline or async), the
// endpoint's max_batch set to maxBatch (1: no batching).
func HTTP(tb testing.TB, n int, async bool, maxBatch int) float64 {
	tb.Helper()
	x := NewDispatch(tb, Target{Async: async, MaxBatch: maxBatch})
	defer x.Close()
	x.Seed(n)
	return x.Converge(n)
}
