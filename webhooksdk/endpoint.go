package webhooksdk

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergeplane/converge/webhooksdk/internal/capture"
)

// Causes of a Work context's cancellation, read with context.Cause.
var (
	// ErrSuperseded: a heartbeat was answered 409 — another claim owns the task now, so
	// this run's result would be discarded.
	ErrSuperseded = errors.New("task superseded by a newer claim")
	// ErrShutdown: Shutdown's context ended before in-flight work finished.
	ErrShutdown = errors.New("endpoint shut down")
)

// Endpoint is the provider endpoint the dispatcher pushes to: an http.Handler that
// serves task deliveries and health probes for a set of providers. Mount it wherever the
// registered endpoint's target and health URLs point (one path may serve both). Create it
// with [Handler]; stop it with [Endpoint.Shutdown] after http.Server.Shutdown.
type Endpoint struct {
	cfg    config
	client *http.Client
	log    *slog.Logger
	slots  []*providerSlot
	byKind map[KindVersion]*providerSlot

	baseCtx    context.Context
	cancelBase context.CancelCauseFunc
	wg         sync.WaitGroup // execute, heartbeat and callback goroutines

	mu       sync.Mutex
	closing  bool
	inflight map[string]*run // by deliveryKey
	results  *resultCache    // by deliveryKey

	batcher *callbackBatcher // nil: every Result to its own callback URL
}

// providerSlot is one registered provider, its optional hooks and the fingerprint of
// the last config its OnConfig saw.
type providerSlot struct {
	kv         KindVersion
	p          Provider
	configurer Configurer // nil: config changes are ignored
	readier    Readier    // nil: always ready

	mu     sync.Mutex // serialises OnConfig
	seen   bool
	cfgSum [sha256.Size]byte
	// The last config's bytes as delivered: almost every delivery repeats
	// them, and comparing bytes skips the compaction and hash, which done
	// per task were a visible share of a busy provider's CPU.
	lastSpec, lastBundle []byte
}

// run is one execution of Work for one delivery (webhook-id).
type run struct {
	id        string // deliveryKey
	webhookID string
	// traceparent is the delivery's W3C trace context (protocol §17), sent on
	// the callbacks, heartbeats and payload fetch of this run; "" if none.
	traceparent string
	env         *Envelope
	slot        *providerSlot
	ctx         context.Context // Work's, cancelled by cancel
	cancel      context.CancelCauseFunc

	done chan struct{}  // closed once body is set
	body []byte         // the Result JSON; read only after done is closed
	live sync.WaitGroup // execute and heartbeat, for hosts that must outwait them

	// Guarded by Endpoint.mu.
	async    bool
	finished bool
}

