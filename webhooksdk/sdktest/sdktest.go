// Package sdktest helps test webhooksdk providers: run a Provider's Work in-process with
// a hand-built Request ([Run]), build signed deliveries for a webhooksdk Handler
// ([NewTaskRequest], [NewHealthRequest], [NewSignedRequest]), and stand in for the
// dispatcher's callback endpoint ([CallbackReceiver]).
//
// The CallbackReceiver is a fake of the dispatcher's callback API for SDK unit tests
// only; end-to-end tests run the real dispatcher.
package sdktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// Run runs one task on p in-process, the way the Handler would: OnConfig with the
// request's effective config if p is a webhooksdk.Configurer, then Work under the test's context (and req.Deadline, if
// set), with a panic turned into an error. It fails the test if the outcome is one the
// core would reject (see webhooksdk.Outcome.Validate).
func Run(t testing.TB, p webhooksdk.Provider, req webhooksdk.Request) (out webhooksdk.Outcome, err error) {
	t.Helper()
	ctx := t.Context()
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	if req.KindVersion == 0 {
		req.KindVersion = p.Kind().Version
	}
	defer func() {
		if r := recover(); r != nil {
			t.Logf("provider %s panicked: %v\n%s", p.Kind(), r, debug.Stack())
			out, err = webhooksdk.Outcome{}, fmt.Errorf("provider %s panicked: %v", p.Kind(), r)
		}
	}()
	if c, ok := p.(webhooksdk.Configurer); ok {
		c.OnConfig(webhooksdk.ProviderConfig{Spec: req.Config, Data: req.Bundle})
	}
	out, err = p.Work(ctx, req)
	if err == nil {
		if verr := out.Validate(); verr != nil {
			t.Errorf("sdktest.Run: %v", verr)
		}
	}
	return out, err
}

// NewMessageID returns a fresh random webhook-id ("msg_" + 32 hex digits).
func NewMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "msg_" + hex.EncodeToString(b[:])
}

// TaskEnvelope returns a minimal valid task envelope for kv: task id "task-1", claim
// epoch 1, attempt 1, a reconcile of reaction "work" on resource "r1" with an empty
// spec, and a deadline a minute from now. Callback is nil (the Handler then always
// answers inline); set it from a CallbackReceiver to test the asynchronous path.
func TaskEnvelope(kv webhooksdk.KindVersion) webhooksdk.Envelope {
	return webhooksdk.Envelope{
		Type:        webhooksdk.EnvelopeTask,
		TaskID:      "task-1",
		ClaimEpoch:  1,
		Attempt:     1,
		TaskType:    webhooksdk.TaskReconcile,
		Reaction:    "work",
		Trigger:     webhooksdk.TriggerSpecChange,
		Kind:        kv.Kind,
		KindVersion: kv.Version,
		Resource: &webhooksdk.Resource{
			ID: "00000000-0000-0000-0000-000000000001", Kind: kv.Kind, KindVersion: kv.Version,
			Name: "r1", Spec: json.RawMessage(`{}`), Generation: 1,
		},
		Deadline: time.Now().Add(time.Minute).UTC().Truncate(time.Second),
	}
}

// NewTaskRequest returns a server-side request (for Handler.ServeHTTP with an
// httptest.ResponseRecorder) carrying env, signed with secret under a fresh webhook-id
// at the current time.
func NewTaskRequest(t testing.TB, secret string, env webhooksdk.Envelope) *http.Request {
	t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatalf("sdktest: encode envelope: %v", err)
	}
	return newServerRequest(t, secret, body)
}

// NewHealthRequest returns a signed server-side health probe request.
func NewHealthRequest(t testing.TB, secret string) *http.Request {
	t.Helper()
	return newServerRequest(t, secret, []byte(`{"type":"health"}`))
}

func newServerRequest(t testing.TB, secret string, body []byte) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	sign(t, r.Header, secret, NewMessageID(), time.Now(), body)
	return r
}

// NewSignedRequest returns a client request (for an http.Client) POSTing body to target
// with Standard Webhooks headers signed with secret. An empty msgID gets a fresh one; a
// zero ts means now.
func NewSignedRequest(t testing.TB, target, secret, msgID string, ts time.Time, body []byte) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("sdktest: build request: %v", err)
	}
	r.Header.Set("Content-Type", "application/json")
	if msgID == "" {
		msgID = NewMessageID()
	}
	if ts.IsZero() {
		ts = time.Now()
	}
	sign(t, r.Header, secret, msgID, ts, body)
	return r
}

func sign(t testing.TB, h http.Header, secret, msgID string, ts time.Time, body []byte) {
	t.Helper()
	s, err := webhooksdk.NewSigner(secret)
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	s.SetHeaders(h, msgID, ts, body)
}
