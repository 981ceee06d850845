package webhooksdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

var kvVPC = webhooksdk.KindVersion{Kind: "vpc", Version: 1}

// waitTimeout bounds every wait on the handler; generous for a loaded 2-core machine.
const waitTimeout = 10 * time.Second

type workFunc func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error)

// fakeProvider is a Provider whose Work is a test-supplied function and which records
// what the Handler called.
type fakeProvider struct {
	kv    webhooksdk.KindVersion
	work  workFunc
	ready atomic.Bool
	calls atomic.Int32

	mu     sync.Mutex
	events []string // "config:<spec>|<bundle>" and "work"
}

func newFake(kv webhooksdk.KindVersion, work workFunc) *fakeProvider {
	p := &fakeProvider{kv: kv, work: work}
	p.ready.Store(true)
	return p
}

func (p *fakeProvider) Kind() webhooksdk.KindVersion { return p.kv }

func (p *fakeProvider) Work(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	p.calls.Add(1)
	p.record("work")
	if p.work == nil {
		return webhooksdk.Outcome{}, nil
	}
	return p.work(ctx, req)
}

func (p *fakeProvider) OnConfig(cfg webhooksdk.ProviderConfig) {
	p.record("config:" + string(cfg.Spec) + "|" + string(cfg.Data))
}

func (p *fakeProvider) Ready() bool { return p.ready.Load() }

func (p *fakeProvider) record(ev string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, ev)
}

func (p *fakeProvider) Events() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

// gate blocks Work until the test opens it; it opens itself at cleanup so a failing test
// does not hang Shutdown.
type gate struct {
	entered chan struct{} // receives once per Work that reached the gate
	open    chan struct{}
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}, 16), open: make(chan struct{})}
	t.Cleanup(g.Open)
	return g
}

func (g *gate) Open() { g.once.Do(func() { close(g.open) }) }

func (g *gate) wait(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitTimeout):
		t.Fatal("Work never started")
	}
}

type testBundle struct {
	ep   *webhooksdk.Endpoint
	srv  *httptest.Server
	cb   *sdktest.CallbackReceiver
	prov *fakeProvider
}

func setup(t *testing.T, work workFunc, opts ...webhooksdk.Option) *testBundle {
	t.Helper()
	return setupProviders(t, []*fakeProvider{newFake(kvVPC, work)}, opts...)
}

func setupProviders(t *testing.T, provs []*fakeProvider, opts ...webhooksdk.Option) *testBundle {
	t.Helper()
	cb := sdktest.NewCallbackReceiver(t)
	ps := make([]webhooksdk.Provider, len(provs))
	for i, p := range provs {
		ps[i] = p
	}
	base := []webhooksdk.Option{
		webhooksdk.WithSecrets(vectorSecret),
		webhooksdk.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))),
		webhooksdk.WithCallbackRetry(5*time.Millisecond, 20*time.Millisecond, time.Minute),
	}
	ep, err := webhooksdk.Handler(ps, append(base, opts...)...)
	if err != nil {
		t.Fatalf("Handler: %v", err)
	}
	srv := httptest.NewServer(ep)
	// Cleanups run last-in first-out: close the server, then drain the endpoint while
	// the callback receiver still runs.
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
		defer cancel()
		if err := ep.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &testBundle{ep: ep, srv: srv, cb: cb, prov: provs[0]}
}

// envelope returns a task envelope for vpc/v1; withCallback points it at the receiver.
func (b *testBundle) envelope(withCallback bool) webhooksdk.Envelope {
	env := sdktest.TaskEnvelope(kvVPC)
	if withCallback {
		env.Callback = b.cb.Callback(env.TaskID)
	}
	return env
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (b *testBundle) post(t *testing.T, msgID string, env webhooksdk.Envelope) response {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b.do(t, sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, msgID, time.Time{}, body))
}