// Handler returns the Endpoint serving providers. Every provider needs a distinct, valid
// Kind() (kind non-empty, version 1..32767), and WithSecrets is required; the serving
// options are refused, since the server is the caller's ([Serve] runs one).
//
// Requests: POST only (405); body capped (413); Standard Webhooks signature checked
// (401); envelope decoded (400). A health probe gets 200 with every provider's readiness
// (its Ready if it is a [Readier], else ready). A task goes to the provider of its (kind,
// kind_version) (404 if none; 503 with Retry-After if it is not ready or the endpoint is
// shutting down) and Work runs under the task deadline, after OnConfig if the provider
// is a [Configurer] and the task's config is new to it. If Work finishes within the sync budget the answer is 200 with the
// Result (an error result too); otherwise 202, and the Result is POSTed to the
// envelope's callback URL later, with heartbeats meanwhile. A repeated webhook-id is
// never run twice: while it runs it gets 202, once finished it gets the same body again.
// A batched delivery (docs/protocol.md §16) is verified once and each of its tasks served
// as above, its answer collected into one [BatchResponse].
func Handler(providers []Provider, opts ...Option) (*Endpoint, error) {
	cfg, err := newConfig(opts)
	if err == nil && len(cfg.serveOnly) > 0 {
		err = fmt.Errorf("%s: serving options, for Serve and ListenAndServe only", strings.Join(cfg.serveOnly, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("webhooksdk handler: %w", err)
	}
	e, err := newEndpoint(cfg, providers)
	if err != nil {
		return nil, fmt.Errorf("webhooksdk handler: %w", err)
	}
	return e, nil
}

// newEndpoint returns the Endpoint serving providers under cfg.
func newEndpoint(cfg config, providers []Provider) (*Endpoint, error) {
	if len(cfg.secrets) == 0 {
		return nil, errors.New("no signing secrets; use WithSecrets")
	}
	if len(providers) == 0 {
		return nil, errors.New("no providers")
	}
	e := &Endpoint{
		cfg:      cfg,
		client:   cfg.client,
		log:      cmp.Or(cfg.logger, slog.Default()),
		byKind:   make(map[KindVersion]*providerSlot, len(providers)),
		inflight: make(map[string]*run),
		results:  newResultCache(cfg.cacheEntries, cfg.cacheBytes, cfg.cacheTTL),
	}
	if cfg.cbBatchMax > 1 {
		e.batcher = &callbackBatcher{e: e, window: cfg.cbBatchWindow, max: cfg.cbBatchMax, open: make(map[string]*callbackBatch)}
	}
	if e.client == nil {
		// Callbacks all go to the same few dispatch hosts; keep enough idle
		// connections per host that a burst of async results reuses them
		// (the stdlib default of 2 re-dials under load).
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		e.client = &http.Client{
			Timeout:       CallbackTimeoutDefault,
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	for i, p := range providers {
		if p == nil {
			return nil, fmt.Errorf("provider %d is nil", i)
		}
		if f, ok := p.(workFunc); ok && f.work == nil {
			return nil, fmt.Errorf("provider %d: WorkFunc with a nil func", i)
		}
		kv := p.Kind()
		if err := kv.validate(); err != nil {
			return nil, fmt.Errorf("provider %d: %w", i, err)
		}
		if _, dup := e.byKind[kv]; dup {
			return nil, fmt.Errorf("two providers for %s", kv)
		}
		s := &providerSlot{kv: kv, p: p}
		s.configurer, _ = p.(Configurer)
		s.readier, _ = p.(Readier)
		e.slots = append(e.slots, s)
		e.byKind[kv] = s
	}
	e.baseCtx, e.cancelBase = context.WithCancelCause(context.Background())
	return e, nil
}

// Shutdown stops accepting tasks (new ones get 503, health reports every kind unready)
// and waits for in-flight work, heartbeats and callbacks to finish. If ctx ends first it
// cancels every Work context and pending callback (cause ErrShutdown) and returns
// ctx.Err() without waiting further; results not yet delivered are then lost, and the
// dispatcher re-dispatches those tasks when their leases expire. Call it after
// http.Server.Shutdown, which drains the inline requests. Safe to call more than once.
func (e *Endpoint) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()

	idle := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		e.cancelBase(ErrShutdown)
		return nil
	case <-ctx.Done():
		e.cancelBase(ErrShutdown)
		return fmt.Errorf("webhooksdk shutdown: %w", ctx.Err())
	}
}

// Invocation says how the caller of [Endpoint.ServeInvocation] waits for its answer.
type Invocation int

// The invocations a host that freezes after answering can serve.
const (
	// InvocationSync: the caller waits for the answer however long Work takes (an AWS
	// Lambda RequestResponse invoke or Function URL request), so a task is answered
	// inline, never 202 for work left to finish in the background.
	InvocationSync Invocation = iota + 1
	// InvocationEvent: nobody reads the answer (an AWS Lambda Event invoke). The Result
	// goes to the envelope's callback, with heartbeats while Work runs, before
	// ServeInvocation returns; the answer is then 202. A task without a callback is
	// refused (400): its result would have nowhere to go.
	InvocationEvent
)

// mode is how a delivery is served: over HTTP by ServeHTTP, or by ServeInvocation.
type mode int

const (
	modeHTTP mode = iota
	modeSync
	modeEvent
)

// ServeHTTP serves one delivery from the dispatcher.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.serve(w, r, modeHTTP)
}

// ServeInvocation serves one delivery like ServeHTTP, for a host that freezes the
// process once the answer is returned (a function platform such as AWS Lambda), where
// work left running would stall until the next invocation. Verification, deduplication,
// readiness and the Result are ServeHTTP's; what differs is that the sync budget never
// applies. Under InvocationSync the answer waits for Work (until r's context ends);
// under InvocationEvent it waits until the Result was delivered to the callback, and a
// finished result answering a repeated webhook-id is POSTed to the callback again,
// since nobody reads the answer.
func (e *Endpoint) ServeInvocation(w http.ResponseWriter, r *http.Request, inv Invocation) {
	switch inv {
	case InvocationSync:
		e.serve(w, r, modeSync)
	case InvocationEvent:
		e.serve(w, r, modeEvent)
	default:
		writeProblem(w, http.StatusInternalServerError, fmt.Sprintf("unknown invocation %d", inv))
	}
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request, m mode) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "only POST is served")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeProblem(w, http.StatusUnsupportedMediaType, "content type must be application/json")
			return
		}
	}
	if r.ContentLength > e.cfg.maxBody {
		writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds %d bytes", e.cfg.maxBody))
		return
	}
	// Sized from Content-Length, already within the cap: io.ReadAll grows from
	// 512 bytes and copied a batch's body several times over.
	var buf bytes.Buffer
	buf.Grow(int(max(r.ContentLength, 0)) + bytes.MinRead)
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, e.cfg.maxBody)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds %d bytes", e.cfg.maxBody))
			return
		}
		writeProblem(w, http.StatusBadRequest, "cannot read body")
		return
	}
	body := buf.Bytes()
	if err := Verify(e.cfg.secrets, r.Header, body, e.cfg.now(), e.cfg.tolerance); err != nil {
		writeProblem(w, http.StatusUnauthorized, "signature verification failed: "+err.Error())
		return
	}
	// One decode serves every type: a batch's tasks land in Tasks.
	var env struct {
		Envelope
		Tasks []Envelope `json:"tasks"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		writeProblem(w, http.StatusBadRequest, "malformed envelope: "+err.Error())
		return
	}
	until := time.Now().Add(e.cfg.syncBudget)
	switch env.Type {
	case EnvelopeHealth:
		e.serveHealth(w)
	case EnvelopeTask:
		e.serveTask(w, r, &env.Envelope, m, until)
	case EnvelopeBatch:
		e.serveBatch(w, r, env.Tasks, m, until)
	default:
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("malformed envelope: unknown type %q", env.Type))
	}
}

func (e *Endpoint) serveHealth(w http.ResponseWriter) {
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	resp := HealthResponse{Kinds: make([]KindReadiness, 0, len(e.slots))}
	for _, s := range e.slots {
		resp.Kinds = append(resp.Kinds, KindReadiness{
			Kind:        s.kv.Kind,
			KindVersion: s.kv.Version,
			Ready:       !closing && e.ready(s),
		})
	}
	body, err := json.Marshal(resp)
	if err != nil { // cannot happen: plain strings, ints and bools
		writeProblem(w, http.StatusInternalServerError, "cannot encode health response")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
}

// serveBatch serves a batched delivery, already verified: each task exactly as serveTask
// serves it alone, at most batchConcurrency at once, sharing the request's sync budget
// (until), and answers one BatchResult per task.
func (e *Endpoint) serveBatch(w http.ResponseWriter, r *http.Request, tasks []Envelope, m mode, until time.Time) {
	if len(tasks) == 0 {
		writeProblem(w, http.StatusBadRequest, "malformed batch: no tasks")
		return
	}
	results := make([]json.RawMessage, len(tasks))
	// A few workers take the tasks in turn rather than a goroutine each: a fresh
	// goroutine grows its stack for the decoder and Work every time.
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(e.cfg.batchConcurrency, len(tasks)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(tasks); i = int(next.Add(1) - 1) {
				rec := capture.New()
				e.serveTask(rec, r, &tasks[i], m, until)
				results[i] = batchResult(rec, &tasks[i])
			}
		})
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, batchResponse(results))
}

// batchResponse is json.Marshal of a BatchResponse holding results, each already
// encoded by json.Marshal: joined as they are, not scanned and compacted again.
func batchResponse(results []json.RawMessage) []byte {
	const head, tail = `{"type":"` + EnvelopeBatch + `","results":[`, `]}`
	n := len(head) + len(tail)
	for _, r := range results {
		n += len(r) + 1
	}
	body := append(make([]byte, 0, n), head...)
	for i, r := range results {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, r...)
	}
	return append(body, tail...)
}

// batchResult turns the answer serveTask recorded for env into its BatchResult: a 200's
// Result as it is, a 202 as accepted, anything else (a problem: no provider, not ready,
// a malformed envelope) as a transient error naming the status and the problem's detail.
func batchResult(rc *capture.Recorder, env *Envelope) json.RawMessage {
	res := BatchResult{Result: Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch}}
	switch rc.Status {
	case http.StatusOK:
		return rc.Body.Bytes()
	case http.StatusAccepted:
		res.Accepted = true
	case 0:
		res.Error = &Error{Message: "no answer: the batch request ended before the task was answered"}
	default:
		var p problem
		_ = json.Unmarshal(rc.Body.Bytes(), &p) // a detail-less answer still names its status
		res.Error = &Error{Message: strings.TrimSuffix(fmt.Sprintf("%d %s: %s", rc.Status, http.StatusText(rc.Status), p.Detail), ": ")}
	}
	b, _ := json.Marshal(res) // plain strings, ints and bools: cannot fail
	return b
}

// serveTask serves one task envelope; until is when its sync budget ends.
func (e *Endpoint) serveTask(w http.ResponseWriter, r *http.Request, env *Envelope, m mode, until time.Time) {
	switch {
	case env.TaskID == "":
		writeProblem(w, http.StatusBadRequest, "malformed envelope: task_id is required")
		return
	case env.Kind == "":
		writeProblem(w, http.StatusBadRequest, "malformed envelope: kind is required")
		return
	case env.KindVersion < 1 || env.KindVersion > MaxKindVersion:
		writeProblem(w, http.StatusBadRequest, fmt.Sprintf("malformed envelope: kind_version %d outside 1..%d", env.KindVersion, MaxKindVersion))
		return
	case env.Callback != nil && env.Callback.URL == "":
		writeProblem(w, http.StatusBadRequest, "malformed envelope: callback.url is empty")
		return
	case env.Callback == nil && m == modeEvent:
		writeProblem(w, http.StatusBadRequest, "malformed envelope: an event invocation needs a callback")
		return
	case env.PayloadURL != "" && env.Callback == nil:
		writeProblem(w, http.StatusBadRequest, "malformed envelope: payload_url without a callback token to fetch it with")
		return
	}
	kv := KindVersion{Kind: env.Kind, Version: env.KindVersion}
	slot, ok := e.byKind[kv]
	if !ok {
		writeProblem(w, http.StatusNotFound, fmt.Sprintf("no provider for %s at this endpoint", kv))
		return
	}
	webhookID := r.Header.Get(canonicalID)
	id := deliveryKey(webhookID, env)
	ready := e.ready(slot)

	e.mu.Lock()
	if body, ok := e.results.get(id, time.Now()); ok {
		e.mu.Unlock()
		if m == modeEvent {
			// Nobody reads this answer: the result reaches the dispatcher only through
			// the callback (a duplicate outcome is a no-op there).
			again := &run{webhookID: webhookID, traceparent: traceParent(r.Header), env: env, slot: slot}
			e.deliver(again, body, e.taskLogger(again))
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeJSON(w, http.StatusOK, body)
		return
	}
	if rn, ok := e.inflight[id]; ok {
		if m == modeEvent && rn.env.Callback != nil {
			e.markAsyncLocked(rn)
			e.mu.Unlock()
			e.settle(w, r, rn)
			return
		}
		if rn.env.Callback != nil && m == modeHTTP {
			// The promise of a callback is what the 202 means, even if the first request
			// is still waiting inline: mark the run so its result is also delivered.
			e.markAsyncLocked(rn)
			e.mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			return
		}
		e.mu.Unlock()
		e.awaitInline(w, r, rn)
		return
	}
	if e.closing {
		e.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterUnready))
		writeProblem(w, http.StatusServiceUnavailable, "endpoint is shutting down")
		return
	}
	if !ready {
		e.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterUnready))
		writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf("provider %s is not ready", kv))
		return
	}
	rn := &run{
		id:          id,
		webhookID:   webhookID,
		traceparent: traceParent(r.Header),
		env:         env,
		slot:        slot,
		done:        make(chan struct{}),
	}
	// The context exists before the run is visible in inflight: a repeated
	// delivery may promise the run to its callback, which starts its heartbeats
	// under it, as soon as the lock is released.
	ctx, cancel := context.WithCancelCause(e.baseCtx)
	rn.ctx, rn.cancel = ctx, cancel
	if !env.Deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		rn.ctx, cancelDeadline = context.WithDeadline(ctx, env.Deadline)
		rn.cancel = func(cause error) {
			cancel(cause)
			cancelDeadline()
		}
	}
	e.inflight[id] = rn
	e.wg.Add(1)
	rn.live.Add(1)
	if m == modeEvent {
		e.markAsyncLocked(rn)
	}
	e.mu.Unlock()

	go e.execute(rn)
	switch m {
	case modeSync:
		e.awaitInline(w, r, rn)
	case modeEvent:
		e.settle(w, r, rn)
	default:
		e.await(w, r, rn, until)
	}
}

// deliveryKey identifies a delivery for deduplication: the webhook-id, qualified by the
// claim it carries, so that a webhook-id reused for another task or claim (a dispatcher
// bug) runs rather than receiving someone else's result.
func deliveryKey(webhookID string, env *Envelope) string {
	return webhookID + "\x00" + env.TaskID + "\x00" + strconv.FormatInt(env.ClaimEpoch, 10)
}

// await answers the request for rn: inline if the result is ready within the sync
// budget, which ends at until (or at all, when there is no callback to fall back on),
// else 202.
func (e *Endpoint) await(w http.ResponseWriter, r *http.Request, rn *run, until time.Time) {
	if rn.env.Callback == nil {
		e.awaitInline(w, r, rn)
		return
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-rn.done:
		writeJSON(w, http.StatusOK, rn.body)
	case <-timer.C:
		if e.goAsync(rn) {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		writeJSON(w, http.StatusOK, rn.body)
	case <-r.Context().Done():
		// The dispatcher gave up waiting; it will not read an inline answer, so the
		// result must reach it through the callback.
		e.goAsync(rn)
	}
}

// awaitInline answers the request for rn with its result, however long Work takes.
func (e *Endpoint) awaitInline(w http.ResponseWriter, r *http.Request, rn *run) {
	select {
	case <-rn.done:
		writeJSON(w, http.StatusOK, rn.body)
	case <-r.Context().Done():
		// The caller gave up; the result stays cached for its retry.
	}
}

// settle answers 202 once rn, already promised to the callback, has finished: its
// result delivered and its heartbeats stopped.
func (e *Endpoint) settle(w http.ResponseWriter, r *http.Request, rn *run) {
	settled := make(chan struct{})
	go func() {
		rn.live.Wait()
		close(settled)
	}()
	select {
	case <-settled:
		w.WriteHeader(http.StatusAccepted)
	case <-r.Context().Done():
		// The host is out of time; the callback, if still pending, resumes with it.
	}
}

// goAsync promises rn's result to the callback, unless it has already finished (then
// the caller answers inline and goAsync returns false).
func (e *Endpoint) goAsync(rn *run) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if rn.finished {
		return false
	}
	e.markAsyncLocked(rn)
	return true
}

// markAsyncLocked promises rn, not yet finished, to its callback and starts its
// heartbeats. They start only here: most runs finish inline and never beat, and a
// goroutine per run waiting for a promise that never comes was a fifth of the
// goroutines a batch started.
func (e *Endpoint) markAsyncLocked(rn *run) {
	if !rn.async {
		rn.async = true
		e.wg.Add(1) // execute still counts in both: neither can be at zero here
		rn.live.Add(1)
		go e.heartbeat(rn)
	}
}

// execute runs Work for rn, publishes the result and, if it was promised, delivers it to
// the callback.
func (e *Endpoint) execute(rn *run) {
	defer e.wg.Done()
	defer rn.live.Done()
	log := e.taskLogger(rn)
	res := e.work(rn.ctx, rn, log)
	superseded := errors.Is(context.Cause(rn.ctx), ErrSuperseded)
	rn.cancel(nil)

	body, err := json.Marshal(res)
	if err != nil {
		log.Error("cannot encode outcome", "err", err)
		body, _ = json.Marshal(Result{ // plain strings: cannot fail
			TaskID: res.TaskID, ClaimEpoch: res.ClaimEpoch,
			Error: &Error{Message: "provider returned an outcome that is not valid JSON: " + err.Error()},
		})
	}

	e.mu.Lock()
	rn.body = body
	rn.finished = true
	delete(e.inflight, rn.id)
	e.results.put(rn.id, body, time.Now())
	async := rn.async
	e.mu.Unlock()
	close(rn.done)

	if !async {
		return
	}
	if superseded {
		log.Info("task superseded; result dropped")
		return
	}
	e.deliver(rn, body, log)
}

// work calls OnConfig (if the provider has it and the config changed) and Work, turning a panic into a
// transient error result.
func (e *Endpoint) work(ctx context.Context, rn *run, log *slog.Logger) (res Result) {
	res = Result{TaskID: rn.env.TaskID, ClaimEpoch: rn.env.ClaimEpoch}
	env := rn.env
	if env.PayloadURL != "" {
		full, err := e.fetchPayload(ctx, env, rn.traceparent)
		if err != nil {
			if errors.Is(err, ErrSuperseded) {
				rn.cancel(ErrSuperseded)
			}
			res.Error = &Error{Message: err.Error()}
			log.Warn("cannot fetch the task payload", "err", err)
			return res
		}
		env = full
	}
	req := NewRequest(env)
	defer func() {
		if p := recover(); p != nil {
			log.Error("provider panicked", "panic", p, "stack", string(debug.Stack()))
			res.Outcome = nil
			res.Error = &Error{Message: fmt.Sprintf("provider %s panicked: %v", rn.slot.kv, p)}
		}
	}()
	rn.slot.configure(req)
	out, err := rn.slot.p.Work(ctx, req)
	if err != nil {
		res.Error = &Error{Message: cmp.Or(err.Error(), "unspecified error"), Terminal: IsTerminal(err)}
		log.Info("task failed", "err", err, "terminal", res.Error.Terminal)
		return res
	}
	if err := out.Validate(); err != nil {
		res.Error = &Error{Message: err.Error()}
		log.Error("provider returned an invalid outcome", "err", err)
		return res
	}
	res.Outcome = &out
	return res
}

// configure fires OnConfig if the provider has it and req's effective config differs
// from the last one this provider saw (the first one included). Serialised per provider.
func (s *providerSlot) configure(req Request) {
	if s.configurer == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen && bytes.Equal(s.lastSpec, req.Config) && bytes.Equal(s.lastBundle, req.Bundle) {
		return
	}
	sum := configSum(req.Config, req.Bundle)
	if !s.seen || s.cfgSum != sum {
		s.configurer.OnConfig(ProviderConfig{Spec: req.Config, Data: req.Bundle})
		s.seen, s.cfgSum = true, sum // only once OnConfig returned normally
	}
	s.lastSpec, s.lastBundle = bytes.Clone(req.Config), bytes.Clone(req.Bundle)
}

func configSum(spec json.RawMessage, bundle []byte) [sha256.Size]byte {
	var compact bytes.Buffer
	if err := json.Compact(&compact, spec); err != nil {
		compact.Reset()
		compact.Write(spec)
	}
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(compact.Len()))
	h.Write(n[:])
	h.Write(compact.Bytes())
	h.Write(bundle)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// ready is the provider's Ready, true for one without it, false if it panics.
func (e *Endpoint) ready(s *providerSlot) (ok bool) {
	if s.readier == nil {
		return true
	}
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("provider Ready panicked", "kind", s.kv.Kind, "kind_version", s.kv.Version, "panic", p)
			ok = false
		}
	}()
	return s.readier.Ready()
}

func (e *Endpoint) taskLogger(rn *run) *slog.Logger {
	return slog.New(&taskAttrs{Handler: e.log.Handler(), rn: rn})
}

// taskAttrs puts a task's attributes first on each record it logs, as
// Logger.With would, but only when a record is logged: most tasks log
// nothing, and With formats its attributes at once, for every task.
type taskAttrs struct {
	slog.Handler
	rn *run
}

func (t *taskAttrs) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	nr.AddAttrs(t.attrs()...)
	r.Attrs(func(a slog.Attr) bool { nr.AddAttrs(a); return true })
	return t.Handler.Handle(ctx, nr)
}

func (t *taskAttrs) attrs() []slog.Attr {
	return []slog.Attr{
		slog.String("task_id", t.rn.env.TaskID),
		slog.Int64("claim_epoch", t.rn.env.ClaimEpoch),
		slog.String("kind", t.rn.env.Kind),
		slog.Int("kind_version", t.rn.env.KindVersion),
		slog.String("webhook_id", t.rn.webhookID),
	}
}

func (t *taskAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return t.Handler.WithAttrs(t.attrs()).WithAttrs(as)
}

func (t *taskAttrs) WithGroup(name string) slog.Handler {
	return t.Handler.WithAttrs(t.attrs()).WithGroup(name)
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	body, err := json.Marshal(problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
	if err != nil { // cannot happen: plain strings and an int
		http.Error(w, detail, status)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client is gone; nothing to do
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client is gone; nothing to do
}
