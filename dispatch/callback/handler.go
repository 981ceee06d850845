// Package callback is the dispatch API a provider calls back: the outcome
// of a task it accepted with 202, and heartbeats while it works.
//
//	POST /v1/tasks/{task_id}/outcome    Authorization: Bearer <token>
//	POST /v1/tasks/outcomes             {"outcomes":[{"token","result"},…]}
//	POST /v1/tasks/{task_id}/heartbeat  Authorization: Bearer <token>
//	GET  /v1/tasks/{task_id}            Authorization: Bearer <token>
//
// The GET serves the documents of a thin envelope (one sent with a
// payload_url because it was over its target's request limit): the task's
// request built again from the database, only while the token's claim
// still holds the task (409 otherwise, 410 if its resource is gone).
//
// The bearer token ([Tokens]) is a stateless capability minted by the
// dispatcher into the task envelope: any dispatch pod verifies it with the
// shared key, with no lookup, so a callback may land on any pod. The token
// proves who may speak for the claim; the FENCE is the database: an outcome
// is applied only while the task is still claimed at the token's
// claim_epoch (engine.TaskCompleteMany).
//
// Outcome answers: 200 applied; 200 duplicate (the same claim's outcome was
// already accepted: a no-op, so providers may retry freely); 409 superseded
// (the claim lapsed and the task was re-claimed, re-pended or removed, or
// the dispatcher gave up on the claim — a request timeout, an accepted task
// that never called back — and recorded a failure in its place: the result
// is dropped and the provider should stop); 401 bad, expired or
// other-task token; 413 body over the cap; 415 not JSON; 400 malformed,
// or a task_id or claim_epoch in the body that is not the token's (an
// explicit 0 included; absent means the token's) — the task stays claimed
// until its lease or deadline lapses, then retries;
// 503 the database is unavailable (retry).
//
// Heartbeat answers: 200 with the new lease end; 409 superseded; 401 as
// above. A heartbeat extends the lease to the task deadline plus grace (or
// by the async lease when the task has none), never beyond.
package callback

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/convergeplane/converge/control/engine"
	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/internal/problem"
	"github.com/convergeplane/converge/webhooksdk"
)

// Defaults shared by the dispatcher (which mints tokens and extends leases
// on a 202) and the handler (which extends them on heartbeats); dispatch.New
// configures both from one dispatch.Config.
const (
	// AsyncLeaseDefault is the lease of an accepted task without a deadline,
	// renewed by each heartbeat.
	AsyncLeaseDefault = 5 * time.Minute
	// GraceDefault is how long past the task deadline a callback is still
	// accepted (webhooksdk retries its callback for CallbackGraceDefault, 1m,
	// past the deadline).
	GraceDefault = time.Minute
	// TokenTTLDefault bounds a token of a task without a deadline.
	TokenTTLDefault = 24 * time.Hour
	// MaxBodyDefault caps an outcome body (16 MiB, the engine's status cap).
	MaxBodyDefault int64 = 16 << 20
	// maxHeartbeatBody caps a heartbeat body, which carries ids only.
	maxHeartbeatBody = 4 << 10
)

// Config configures a Handler.
type Config struct {
	// Tokens verifies bearer tokens. Required; the same keys as the
	// dispatchers'.
	Tokens *Tokens
	// Engine completes tasks and extends leases. Required.
	Engine *engine.Engine
	// Store records the delivery log's rows of the callbacks. Required.
	Store *store.Store
	// MaxBodyBytes caps an outcome body. Defaults to MaxBodyDefault.
	MaxBodyBytes int64
	// AsyncLease and Grace: see LeaseFor. Default to AsyncLeaseDefault and
	// GraceDefault.
	AsyncLease, Grace time.Duration
	// Metrics registers callbacks_total and heartbeats_total. Nil skips
	// registration.
	Metrics prometheus.Registerer
	// Tracer, when set, records a server span per request, joined to the
	// trace of the request's W3C traceparent header (the one the provider
	// received with the delivery, passed on). Nil records none.
	Tracer trace.TracerProvider
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Now is the clock tokens are checked against. Defaults to time.Now.
	Now func() time.Time
	// BatchWindow is how long the first of several concurrent outcome
	// callbacks waits for others to complete together in one round trip.
	// Defaults to 2ms; negative completes each on its own.
	BatchWindow time.Duration
}