func (b *testBundle) do(t *testing.T, req *http.Request) response {
	t.Helper()
	if dump, err := httputil.DumpRequestOut(req, req.ContentLength >= 0 && req.ContentLength < 4096); err == nil {
		t.Logf("request:\n%s", dump)
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	t.Logf("response: %s %v\n%s", resp.Status, resp.Header, body)
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func decodeResult(t *testing.T, body []byte) webhooksdk.Result {
	t.Helper()
	var r webhooksdk.Result
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("body is not a Result: %v\n%s", err, body)
	}
	return r
}

func TestHandlerInline(t *testing.T) {
	t.Parallel()

	t.Run("success", func(t *testing.T) {
		t.Parallel()
		var got webhooksdk.Request
		b := setup(t, func(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
			got = req
			return webhooksdk.Outcome{
				Status:     json.RawMessage(`{"vpc_id":"vpc-1"}`),
				Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "True"}},
			}, nil
		})
		env := b.envelope(true)
		env.Config = json.RawMessage(`{"region":"eu-west-1"}`)
		env.Bundle = []byte("bundle-bytes")
		env.Status = json.RawMessage(`{"partial":true}`)
		env.Observed = []webhooksdk.Resource{{Kind: "subnet", KindVersion: 1, Name: "s1", Spec: json.RawMessage(`{}`)}}
		env.Attempt, env.ClaimEpoch = 2, 7

		resp := b.post(t, "", env)
		if resp.status != http.StatusOK {
			t.Fatalf("status = %d, want 200", resp.status)
		}
		if ct := resp.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		want := webhooksdk.Result{TaskID: "task-1", ClaimEpoch: 7, Outcome: &webhooksdk.Outcome{
			Status:     json.RawMessage(`{"vpc_id":"vpc-1"}`),
			Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "True"}},
		}}
		if diff := cmp.Diff(want, decodeResult(t, resp.body)); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
		wantReq := webhooksdk.Request{
			TaskID: "task-1", ClaimEpoch: 7, Attempt: 2,
			Reaction: "work", KindVersion: 1, Trigger: webhooksdk.TriggerSpecChange, TaskType: webhooksdk.TaskReconcile,
			Resource:   *env.Resource,
			Status:     env.Status,
			Observed:   env.Observed,
			Generation: 1,
			Deadline:   env.Deadline,
			Config:     env.Config,
			Bundle:     env.Bundle,
		}
		if diff := cmp.Diff(wantReq, got); diff != "" {
			t.Errorf("Work's request (-want +got):\n%s", diff)
		}
		if n := len(b.cb.Outcomes()); n != 0 {
			t.Errorf("an inline result was also posted to the callback %d times", n)
		}
	})

	t.Run("empty outcome is 200 not 204", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		resp := b.post(t, "", b.envelope(false))
		if resp.status != http.StatusOK {
			t.Fatalf("status = %d, want 200", resp.status)
		}
		if want := `{"task_id":"task-1","claim_epoch":1,"outcome":{}}`; string(resp.body) != want {
			t.Fatalf("body = %s, want %s", resp.body, want)
		}
	})

	errorCases := []struct {
		name string
		err  error
		want webhooksdk.Error
	}{
		{"transient", errors.New("throttled"), webhooksdk.Error{Message: "throttled"}},
		{"terminal", webhooksdk.Terminal(errors.New("bad spec")), webhooksdk.Error{Message: "bad spec", Terminal: true}},
		{"wrapped terminal", fmt.Errorf("decode: %w", webhooksdk.Terminal(errors.New("bad spec"))), webhooksdk.Error{Message: "decode: bad spec", Terminal: true}},
	}
	for _, tc := range errorCases {
		t.Run("error "+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
				return webhooksdk.Outcome{Status: json.RawMessage(`{"ignored":true}`)}, tc.err
			})
			resp := b.post(t, "", b.envelope(false))
			if resp.status != http.StatusOK {
				t.Fatalf("status = %d, want 200 (an error result is still a 200)", resp.status)
			}
			want := webhooksdk.Result{TaskID: "task-1", ClaimEpoch: 1, Error: &tc.want}
			if diff := cmp.Diff(want, decodeResult(t, resp.body)); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if !strings.Contains(string(resp.body), `"terminal":`) {
				t.Errorf("terminal is omitted from %s", resp.body)
			}
		})
	}

	t.Run("panic is a transient error", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		b := setup(t, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			if calls.Add(1) == 1 {
				panic("boom")
			}
			return webhooksdk.Outcome{}, nil
		})
		resp := b.post(t, "", b.envelope(false))
		r := decodeResult(t, resp.body)
		if resp.status != http.StatusOK || r.Error == nil || r.Error.Terminal || !strings.Contains(r.Error.Message, "panicked: boom") || r.Outcome != nil {
			t.Fatalf("got %d %s, want 200 with a transient panic error", resp.status, resp.body)
		}
		// The endpoint still serves after a panic.
		if resp := b.post(t, "", b.envelope(false)); resp.status != http.StatusOK {
			t.Fatalf("after panic: status %d", resp.status)
		}
	})

	t.Run("invalid outcome is a transient error", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{Children: []webhooksdk.Child{{Kind: "subnet", Name: "s1"}}}, nil
		})
		r := decodeResult(t, b.post(t, "", b.envelope(false)).body)
		if r.Error == nil || r.Error.Terminal || !strings.Contains(r.Error.Message, "kind_version 0") {
			t.Fatalf("result = %+v, want a transient error naming kind_version", r)
		}
	})

	t.Run("deadline cancels work", func(t *testing.T) {
		t.Parallel()
		workErr := make(chan error, 1)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			<-ctx.Done()
			workErr <- ctx.Err()
			return webhooksdk.Outcome{}, ctx.Err()
		}, webhooksdk.WithSyncBudget(waitTimeout))
		env := b.envelope(false)
		env.Deadline = time.Now().Add(200 * time.Millisecond)
		resp := b.post(t, "", env)
		if err := <-workErr; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Work's ctx.Err() = %v, want DeadlineExceeded", err)
		}
		r := decodeResult(t, resp.body)
		if r.Error == nil || r.Error.Terminal || r.Error.Message != context.DeadlineExceeded.Error() {
			t.Fatalf("result = %s, want a transient deadline error", resp.body)
		}
	})
}

