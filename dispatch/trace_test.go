package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/webhooksdk"
)

// traceparentRE is a W3C traceparent, version 00: trace id, parent span id
// and flags (neither id all zeros is checked separately).
var traceparentRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$`)

// headers records the traceparent values of every task request (single or
// batch) before passing it on.
type headers struct {
	next http.Handler
	mu   sync.Mutex
	seen []traceparents
}

type traceparents struct {
	values []string
	tasks  int
}

func (h *headers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req webhooksdk.Batch
	_ = json.Unmarshal(body, &req)
	if n := map[string]int{webhooksdk.EnvelopeTask: 1, webhooksdk.EnvelopeBatch: len(req.Tasks)}[req.Type]; n > 0 {
		h.mu.Lock()
		h.seen = append(h.seen, traceparents{values: r.Header.Values("Traceparent"), tasks: n})
		h.mu.Unlock()
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	h.next.ServeHTTP(w, r)
}

// TestTraceparentWithoutTracing: with tracing off every request, a batch
// too, carries exactly one valid traceparent, not sampled, with ids of its
// own.
func TestTraceparentWithoutTracing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}, maxConcurrency: 1, maxBatch: 8})
	h := &headers{next: e.sdk(s, nil, newProvider("leaf", func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		time.Sleep(5 * time.Millisecond)
		return echo(ctx, req)
	}))}
	s.set(h)
	e.applyMany("leaf", 60)
	e.dispatcher(dispatch.Config{})
	e.listen()
	e.waitReady("leaf", 60, 60*time.Second)

	h.mu.Lock()
	defer h.mu.Unlock()
	traces, batches := map[string]bool{}, 0
	for i, req := range h.seen {
		if len(req.values) != 1 {
			t.Fatalf("request %d carried %d traceparent headers, want 1", i, len(req.values))
		}
		m := traceparentRE.FindStringSubmatch(req.values[0])
		if m == nil || m[1] == strings.Repeat("0", 32) || m[2] == strings.Repeat("0", 16) {
			t.Fatalf("request %d: traceparent %q is not valid", i, req.values[0])
		}
		if m[3] != "00" {
			t.Errorf("request %d: traceparent %q is sampled with tracing off", i, req.values[0])
		}
		if traces[m[1]] {
			t.Errorf("request %d reuses trace id %s", i, m[1])
		}
		traces[m[1]] = true
		if req.tasks > 1 {
			batches++
		}
	}
	if batches == 0 {
		t.Errorf("no batch among %d requests: the batch case went untested", len(h.seen))
	}
}

// TestDeliveryTrace: with a tracer, a delivery is a span with an attempt
// span under it, whose id the provider receives as the parent in its
// traceparent; the provider's callback, carrying that header on, makes a
// span in the same trace under it.
func TestDeliveryTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	s := e.endpoint("leaves", endpointOpts{kinds: []string{"leaf"}})
	rec := &recorder{next: verified(s.secret, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted) // the Result comes by callback, when the test posts it
	})}
	s.set(rec)
	e.dispatcher(dispatch.Config{Tracer: tp})
	e.listen()
	e.apply("leaf", "a", map[string]any{})
	waitFor(t, 20*time.Second, "the delivery", func() bool { return len(rec.seen()) > 0 })
	d := rec.seen()[0]
	m := traceparentRE.FindStringSubmatch(d.header.Get("Traceparent"))
	if m == nil || m[3] != "01" {
		t.Fatalf("traceparent %q, want a valid sampled one", d.header.Get("Traceparent"))
	}
	traceID, parentID := m[1], m[2]

	// The provider passes the header on with its callback.
	body, err := json.Marshal(webhooksdk.Result{TaskID: d.env.TaskID, ClaimEpoch: d.env.ClaimEpoch,
		Outcome: &webhooksdk.Outcome{Status: json.RawMessage(`{}`)}})
	must(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, d.env.Callback.URL, strings.NewReader(string(body)))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+d.env.Callback.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", d.header.Get("Traceparent"))
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("callback = %d", resp.StatusCode)
	}
	e.waitPhase("leaf", "a", "Ready", 20*time.Second)

	byName := map[string]tracetest.SpanStub{}
	waitFor(t, 10*time.Second, "the delivery, attempt and callback spans", func() bool {
		for _, sp := range exp.GetSpans() {
			byName[sp.Name] = sp
		}
		return len(byName) >= 3
	})
	deliver, attempt := byName["converge.deliver"], byName["converge.deliver.attempt"]
	callback := byName["converge.callback POST /v1/tasks/{id}/outcome"]
	for name, sp := range map[string]tracetest.SpanStub{"deliver": deliver, "attempt": attempt, "callback": callback} {
		if got := sp.SpanContext.TraceID().String(); got != traceID {
			t.Errorf("%s span in trace %q, want the traceparent's %s (spans: %v)", name, got, traceID, keys(byName))
		}
	}
	if attempt.SpanContext.SpanID().String() != parentID {
		t.Errorf("the traceparent names parent %s, not the attempt span %s", parentID, attempt.SpanContext.SpanID())
	}
	if attempt.Parent.SpanID() != deliver.SpanContext.SpanID() {
		t.Errorf("the attempt span's parent is %s, not the delivery span %s", attempt.Parent.SpanID(), deliver.SpanContext.SpanID())
	}
	if callback.Parent.SpanID().String() != parentID || !callback.Parent.IsRemote() {
		t.Errorf("the callback span's parent is %s (remote %v), want the traceparent's %s", callback.Parent.SpanID(), callback.Parent.IsRemote(), parentID)
	}
	attrs := map[string]string{}
	for _, a := range attempt.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["converge.endpoint"] != "leaves" || attrs["converge.result"] != "accepted" || attrs["http.response.status_code"] != "202" {
		t.Errorf("attempt attributes %v", attrs)
	}
	if len(deliver.Events) != 1 || deliver.Events[0].Name != "outcome" {
		t.Errorf("delivery events %+v, want one outcome", deliver.Events)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestDeliveryContinuesTheStoredTrace: a task stores the trace context of
// the request that scheduled it (work_queue.traceparent); a single task's
// delivery is a child of it, in its trace, and a batch's delivery links to
// each of its tasks' contexts. A task with none starts a trace.
// (TestOneTraceFromApplyToProvider, in integration, stores it through the API.)
func TestDeliveryContinuesTheStoredTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	e := newEnv(t)
	e.kind("leaf", model.Policy{})
	e.kind("many", model.Policy{})
	for _, ep := range []struct {
		name, kind string
		batch      int
	}{{"leaves", "leaf", 1}, {"batches", "many", 8}} {
		s := e.endpoint(ep.name, endpointOpts{kinds: []string{ep.kind}, maxBatch: ep.batch})
		s.set(e.sdk(s, nil, newProvider(ep.kind, echo)))
	}
	// As a traced apply leaves them: one context per resource.
	const stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e.apply("leaf", "traced", map[string]any{})
	e.apply("leaf", "untraced", map[string]any{})
	e.exec(`UPDATE work_queue w SET traceparent = $1 FROM resources r WHERE r.id = w.resource_id AND r.name = 'traced'`, stored)
	e.applyMany("many", 8)
	e.exec(`UPDATE work_queue w SET traceparent = '00-' || lpad(to_hex(r.n), 32, '0') || '-' || lpad(to_hex(r.n), 16, '0') || '-01'
		FROM (SELECT id, row_number() OVER (ORDER BY name) AS n FROM resources WHERE kind = 'many') r WHERE r.id = w.resource_id`)
	e.dispatcher(dispatch.Config{Tracer: tp})
	e.listen()
	e.waitReady("leaf", 2, 30*time.Second)
	e.waitReady("many", 8, 30*time.Second)

	var traced, untraced int
	links := map[string]bool{}
	for _, sp := range exp.GetSpans() {
		if sp.Name != "converge.deliver" {
			continue
		}
		attrs := attribute.NewSet(sp.Attributes...)
		kind, _ := attrs.Value("converge.kind")
		switch {
		case kind.AsString() == "many":
			if sp.Parent.IsValid() { // a batch of one, should the claim split them
				links[sp.Parent.TraceID().String()+"-"+sp.Parent.SpanID().String()] = true
			}
			for _, l := range sp.Links {
				links[l.SpanContext.TraceID().String()+"-"+l.SpanContext.SpanID().String()] = true
			}
		case sp.Parent.IsValid():
			traced++
			if sp.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
				sp.Parent.SpanID().String() != "00f067aa0ba902b7" || !sp.Parent.IsRemote() {
				t.Errorf("delivery in trace %s under %s, want the stored context's", sp.SpanContext.TraceID(), sp.Parent.SpanID())
			}
		default:
			untraced++
		}
	}
	if traced != 1 || untraced != 1 {
		t.Errorf("%d deliveries under a stored context and %d roots, want 1 and 1", traced, untraced)
	}
	if len(links) != 8 {
		t.Errorf("the batches link to %d distinct contexts, want the 8 stored: %v", len(links), links)
	}
}