// Handler serves the callback routes. Create it with NewHandler.
type Handler struct {
	cfg        Config
	tracer     trace.Tracer // nil: tracing off
	group      *group
	mux        *http.ServeMux
	routes     http.Handler // mux, its own 404 and 405 answered as problems
	callbacks  *prometheus.CounterVec
	heartbeats *prometheus.CounterVec
	payloads   *prometheus.CounterVec
}

// NewHandler returns the callback handler, routing /v1/tasks/{id}/outcome
// and /v1/tasks/{id}/heartbeat. Mount it at the root of the dispatch
// listener (or strip a prefix that CALLBACK_BASE_URL includes).
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Tokens == nil || cfg.Engine == nil || cfg.Store == nil {
		return nil, errors.New("callback handler: Tokens, Engine and Store are required")
	}
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, MaxBodyDefault)
	cfg.AsyncLease = cmp.Or(cfg.AsyncLease, AsyncLeaseDefault)
	cfg.Grace = cmp.Or(cfg.Grace, GraceDefault)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.BatchWindow = cmp.Or(cfg.BatchWindow, 2*time.Millisecond)
	h := &Handler{
		cfg:   cfg,
		group: &group{eng: cfg.Engine, st: cfg.Store, log: cfg.Logger, window: max(cfg.BatchWindow, 0), max: 256, writer: make(chan struct{}, 1)},
		mux:   http.NewServeMux(),
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "callbacks_total",
			Help: "Outcome callbacks received, by result: applied, duplicate, superseded, unauthorized, too_large, malformed, unsupported_media_type, error.",
		}, []string{"result"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "heartbeats_total",
			Help: "Task heartbeats received, by result: extended, superseded, unauthorized, malformed, error.",
		}, []string{"result"}),
		payloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Subsystem: "dispatch", Name: "payloads_total",
			Help: "Thin envelopes' payloads fetched, by result: served, superseded, gone, unauthorized, error.",
		}, []string{"result"}),
	}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{h.callbacks, h.heartbeats, h.payloads} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("callback handler: register metrics: %w", err)
			}
		}
	}
	if cfg.Tracer != nil {
		h.tracer = cfg.Tracer.Tracer("github.com/convergeplane/converge/dispatch/callback")
	}
	h.mux.HandleFunc("POST /v1/tasks/{id}/outcome", h.outcome)
	h.mux.HandleFunc("POST /v1/tasks/outcomes", h.outcomes)
	h.mux.HandleFunc("POST /v1/tasks/{id}/heartbeat", h.heartbeat)
	h.mux.HandleFunc("GET /v1/tasks/{id}", h.payload)
	h.routes = problem.Handler(h.mux)
	return h, nil
}

// ServeHTTP routes a callback request, in a span when tracing is on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.tracer == nil {
		h.routes.ServeHTTP(w, r)
		return
	}
	_, route := h.mux.Handler(r)
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.tracer.Start(ctx, "converge.callback "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.route", route), attribute.String("url.path", r.URL.Path)))
	defer span.End()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	h.routes.ServeHTTP(sw, r.WithContext(ctx))
	span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
	if sw.status >= 400 {
		span.SetStatus(codes.Error, http.StatusText(sw.status))
	}
}

// statusWriter remembers the status a handler answered, for its span.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// authorize verifies the bearer token and that it is for the task in the
// path. A token for another task is as good as forged here.
func (h *Handler) authorize(r *http.Request) (Claim, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return Claim{}, errors.New("missing bearer token")
	}
	c, err := h.cfg.Tokens.Verify(strings.TrimSpace(tok), h.cfg.Now())
	if err != nil {
		return Claim{}, err
	}
	id, ok := CanonicalTaskID(r.PathValue("id"))
	if !ok || id != c.TaskID {
		return Claim{}, errors.New("the token is for another task")
	}
	return c, nil
}