func TestHandlerRejects(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, webhooksdk.WithMaxBody(4096))
	valid := func() []byte {
		body, err := json.Marshal(b.envelope(false))
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	signed := func(t *testing.T, body []byte) *http.Request {
		return sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, "", time.Time{}, body)
	}
	envWith := func(mut func(*webhooksdk.Envelope)) []byte {
		env := b.envelope(false)
		mut(&env)
		body, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	big := append([]byte(`{"type":"task","pad":"`), bytes.Repeat([]byte("x"), 8192)...)
	big = append(big, `"}`...)

	tests := []struct {
		name       string
		reason     string
		req        func(t *testing.T) *http.Request
		wantStatus int
		wantDetail string
	}{
		{
			name: "GET", reason: "POST only", wantStatus: http.StatusMethodNotAllowed,
			req: func(t *testing.T) *http.Request {
				r, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL, nil)
				return r
			},
		},
		{
			name: "wrong content type", wantStatus: http.StatusUnsupportedMediaType,
			req: func(t *testing.T) *http.Request {
				r := signed(t, valid())
				r.Header.Set("Content-Type", "text/plain")
				return r
			},
		},
		{
			name: "wrong secret", reason: "signature by another key", wantStatus: http.StatusUnauthorized, wantDetail: "no matching",
			req: func(t *testing.T) *http.Request {
				return sdktest.NewSignedRequest(t, b.srv.URL, otherSecret, "", time.Time{}, valid())
			},
		},
		{
			name: "tampered body", wantStatus: http.StatusUnauthorized, wantDetail: "no matching",
			req: func(t *testing.T) *http.Request {
				r := signed(t, valid())
				tampered := envWith(func(e *webhooksdk.Envelope) { e.ClaimEpoch = 99 })
				r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(tampered)), int64(len(tampered))
				return r
			},
		},
		{
			name: "missing headers", wantStatus: http.StatusUnauthorized, wantDetail: "missing",
			req: func(t *testing.T) *http.Request {
				r := signed(t, valid())
				r.Header.Del(webhooksdk.HeaderSignature)
				return r
			},
		},
		{
			name: "expired timestamp", reason: "replayed 10 minutes later", wantStatus: http.StatusUnauthorized, wantDetail: "tolerance",
			req: func(t *testing.T) *http.Request {
				return sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, "", time.Now().Add(-10*time.Minute), valid())
			},
		},
		{
			name: "future timestamp", wantStatus: http.StatusUnauthorized, wantDetail: "tolerance",
			req: func(t *testing.T) *http.Request {
				return sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, "", time.Now().Add(10*time.Minute), valid())
			},
		},
		{
			name: "oversized with length", wantStatus: http.StatusRequestEntityTooLarge,
			req: func(t *testing.T) *http.Request { return signed(t, big) },
		},
		{
			name: "oversized chunked", reason: "no Content-Length: the read is capped", wantStatus: http.StatusRequestEntityTooLarge,
			req: func(t *testing.T) *http.Request {
				r := signed(t, big)
				r.ContentLength = -1
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(big)))
				return r
			},
		},
		{
			name: "malformed JSON", wantStatus: http.StatusBadRequest, wantDetail: "malformed",
			req: func(t *testing.T) *http.Request { return signed(t, []byte(`{"type":"task",`)) },
		},
		{
			name: "empty body", wantStatus: http.StatusBadRequest,
			req: func(t *testing.T) *http.Request { return signed(t, nil) },
		},
		{
			name: "unknown type", wantStatus: http.StatusBadRequest, wantDetail: "unknown type",
			req: func(t *testing.T) *http.Request { return signed(t, []byte(`{"type":"bogus"}`)) },
		},
		{
			name: "missing task_id", wantStatus: http.StatusBadRequest, wantDetail: "task_id",
			req: func(t *testing.T) *http.Request {
				return signed(t, envWith(func(e *webhooksdk.Envelope) { e.TaskID = "" }))
			},
		},
		{
			name: "kind_version 0", reason: "no implicit v1", wantStatus: http.StatusBadRequest, wantDetail: "kind_version",
			req: func(t *testing.T) *http.Request {
				return signed(t, envWith(func(e *webhooksdk.Envelope) { e.KindVersion = 0 }))
			},
		},
		{
			name: "unknown kind", reason: "no provider here", wantStatus: http.StatusNotFound, wantDetail: "vpc/v2",
			req: func(t *testing.T) *http.Request {
				return signed(t, envWith(func(e *webhooksdk.Envelope) { e.KindVersion = 2 }))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := b.do(t, tt.req(t))
			if resp.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d (%s)", resp.status, tt.wantStatus, tt.reason)
			}
			if ct := resp.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type = %q, want application/problem+json", ct)
			}
			var p struct {
				Title  string `json:"title"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(resp.body, &p); err != nil {
				t.Fatalf("problem body: %v", err)
			}
			if p.Status != tt.wantStatus || p.Title == "" || !strings.Contains(p.Detail, tt.wantDetail) {
				t.Fatalf("problem = %+v, want status %d and detail containing %q", p, tt.wantStatus, tt.wantDetail)
			}
			if strings.Contains(string(resp.body), "MfKQ9r8G") {
				t.Fatal("problem leaks the secret")
			}
		})
	}
	if n := b.prov.calls.Load(); n != 0 {
		t.Errorf("Work ran %d times on rejected requests", n)
	}
}

func TestHandlerClock(t *testing.T) {
	t.Parallel()
	// The specification's vector, checked at its own timestamp: the signature passes and
	// the body (not an envelope) is refused as malformed.
	vectorReq := func(t *testing.T, url string) *http.Request {
		return sdktest.NewSignedRequest(t, url, vectorSecret, vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	}
	b := setup(t, nil, webhooksdk.WithClock(func() time.Time { return time.Unix(vectorTimestamp+60, 0) }))
	if resp := b.do(t, vectorReq(t, b.srv.URL)); resp.status != http.StatusBadRequest {
		t.Fatalf("with the vector's clock: status %d, want 400 (signature accepted, body not an envelope)", resp.status)
	}
	live := setup(t, nil)
	if resp := live.do(t, vectorReq(t, live.srv.URL)); resp.status != http.StatusUnauthorized {
		t.Fatalf("with the real clock: status %d, want 401 (a 2021 timestamp)", resp.status)
	}
}

func TestHandlerHealth(t *testing.T) {
	t.Parallel()
	ready := newFake(kvVPC, nil)
	unready := newFake(webhooksdk.KindVersion{Kind: "vpc", Version: 2}, nil)
	unready.ready.Store(false)
	route := newFake(webhooksdk.KindVersion{Kind: "route", Version: 1}, nil)
	b := setupProviders(t, []*fakeProvider{ready, unready, route})

	resp := b.do(t, sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, "", time.Time{}, []byte(`{"type":"health"}`)))
	if resp.status != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.status)
	}
	var got webhooksdk.HealthResponse
	if err := json.Unmarshal(resp.body, &got); err != nil {
		t.Fatal(err)
	}
	want := webhooksdk.HealthResponse{Kinds: []webhooksdk.KindReadiness{
		{Kind: "vpc", KindVersion: 1, Ready: true},
		{Kind: "vpc", KindVersion: 2, Ready: false},
		{Kind: "route", KindVersion: 1, Ready: true},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}

	// A health probe is signed like a task.
	unsigned := sdktest.NewSignedRequest(t, b.srv.URL, otherSecret, "", time.Time{}, []byte(`{"type":"health"}`))
	if resp := b.do(t, unsigned); resp.status != http.StatusUnauthorized {
		t.Fatalf("probe signed with another secret: status %d, want 401", resp.status)
	}
}

func TestHandlerUnready(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.prov.ready.Store(false)
	resp := b.post(t, "", b.envelope(true))
	if resp.status != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", resp.status)
	}
	if ra := resp.header.Get("Retry-After"); ra != strconv.Itoa(webhooksdk.RetryAfterUnready) {
		t.Errorf("Retry-After = %q", ra)
	}
	if n := b.prov.calls.Load(); n != 0 {
		t.Fatalf("Work ran %d times while unready", n)
	}
	b.prov.ready.Store(true)
	if resp := b.post(t, "", b.envelope(true)); resp.status != http.StatusOK {
		t.Fatalf("once ready: status %d, want 200", resp.status)
	}
}

func TestHandlerAsync(t *testing.T) {
	t.Parallel()

	t.Run("202 then callback with heartbeats", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			if err := g.wait(ctx); err != nil {
				return webhooksdk.Outcome{}, err
			}
			return webhooksdk.Outcome{Status: json.RawMessage(`{"done":true}`)}, nil
		}, webhooksdk.WithSyncBudget(20*time.Millisecond), webhooksdk.WithHeartbeatEvery(10*time.Millisecond))

		resp := b.post(t, "", b.envelope(true))
		if resp.status != http.StatusAccepted {
			t.Fatalf("status = %d, want 202", resp.status)
		}
		for _, hb := range b.cb.WaitHeartbeats(t, 2, waitTimeout) {
			if hb.Authorization != "Bearer "+b.cb.Token || hb.TaskID != "task-1" || hb.Status != http.StatusOK {
				t.Fatalf("heartbeat %+v: want bearer token, task-1, 200", hb)
			}
			if string(hb.Body) != `{"task_id":"task-1","claim_epoch":1}` {
				t.Fatalf("heartbeat body = %s", hb.Body)
			}
		}
		if n := len(b.cb.Outcomes()); n != 0 {
			t.Fatalf("%d outcomes posted before Work finished", n)
		}
		g.Open()
		posts := b.cb.WaitOutcomes(t, 1, waitTimeout)
		if posts[0].Authorization != "Bearer "+b.cb.Token {
			t.Errorf("Authorization = %q", posts[0].Authorization)
		}
		want := webhooksdk.Result{TaskID: "task-1", ClaimEpoch: 1, Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{"done":true}`)}}
		if diff := cmp.Diff(want, posts[0].Result(t)); diff != "" {
			t.Errorf("callback result (-want +got):\n%s", diff)
		}
		shutdown(t, b)
		if n := len(b.cb.Outcomes()); n != 1 {
			t.Errorf("outcome posted %d times, want 1", n)
		}
	})

	t.Run("callback retried on 5xx and 429", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{}, g.wait(ctx)
		}, webhooksdk.WithSyncBudget(0))
		b.cb.RespondOutcome(http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests)
		if resp := b.post(t, "", b.envelope(true)); resp.status != http.StatusAccepted {
			t.Fatalf("status = %d, want 202", resp.status)
		}
		g.Open()
		b.cb.WaitOutcomes(t, 4, waitTimeout)
		shutdown(t, b) // waits for the delivery goroutine to finish
		var statuses []int
		for _, p := range b.cb.Outcomes() {
			statuses = append(statuses, p.Status)
		}
		if diff := cmp.Diff([]int{500, 503, 429, 200}, statuses); diff != "" {
			t.Errorf("callback attempts (-want +got):\n%s", diff)
		}
	})

	for _, status := range []int{http.StatusConflict, http.StatusUnauthorized, http.StatusBadRequest, http.StatusRequestEntityTooLarge} {
		t.Run("callback "+strconv.Itoa(status)+" is final", func(t *testing.T) {
			t.Parallel()
			g := newGate(t)
			b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
				return webhooksdk.Outcome{}, g.wait(ctx)
			}, webhooksdk.WithSyncBudget(0))
			b.cb.RespondOutcome(status)
			env := b.envelope(true)
			if resp := b.post(t, "", env); resp.status != http.StatusAccepted {
				t.Fatalf("status = %d, want 202", resp.status)
			}
			g.Open()
			b.cb.WaitOutcomes(t, 1, waitTimeout)
			shutdown(t, b)
			if n := len(b.cb.Outcomes()); n != 1 {
				t.Fatalf("callback posted %d times after a %d, want 1", n, status)
			}
		})
	}

	t.Run("heartbeat 409 cancels work", func(t *testing.T) {
		t.Parallel()
		cause := make(chan error, 1)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return webhooksdk.Outcome{}, ctx.Err()
		}, webhooksdk.WithSyncBudget(0), webhooksdk.WithHeartbeatEvery(10*time.Millisecond))
		b.cb.RespondHeartbeat(http.StatusConflict)
		if resp := b.post(t, "", b.envelope(true)); resp.status != http.StatusAccepted {
			t.Fatalf("status = %d, want 202", resp.status)
		}
		select {
		case err := <-cause:
			if !errors.Is(err, webhooksdk.ErrSuperseded) {
				t.Fatalf("cause = %v, want ErrSuperseded", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("Work was not cancelled")
		}
		shutdown(t, b)
		if n := len(b.cb.Outcomes()); n != 0 {
			t.Fatalf("a superseded result was posted %d times", n)
		}
	})
}

