package dispatch_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/dispatch"
	"github.com/convergeplane/converge/dispatch/breaker"
	"github.com/convergeplane/converge/dispatch/sinks"
	"github.com/convergeplane/converge/webhooksdk"
)

// alertReceiver is an operator's webhook: it verifies each request's
// Standard Webhooks signature and records the alerts, refusing the first
// delivery of each event with a 503 so every alert is seen redelivered.
type alertReceiver struct {
	t      *testing.T
	secret webhooksdk.Secret
	mu     sync.Mutex
	tries  map[string][]string // webhook-id -> event types, one per request
	events []store.AlertEvent  // accepted
	paths  []string            // every request's path
}

func (a *alertReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := webhooksdk.Verify([]webhooksdk.Secret{a.secret}, r.Header, body, time.Now(), 0); err != nil {
		a.t.Errorf("alert webhook signature: %v", err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var ev store.AlertEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		a.t.Errorf("alert body: %v", err)
	}
	id := r.Header.Get("webhook-id")
	if id != ev.ID {
		a.t.Errorf("webhook-id %q, want the event id %q", id, ev.ID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.paths = append(a.paths, r.URL.Path)
	a.tries[id] = append(a.tries[id], ev.Type)
	if len(a.tries[id]) == 1 {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	if len(a.tries[id]) == 2 {
		a.events = append(a.events, ev)
	}
}

// accepted returns the accepted alerts of type typ.
func (a *alertReceiver) accepted(typ string) []store.AlertEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.AlertEvent
	for _, e := range a.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestAlertsReachAWebhookSink triggers every alert type for real — an
// endpoint answering 410 is disabled, a failing endpoint opens its breaker
// and a trial closes it, a terminal task error fails a resource and so do
// exhausted transient retries, a health probe reporting its kind not ready
// parks the kind — and reads each at a signed webhook sink, redelivered
// with the same webhook-id after the sink refused it once. A sink selecting
// another kind gets none of them.
func TestAlertsReachAWebhookSink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, k := range []string{"gone", "flaky", "doomed", "exhausted", "parked"} {
		e.kind(k, model.Policy{})
	}
	e.exec(`UPDATE kind_config SET max_transient_attempts = 2 WHERE kind = 'exhausted'`)
	secret, err := webhooksdk.GenerateSecret()
	must(t, err)
	parsed, err := webhooksdk.ParseSecret(secret)
	must(t, err)
	rcv := &alertReceiver{t: t, secret: parsed, tries: map[string][]string{}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	_, _, _, err = e.st.PutAlertSink(e.ctx, e.box, store.PutAlertSinkParams{Name: "oncall", Type: store.SinkWebhook, Target: hook.URL,
		EventTypes: store.AlertTypes, Enabled: true, Secret: store.EndpointSecret(secret)})
	must(t, err)
	// A sink that selects another kind gets none of these.
	_, _, _, err = e.st.PutAlertSink(e.ctx, e.box, store.PutAlertSinkParams{Name: "other-team", Type: store.SinkWebhook, Target: hook.URL + "/other",
		EventTypes: store.AlertTypes, Kinds: []string{"unrelated"}, Enabled: true})
	must(t, err)
	sd, err := sinks.New(sinks.Config{Box: e.box, Interval: 20 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: e.log}, e.st)
	must(t, err)
	must(t, sd.Start(e.ctx))
	t.Cleanup(sd.Stop)

	gone := e.endpoint("gone", endpointOpts{kinds: []string{"gone"}})
	gone.set(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	var flakyUp sync.Mutex
	flakyOK := false
	flaky := e.endpoint("flaky", endpointOpts{kinds: []string{"flaky"}})
	flaky.set(verified(flaky.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		flakyUp.Lock()
		ok := flakyOK
		flakyUp.Unlock()
		if !ok {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_, _ = w.Write(resultBody(env, `{}`))
	}))
	doomed := e.endpoint("doomed", endpointOpts{kinds: []string{"doomed"}})
	doomed.set(verified(doomed.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		b, _ := json.Marshal(webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
			Error: &webhooksdk.Error{Message: "cidr overlaps an existing vpc", Terminal: true}})
		_, _ = w.Write(b)
	}))
	exhausted := e.endpoint("exhausted", endpointOpts{kinds: []string{"exhausted"}})
	exhausted.set(verified(exhausted.secret, func(w http.ResponseWriter, r *http.Request) {
		env := decodeEnvelope(r)
		b, _ := json.Marshal(webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch,
			Error: &webhooksdk.Error{Message: "quota exceeded, try later"}})
		_, _ = w.Write(b)
	}))
	parked := e.endpoint("parked", endpointOpts{kinds: []string{"parked"}, health: true, interval: 1})
	parked.set(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"kinds":[{"kind":"parked","kind_version":1,"ready":false}]}`))
	}))

	e.dispatcher(dispatch.Config{Claimer: "pod-a", Breaker: breaker.Config{Failures: 2, Cooldown: 300 * time.Millisecond}})
	e.listen()
	e.apply("gone", "a", map[string]any{})
	e.apply("flaky", "a", map[string]any{})
	e.apply("doomed", "a", map[string]any{})
	e.apply("exhausted", "a", map[string]any{})
	e.apply("parked", "a", map[string]any{})

	waitFor(t, 30*time.Second, "breaker.opened at the sink", func() bool { return len(rcv.accepted(store.AlertBreakerOpened)) > 0 })
	flakyUp.Lock()
	flakyOK = true
	flakyUp.Unlock()
	for _, typ := range store.AlertTypes {
		waitFor(t, 30*time.Second, typ+" at the sink", func() bool { return len(rcv.accepted(typ)) > 0 })
	}
	waitFor(t, 30*time.Second, "both resource.failed at the sink", func() bool { return len(rcv.accepted(store.AlertResourceFailed)) == 2 })
	failed := map[string]string{}
	for _, ev := range rcv.accepted(store.AlertResourceFailed) {
		failed[ev.Kind] = ev.Message
	}
	if !strings.Contains(failed["doomed"], "cidr overlaps") || !strings.Contains(failed["exhausted"], "gave up after 2 transient attempts") {
		t.Errorf("resource.failed messages %q, want the terminal error and the retries given up", failed)
	}
	want := map[string]store.AlertEvent{
		store.AlertEndpointDisabled: {Endpoint: "gone"},
		store.AlertBreakerOpened:    {Endpoint: "flaky", Source: "pod-a"},
		store.AlertBreakerClosed:    {Endpoint: "flaky", Source: "pod-a"},
		store.AlertKindParked:       {Endpoint: "parked", Kind: "parked", KindVersion: 1, Source: "pod-a"},
	}
	for typ, w := range want {
		got := rcv.accepted(typ)
		if len(got) != 1 {
			t.Errorf("%s accepted %d times, want once: %+v", typ, len(got), got)
			continue
		}
		g := got[0]
		if g.Endpoint != w.Endpoint || g.Kind != w.Kind || g.KindVersion != w.KindVersion || g.ResourceName != w.ResourceName ||
			g.Source != w.Source || g.Message == "" {
			t.Errorf("%s = %+v, want %+v and a message", typ, g, w)
		}
	}
	rcv.mu.Lock()
	if slices.Contains(rcv.paths, "/other") {
		t.Error("the sink selecting another kind got an alert")
	}
	for id, types := range rcv.tries {
		if len(types) < 2 || slices.ContainsFunc(types, func(s string) bool { return s != types[0] }) {
			t.Errorf("webhook-id %s: requests %v, want one refused then the same event redelivered", id, types)
		}
	}
	rcv.mu.Unlock()
	waitFor(t, 10*time.Second, "the outbox to empty", func() bool { return e.count(`SELECT count(*) FROM alert_outbox`) == 0 })
}