// readBody enforces the content type and the size cap, answering the
// request itself when it fails (result names the failure).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, string) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			refuse(w, r, http.StatusUnsupportedMediaType, "content type must be application/json")
			return nil, "unsupported_media_type"
		}
	}
	tooLarge := fmt.Sprintf("body exceeds this route's cap of %d bytes and was not applied", limit)
	if r.ContentLength > limit {
		refuse(w, r, http.StatusRequestEntityTooLarge, tooLarge)
		return nil, "too_large"
	}
	// Sized from Content-Length, already within the cap: io.ReadAll grows from
	// 512 bytes and copies a batched callback several times over.
	var buf bytes.Buffer
	buf.Grow(int(max(r.ContentLength, 0)) + bytes.MinRead)
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			refuse(w, r, http.StatusRequestEntityTooLarge, tooLarge)
			return nil, "too_large"
		}
		refuse(w, r, http.StatusBadRequest, "cannot read body")
		return nil, "malformed"
	}
	return buf.Bytes(), ""
}

func (h *Handler) outcome(w http.ResponseWriter, r *http.Request) {
	c, err := h.authorize(r)
	if err != nil {
		h.callbacks.WithLabelValues("unauthorized").Inc()
		refuse(w, r, http.StatusUnauthorized, "callback token refused: "+err.Error())
		return
	}
	body, fail := readBody(w, r, h.cfg.MaxBodyBytes)
	if fail != "" {
		h.callbacks.WithLabelValues(fail).Inc()
		return
	}
	d := h.decode(c, body)
	a := d.CallbackItemAnswer
	if a.Status == 0 {
		a = h.settle(r.Context(), c, d.res)
	}
	switch a.Status {
	case http.StatusOK:
		writeJSON(w, http.StatusOK, map[string]string{"result": a.Result})
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
		fallthrough
	default:
		refuse(w, r, a.Status, a.Detail)
	}
}

// outcomes serves a batched callback: each item is authorized by its own
// token and settled as a single callback of it would be, and all of them
// join the same batched write. The answer is 200 with one status per item;
// only a body that is not a batch at all is refused whole.
func (h *Handler) outcomes(w http.ResponseWriter, r *http.Request) {
	body, fail := readBody(w, r, h.cfg.MaxBodyBytes)
	if fail != "" {
		h.callbacks.WithLabelValues(fail).Inc()
		return
	}
	var b webhooksdk.CallbackBatch
	if err := json.Unmarshal(body, &b); err != nil || b.Outcomes == nil {
		h.callbacks.WithLabelValues("malformed").Inc()
		refuse(w, r, http.StatusBadRequest, `body must be {"outcomes":[{"token":…,"result":…},…]}`)
		return
	}
	if len(b.Outcomes) > webhooksdk.MaxCallbackBatch {
		h.callbacks.WithLabelValues("too_large").Inc()
		refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("%d outcomes in one batch; at most %d", len(b.Outcomes), webhooksdk.MaxCallbackBatch))
		return
	}
	answers := make([]webhooksdk.CallbackItemAnswer, len(b.Outcomes))
	seen := make(map[string]bool, len(b.Outcomes))
	now := h.cfg.Now()
	var wg sync.WaitGroup
	for i, it := range b.Outcomes {
		c, err := h.cfg.Tokens.Verify(strings.TrimSpace(it.Token), now)
		switch {
		case err != nil:
			h.callbacks.WithLabelValues("unauthorized").Inc()
			answers[i] = webhooksdk.CallbackItemAnswer{Status: http.StatusUnauthorized, Detail: "callback token refused: " + err.Error()}
		case seen[c.TaskID]:
			h.callbacks.WithLabelValues("malformed").Inc()
			answers[i] = webhooksdk.CallbackItemAnswer{TaskID: c.TaskID, Status: http.StatusBadRequest, Detail: "the task's outcome is already in this batch"}
		default:
			seen[c.TaskID] = true
			// Decoded here, not in the goroutine: each goroutine starts on a
			// small stack, and growing it for the decoder (copied at each
			// doubling) cost more than the decode itself.
			d := h.decode(c, it.Result)
			if d.Status != 0 {
				answers[i] = d.CallbackItemAnswer
				continue
			}
			wg.Go(func() { answers[i] = h.settle(r.Context(), c, d.res) })
		}
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, webhooksdk.CallbackBatchAnswer{Results: answers})
}