func TestHandlerDuplicateDelivery(t *testing.T) {
	t.Parallel()

	t.Run("while running then after finish", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			if err := g.wait(ctx); err != nil {
				return webhooksdk.Outcome{}, err
			}
			return webhooksdk.Outcome{Status: json.RawMessage(`{"n":1}`)}, nil
		}, webhooksdk.WithSyncBudget(0))
		env := b.envelope(true)
		id := sdktest.NewMessageID()
		if resp := b.post(t, id, env); resp.status != http.StatusAccepted {
			t.Fatalf("first: status %d, want 202", resp.status)
		}
		g.waitEntered(t)
		if resp := b.post(t, id, env); resp.status != http.StatusAccepted {
			t.Fatalf("duplicate while running: status %d, want 202", resp.status)
		}
		g.Open()
		posts := b.cb.WaitOutcomes(t, 1, waitTimeout)
		resp := b.post(t, id, env)
		if resp.status != http.StatusOK || !bytes.Equal(resp.body, posts[0].Body) {
			t.Fatalf("duplicate after finish: %d %s, want 200 with the callback's body %s", resp.status, resp.body, posts[0].Body)
		}
		if n := b.prov.calls.Load(); n != 1 {
			t.Fatalf("Work ran %d times, want 1", n)
		}
		// A new claim has a new webhook-id and runs again.
		env.ClaimEpoch = 2
		switch resp := b.post(t, "", env); resp.status {
		case http.StatusOK:
		case http.StatusAccepted: // Work runs on after the 202: wait for its callback
			b.cb.WaitOutcomes(t, 2, waitTimeout)
		default:
			t.Fatalf("new claim: status %d", resp.status)
		}
		if n := b.prov.calls.Load(); n != 2 {
			t.Fatalf("Work ran %d times after a new claim, want 2", n)
		}
	})

	t.Run("after inline finish", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		b := setup(t, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{Status: json.RawMessage(fmt.Sprintf(`{"run":%d}`, n.Add(1)))}, nil
		})
		id := sdktest.NewMessageID()
		first := b.post(t, id, b.envelope(true))
		second := b.post(t, id, b.envelope(true))
		if first.status != http.StatusOK || second.status != http.StatusOK || !bytes.Equal(first.body, second.body) {
			t.Fatalf("first %d %s, second %d %s: want the same 200 body", first.status, first.body, second.status, second.body)
		}
		if c := b.prov.calls.Load(); c != 1 {
			t.Fatalf("Work ran %d times, want 1", c)
		}
	})

	t.Run("while the first waits inline", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{}, g.wait(ctx)
		}, webhooksdk.WithSyncBudget(waitTimeout), webhooksdk.WithHeartbeatEvery(10*time.Millisecond))
		env := b.envelope(true)
		id := sdktest.NewMessageID()
		first := make(chan response, 1)
		go func() { first <- b.post(t, id, env) }()
		g.waitEntered(t)
		time.Sleep(50 * time.Millisecond) // five heartbeat intervals
		if n := len(b.cb.Heartbeats()); n != 0 {
			t.Fatalf("%d heartbeats while the run was only waited for inline, want 0", n)
		}
		if resp := b.post(t, id, env); resp.status != http.StatusAccepted {
			t.Fatalf("duplicate: status %d, want 202", resp.status)
		}
		// The duplicate's 202 promised the run to the callback: it beats from now on.
		b.cb.WaitHeartbeats(t, 1, waitTimeout)
		g.Open()
		if resp := <-first; resp.status != http.StatusOK {
			t.Fatalf("first: status %d, want 200", resp.status)
		}
		// The 202 promised a callback, so the result goes there too.
		b.cb.WaitOutcomes(t, 1, waitTimeout)
		if c := b.prov.calls.Load(); c != 1 {
			t.Fatalf("Work ran %d times, want 1", c)
		}
	})
}

func TestHandlerOnConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	send := func(config string, bundle string) {
		t.Helper()
		env := b.envelope(false)
		if config != "" {
			env.Config = json.RawMessage(config)
		}
		if bundle != "" {
			env.Bundle = []byte(bundle)
		}
		if resp := b.post(t, "", env); resp.status != http.StatusOK {
			t.Fatalf("status %d", resp.status)
		}
	}
	send(`{"a":1}`, "")           // first task: fires
	send(`{"a":1}`, "")           // unchanged
	send(`{"a":2}`, "")           // spec changed: fires
	send(`{"a":2}`, "")           // unchanged
	send(`{"a":2}`, "bundle1")    // bundle changed: fires
	send(`{"a":2}`, "bundle1")    // unchanged
	send(`{ "a": 2 }`, "bundle1") // other bytes, equal JSON: unchanged
	send(`{"a":2}`, "bundle1")    // and back: unchanged
	want := []string{
		"config:{\"a\":1}|", "work", "work",
		"config:{\"a\":2}|", "work", "work",
		"config:{\"a\":2}|bundle1", "work", "work", "work", "work",
	}
	if diff := cmp.Diff(want, b.prov.Events()); diff != "" {
		t.Errorf("OnConfig/Work sequence (-want +got):\n%s", diff)
	}
}