// decoded is an authorized callback's Result, or (Status set) the answer
// refusing it.
type decoded struct {
	webhooksdk.CallbackItemAnswer
	res webhooksdk.Result
}

// decode reads one authorized callback's Result for its claim; a body that
// is not one is answered 400 and counted.
func (h *Handler) decode(c Claim, body []byte) decoded {
	res, err := wire.DecodeResult(body, c.TaskID, c.ClaimEpoch)
	if err != nil {
		// The claim stays as it is: its lease or deadline lapses and the task
		// is retried, rather than a garbled body deciding anything.
		h.callbacks.WithLabelValues("malformed").Inc()
		return decoded{CallbackItemAnswer: webhooksdk.CallbackItemAnswer{TaskID: c.TaskID, Status: http.StatusBadRequest, Detail: err.Error()}}
	}
	return decoded{res: res}
}

// settle completes an authorized callback's task with its decoded Result,
// answering as a single callback would and counting the answer.
func (h *Handler) settle(ctx context.Context, c Claim, res webhooksdk.Result) webhooksdk.CallbackItemAnswer {
	a := webhooksdk.CallbackItemAnswer{TaskID: c.TaskID}
	st, err := h.group.complete(ctx, c.Task(), res, h.record(c, res))
	switch {
	case st == engine.Superseded:
		h.callbacks.WithLabelValues("superseded").Inc()
		a.Status, a.Detail = http.StatusConflict, "task superseded: this claim no longer holds it; the result was not applied"
	case err != nil:
		h.callbacks.WithLabelValues("error").Inc()
		h.cfg.Logger.Error("callback: complete failed", "task_id", c.TaskID, "claim_epoch", c.ClaimEpoch, "err", err)
		a.Status, a.Detail = http.StatusServiceUnavailable, "cannot record the outcome now; retry"
	default:
		h.callbacks.WithLabelValues(string(st)).Inc()
		a.Status, a.Result = http.StatusOK, string(st)
	}
	return a
}

// checkEcho refuses a heartbeat body whose claim_epoch is not the token's:
// only an absent (or null) one means "the token's"; epochs start at 1, so an
// explicit 0 never matches (wire.DecodeResult holds outcomes to the same).
func checkEcho(body []byte, c Claim) error {
	var echo struct {
		ClaimEpoch *json.RawMessage `json:"claim_epoch"`
	}
	if err := json.Unmarshal(body, &echo); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrMalformedResult, err)
	}
	if echo.ClaimEpoch == nil {
		return nil
	}
	var claimEpoch int64
	if err := json.Unmarshal(*echo.ClaimEpoch, &claimEpoch); err != nil || claimEpoch != c.ClaimEpoch {
		return fmt.Errorf("%w: claim_epoch %s is not this claim's (%d)", wire.ErrMalformedResult, *echo.ClaimEpoch, c.ClaimEpoch)
	}
	return nil
}

// record is the delivery log's row of a callback, written once its
// outcome is applied: a row of its own after the delivery's (accepted), as
// the attempt the token names, classified callback_ok or callback_error
// with the reported error as its excerpt, its latency from the delivery.
// nil for a token that names no endpoint.
func (h *Handler) record(c Claim, res webhooksdk.Result) *store.Delivery {
	if c.Endpoint == "" {
		return nil
	}
	now := h.cfg.Now()
	var latency time.Duration
	if !c.Issued.IsZero() {
		latency = now.Sub(c.Issued)
	}
	d := &store.Delivery{Endpoint: c.Endpoint, At: now, TaskID: c.TaskID, Resource: store.DeliveryResource{ID: c.ResourceID},
		ClaimEpoch: c.ClaimEpoch, Attempt: max(c.Attempt, 1), HTTPStatus: http.StatusAccepted, LatencyMS: int(latency / time.Millisecond),
		Classification: store.DeliveryCallbackOK}
	if res.Error != nil {
		d.Classification, d.Excerpt = store.DeliveryCallbackError, res.Error.Message
		if res.Error.Terminal {
			d.Excerpt = "terminal: " + d.Excerpt
		}
	}
	return d
}

func (h *Handler) heartbeat(w http.ResponseWriter, r *http.Request) {
	c, err := h.authorize(r)
	if err != nil {
		h.heartbeats.WithLabelValues("unauthorized").Inc()
		refuse(w, r, http.StatusUnauthorized, "callback token refused: "+err.Error())
		return
	}
	body, fail := readBody(w, r, maxHeartbeatBody)
	if fail != "" {
		h.heartbeats.WithLabelValues(fail).Inc()
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var hb struct {
			TaskID string `json:"task_id"`
		}
		if err := json.Unmarshal(body, &hb); err != nil || (hb.TaskID != "" && hb.TaskID != c.TaskID) || checkEcho(body, c) != nil {
			h.heartbeats.WithLabelValues("malformed").Inc()
			refuse(w, r, http.StatusBadRequest, "heartbeat body must be {\"task_id\", \"claim_epoch\"} of this claim, or empty")
			return
		}
	}
	now := h.cfg.Now()
	lease := LeaseFor(c.Deadline, h.cfg.AsyncLease, h.cfg.Grace, now)
	held, err := h.cfg.Engine.LeaseExtend(r.Context(), []model.Task{c.Task()}, lease)
	switch {
	case err != nil:
		h.heartbeats.WithLabelValues("error").Inc()
		h.cfg.Logger.Error("callback: heartbeat failed", "task_id", c.TaskID, "claim_epoch", c.ClaimEpoch, "err", err)
		w.Header().Set("Retry-After", "1")
		refuse(w, r, http.StatusServiceUnavailable, "cannot extend the lease now; retry")
	case !held[c.TaskID]:
		h.heartbeats.WithLabelValues("superseded").Inc()
		refuse(w, r, http.StatusConflict, "task superseded: this claim no longer holds it; stop working on it")
	default:
		h.heartbeats.WithLabelValues("extended").Inc()
		writeJSON(w, http.StatusOK, map[string]string{"lease_until": now.Add(lease).UTC().Format(time.RFC3339)})
	}
}

// payload serves a thin envelope's documents: the task's request, built
// again from the database while the token's claim still holds it. The
// token reads its own task and nothing else.
func (h *Handler) payload(w http.ResponseWriter, r *http.Request) {
	c, err := h.authorize(r)
	if err != nil {
		h.payloads.WithLabelValues("unauthorized").Inc()
		refuse(w, r, http.StatusUnauthorized, "callback token refused: "+err.Error())
		return
	}
	env, err := h.cfg.Engine.RequestRebuild(r.Context(), c.Task())
	switch {
	case errors.Is(err, engine.ErrSuperseded):
		h.payloads.WithLabelValues("superseded").Inc()
		refuse(w, r, http.StatusConflict, "task superseded: this claim no longer holds it; stop working on it")
	case errors.Is(err, engine.ErrResourceVanished), errors.Is(err, engine.ErrOperationGone):
		h.payloads.WithLabelValues("gone").Inc()
		refuse(w, r, http.StatusGone, "the task's request cannot be built: "+err.Error())
	case err != nil:
		h.payloads.WithLabelValues("error").Inc()
		h.cfg.Logger.Error("callback: payload failed", "task_id", c.TaskID, "claim_epoch", c.ClaimEpoch, "err", err)
		w.Header().Set("Retry-After", "1")
		refuse(w, r, http.StatusServiceUnavailable, "cannot read the task now; retry")
	default:
		h.payloads.WithLabelValues("served").Inc()
		env.Type = webhooksdk.EnvelopeTask
		body, err := json.Marshal(&env)
		if err != nil {
			refuse(w, r, http.StatusInternalServerError, "cannot encode the task: "+err.Error())
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body) // the client is gone if this fails
	}
}

// refuse answers r with a problem document of the project's type for
// status (see package problem).
func refuse(w http.ResponseWriter, r *http.Request, status int, detail string) {
	problem.New(status, problem.TypeFor(status), detail).Write(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v) // strings and ints only
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