func TestHandlerShutdown(t *testing.T) {
	t.Parallel()

	t.Run("drains in-flight work then refuses", func(t *testing.T) {
		t.Parallel()
		g := newGate(t)
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			return webhooksdk.Outcome{}, g.wait(ctx)
		}, webhooksdk.WithSyncBudget(0))
		if resp := b.post(t, "", b.envelope(true)); resp.status != http.StatusAccepted {
			t.Fatalf("status = %d, want 202", resp.status)
		}
		g.waitEntered(t)
		done := make(chan error, 1)
		go func() { done <- b.ep.Shutdown(context.WithoutCancel(t.Context())) }()

		// Poll until the endpoint reports itself unready (Shutdown runs concurrently).
		deadline := time.Now().Add(waitTimeout)
		for {
			resp := b.do(t, sdktest.NewSignedRequest(t, b.srv.URL, vectorSecret, "", time.Time{}, []byte(`{"type":"health"}`)))
			var h webhooksdk.HealthResponse
			if err := json.Unmarshal(resp.body, &h); err != nil {
				t.Fatal(err)
			}
			if !h.Kinds[0].Ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("health still ready after Shutdown began")
			}
		}
		env := b.envelope(true)
		env.TaskID = "task-2"
		if resp := b.post(t, "", env); resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") == "" {
			t.Fatalf("new task while shutting down: %d, want 503 with Retry-After", resp.status)
		}
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned %v while work was in flight", err)
		default:
		}
		g.Open()
		if err := <-done; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if n := len(b.cb.Outcomes()); n != 1 {
			t.Fatalf("outcome posted %d times by the time Shutdown returned, want 1", n)
		}
	})

	t.Run("expired context cancels work", func(t *testing.T) {
		t.Parallel()
		cause := make(chan error, 1)
		entered := make(chan struct{})
		b := setup(t, func(ctx context.Context, _ webhooksdk.Request) (webhooksdk.Outcome, error) {
			close(entered)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return webhooksdk.Outcome{}, ctx.Err()
		}, webhooksdk.WithSyncBudget(0))
		if resp := b.post(t, "", b.envelope(true)); resp.status != http.StatusAccepted {
			t.Fatalf("status = %d, want 202", resp.status)
		}
		<-entered
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := b.ep.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown = %v, want context.Canceled", err)
		}
		if err := <-cause; !errors.Is(err, webhooksdk.ErrShutdown) {
			t.Fatalf("Work's cause = %v, want ErrShutdown", err)
		}
	})
}

func TestHandlerConstruction(t *testing.T) {
	t.Parallel()
	ok := newFake(kvVPC, nil)
	tests := []struct {
		name      string
		providers []webhooksdk.Provider
		opts      []webhooksdk.Option
		wantErr   string
	}{
		{name: "no secrets", providers: []webhooksdk.Provider{ok}, wantErr: "WithSecrets"},
		{name: "bad secret", providers: []webhooksdk.Provider{ok}, opts: []webhooksdk.Option{webhooksdk.WithSecrets("nope")}, wantErr: "prefix"},
		{name: "no providers", opts: []webhooksdk.Option{webhooksdk.WithSecrets(vectorSecret)}, wantErr: "no providers"},
		{name: "nil provider", providers: []webhooksdk.Provider{nil}, opts: []webhooksdk.Option{webhooksdk.WithSecrets(vectorSecret)}, wantErr: "nil"},
		{
			name: "duplicate kind", providers: []webhooksdk.Provider{ok, newFake(kvVPC, nil)},
			opts: []webhooksdk.Option{webhooksdk.WithSecrets(vectorSecret)}, wantErr: "two providers for vpc/v1",
		},
		{
			name: "version 0", providers: []webhooksdk.Provider{newFake(webhooksdk.KindVersion{Kind: "vpc"}, nil)},
			opts: []webhooksdk.Option{webhooksdk.WithSecrets(vectorSecret)}, wantErr: "version 0",
		},
		{
			name: "version 32768", providers: []webhooksdk.Provider{newFake(webhooksdk.KindVersion{Kind: "vpc", Version: 32768}, nil)},
			opts: []webhooksdk.Option{webhooksdk.WithSecrets(vectorSecret)}, wantErr: "32768",
		},
		{
			name: "bad option", providers: []webhooksdk.Provider{ok},
			opts: []webhooksdk.Option{webhooksdk.WithSecrets(vectorSecret), webhooksdk.WithMaxBody(0)}, wantErr: "max body",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhooksdk.Handler(tt.providers, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Handler error = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
	// Two versions of one kind are two providers.
	ep, err := webhooksdk.Handler([]webhooksdk.Provider{ok, newFake(webhooksdk.KindVersion{Kind: "vpc", Version: 2}, nil)}, webhooksdk.WithSecrets(vectorSecret, otherSecret))
	if err != nil {
		t.Fatalf("vpc/v1 + vpc/v2: %v", err)
	}
	if err := ep.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestHeartbeatURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"https://d.example/v1/tasks/t1/outcome", "https://d.example/v1/tasks/t1/heartbeat"},
		{"https://d.example/v1/tasks/t1/outcome/", "https://d.example/v1/tasks/t1/heartbeat"},
		{"https://d.example/base/v1/tasks/t1/outcome?x=1", "https://d.example/base/v1/tasks/t1/heartbeat?x=1"},
		{"https://d.example/cb", "https://d.example/cb/heartbeat"},
	}
	for _, tt := range tests {
		got, err := webhooksdk.HeartbeatURL(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("HeartbeatURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// shutdown drains the endpoint so every callback attempt has happened.
func shutdown(t *testing.T, b *testBundle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := b.ep.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestTaskLogAttrs: a task's log lines lead with the task's attributes, then
// the line's own, as Logger.With would order them.
func TestTaskLogAttrs(t *testing.T) {
	t.Parallel()
	var log logbuf.Buffer
	b := setup(t, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
		return webhooksdk.Outcome{}, errors.New("boom")
	}, webhooksdk.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))))
	if resp := b.post(t, "msg_attrs", b.envelope(false)); resp.status != http.StatusOK {
		t.Fatalf("status %d", resp.status)
	}
	want := `level=INFO msg="task failed" task_id=task-1 claim_epoch=1 kind=vpc kind_version=1 webhook_id=msg_attrs err=boom terminal=false` + "\n"
	if !strings.Contains(log.String(), want) {
		t.Errorf("log:\n%s\nwant a line:\n%s", log.String(), want)
	}
}
