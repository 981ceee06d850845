package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/transport"
	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
)

// The fixed inputs of every vector (protocol/vectors/README.md states them).
const (
	// secretA is the Standard Webhooks specification's test secret, the one
	// of docs/protocol.md §13.
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// secretB is the second secret of a rotation (docs/protocol.md §13).
	secretB = "whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n"
	// now is the SDK's clock and the signing time: 2026-01-01T00:00:00Z.
	now = 1767225600
	// cbBase is the dispatcher's callback listener.
	cbBase = "https://dispatch.internal:8080"
	// targetURL is the endpoint's target URL.
	targetURL   = "https://net.internal:8443/converge"
	userAgent   = "converge/vectors"
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	// tolerance is the SDK's signature timestamp tolerance (seconds).
	tolerance = 300
	// syncBudget is generous, so that a handler finishing at once is answered
	// inline however loaded the machine; asyncBudget is the short budget
	// after which a waiting handler's task is answered 202.
	syncBudgetMS  = 30_000
	asyncBudgetMS = 50
	// heartbeatIdle is long enough that no heartbeat is sent during a case;
	// heartbeatFast makes one due at once.
	heartbeatIdleMS = 3_600_000
	heartbeatFastMS = 20
)

// signedAt is when the dispatcher signs, unless a case says otherwise.
var signedAt = time.Unix(now, 0).UTC()

// deadline is every task's deadline: far in the future, since SDKs bound
// work by the real clock, which only the signature check reads from the
// injected one.
var deadline = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// newVector is a vector with the default setup: HTTP, secret A, the clock
// at now, one ready provider vpc v1, nothing sent out.
func newVector(name, section, description string) protocol.Vector {
	return protocol.Vector{
		Name: name, Section: section, Description: description,
		Setup: protocol.Setup{
			Transport: protocol.TransportHTTP, Secrets: []string{secretA}, Now: now,
			ToleranceSeconds: tolerance, SyncBudgetMS: syncBudgetMS, HeartbeatEveryMS: heartbeatIdleMS,
			Providers: []protocol.Provider{{Kind: "vpc", KindVersion: 1, Ready: true}},
		},
		Outgoing: []protocol.Call{},
	}
}

// taskPrefix starts every fixed task id.
const taskPrefix = "0b7f6a0e-3c1d-4a55-9f43-2f6f2c1f9a"

// taskID is the n-th fixed task id.
func taskID(n int) string { return fmt.Sprintf("%s%02d", taskPrefix, n) }

// token is the fixed callback token of the task id.
func token(id string) string { return "cbt_" + strings.TrimPrefix(id, taskPrefix) }

// vpcTask is the n-th task: a vpc v1 worker reconcile, claim epoch 7.
func vpcTask(n int) webhooksdk.Envelope {
	return webhooksdk.Envelope{
		TaskID: taskID(n), ClaimEpoch: 7, Attempt: 1,
		TaskType: webhooksdk.TaskReconcile, Reaction: "work", Trigger: webhooksdk.TriggerSpecChange,
		Kind: "vpc", KindVersion: 1,
		Resource: &webhooksdk.Resource{
			ID: fmt.Sprintf("5d0c2b1e-8f3a-4c7e-b1d2-9a6e4f3c2b%02d", n), Kind: "vpc", KindVersion: 1,
			Name: fmt.Sprintf("net-%02d", n), Labels: map[string]string{"team": "blue"},
			Spec:       json.RawMessage(fmt.Sprintf(`{"cidr":"10.%d.0.0/16","region":"eu-west-1"}`, n)),
			Generation: 3, Phase: "Reconciling",
		},
		Config:   json.RawMessage(`{"endpoint":"https://cloud.internal","pool_size":8}`),
		Deadline: deadline,
	}
}

// withCallback is env with the callback the dispatcher gives it.
func withCallback(env webhooksdk.Envelope) webhooksdk.Envelope {
	env.Callback = wire.Callback(cbBase, env.TaskID, token(env.TaskID))
	return env
}

// single is the body and webhook-id of env delivered alone, as the
// dispatcher encodes it (thin over limit; 0: no limit).
func single(env webhooksdk.Envelope, limit int) ([]byte, string) {
	env = withCallback(env)
	var buf bytes.Buffer
	must(wire.AppendEnvelope(&buf, &env, cbBase, limit))
	return buf.Bytes(), wire.MessageID(model.Task{ID: env.TaskID, ClaimEpoch: env.ClaimEpoch})
}

// batch is the body and webhook-id of envs delivered together.
func batch(limit int, envs ...webhooksdk.Envelope) ([]byte, string) {
	tasks := make([]model.Task, len(envs))
	for i := range envs {
		envs[i] = withCallback(envs[i])
		tasks[i] = model.Task{ID: envs[i].TaskID, ClaimEpoch: envs[i].ClaimEpoch}
	}
	var buf bytes.Buffer
	must(wire.AppendBatch(&buf, envs, cbBase, limit))
	return buf.Bytes(), wire.BatchID(tasks)
}

// signed is the HTTP request the dispatcher's HTTPS transport sends for
// body, signed at ts with secrets (both during a rotation, as the registry
// signs), with traceparent tp ("" for a health probe).
func signed(body []byte, msgID string, ts time.Time, tp string, secrets ...string) protocol.Request {
	signer, err := webhooksdk.NewSigner(secrets...)
	must(err)
	d := &transport.Delivery{MsgID: msgID, Timestamp: ts, Body: body, Signature: signer.Sign(msgID, ts, body), TraceParent: tp}
	var req protocol.Request
	capture := roundTrip(func(r *http.Request) (*http.Response, error) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		s := string(b)
		req = protocol.Request{Method: r.Method, Headers: lowerHeaders(r.Header), Body: &s}
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Header: http.Header{}}, nil
	})
	_, err = transport.NewHTTPS(&http.Client{Transport: capture}, targetURL, userAgent, 1<<20).Deliver(context.Background(), d)
	must(err)
	return req
}

// invoke is the Lambda Invoke event the dispatcher's lambda transport sends
// for body (event: an Event invocation).
func invoke(body []byte, msgID string, tp string, event bool) protocol.Request {
	signer, err := webhooksdk.NewSigner(secretA)
	must(err)
	payload, err := transport.EncodeEvent(&transport.Delivery{MsgID: msgID, Timestamp: signedAt, Body: body,
		Signature: signer.Sign(msgID, signedAt, body), TraceParent: tp}, event)
	must(err)
	return protocol.Request{Event: bytes.TrimSuffix(payload, []byte("\n"))}
}

// functionURL is the Function URL event AWS makes of the dispatcher's
// HTTPS request r: the body base64-encoded, the method in requestContext.
func functionURL(r protocol.Request) protocol.Request {
	ev := map[string]any{
		"version": "2.0", "rawPath": "/converge", "rawQueryString": "", "headers": r.Headers,
		"requestContext":  map[string]any{"http": map[string]any{"method": r.Method, "path": "/converge"}},
		"body":            base64.StdEncoding.EncodeToString([]byte(*r.Body)),
		"isBase64Encoded": true,
	}
	return protocol.Request{Event: mustJSON(ev)}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// lowerHeaders is h with lower-case names, several values joined by ", ".
func lowerHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		out[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return out
}

// result is the Result body of env's task with outcome or failure.
func result(env webhooksdk.Envelope, out *webhooksdk.Outcome, fail *protocol.Error) json.RawMessage {
	r := webhooksdk.Result{TaskID: env.TaskID, ClaimEpoch: env.ClaimEpoch, Outcome: out}
	if fail != nil {
		r.Error = &webhooksdk.Error{Message: fail.Message, Terminal: fail.Terminal}
	}
	return mustJSON(r)
}

// returns is the behaviour of a handler returning out after wait.
func returns(out *webhooksdk.Outcome, wait string, sees map[string]json.RawMessage) protocol.Behaviour {
	return protocol.Behaviour{Wait: wait, Outcome: mustJSON(out), Sees: sees}
}

// fails is the behaviour of a handler failing with fail after wait.
func fails(fail *protocol.Error, wait string) protocol.Behaviour {
	return protocol.Behaviour{Wait: wait, Error: fail}
}

// sees is what the handler of env must receive: the claim and the
// documents.
func sees(env webhooksdk.Envelope, fields ...string) map[string]json.RawMessage {
	all := map[string]any{
		"task_id": env.TaskID, "claim_epoch": env.ClaimEpoch, "attempt": env.Attempt, "kind_version": env.KindVersion,
		"reaction": env.Reaction, "trigger": env.Trigger, "task_type": env.TaskType, "resource": env.Resource,
		"config": env.Config, "operation": env.Operation, "transition": env.Transition, "dedup_token": env.DedupToken,
	}
	out := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		v, ok := all[f]
		if !ok {
			panic("sees: unknown field " + f)
		}
		out[f] = mustJSON(v)
	}
	return out
}

// seesTask is what every worker task's handler must receive.
func seesTask(env webhooksdk.Envelope) map[string]json.RawMessage {
	return sees(env, "task_id", "claim_epoch", "attempt", "kind_version", "reaction", "trigger", "task_type", "resource", "config")
}

// callbackCall is the callback POST of env's Result body, answered a.
func callbackCall(env webhooksdk.Envelope, body json.RawMessage, tp string, a protocol.Scripted) protocol.Call {
	cb := wire.Callback(cbBase, env.TaskID, token(env.TaskID))
	return protocol.Call{Method: http.MethodPost, URL: cb.URL, Headers: outgoingHeaders(env, tp, true), Body: body, Answer: a}
}

// outgoingHeaders are the headers an SDK's request for env's task must
// carry: its bearer token, the delivery's traceparent, and a JSON
// content type on a POST.
func outgoingHeaders(env webhooksdk.Envelope, tp string, post bool) map[string]string {
	h := map[string]string{"authorization": "Bearer " + token(env.TaskID)}
	if post {
		h["content-type"] = "application/json"
	}
	if tp != "" {
		h["traceparent"] = tp
	}
	return h
}

// applied is the dispatcher's answer to a callback it applied.
var applied = protocol.Scripted{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"}, Body: `{"result":"applied"}`}

// problem is the dispatcher's problem answer with status and detail.
func problem(status int, typ, detail string) protocol.Scripted {
	return protocol.Scripted{Status: status, Headers: map[string]string{"content-type": "application/problem+json"},
		Body: string(mustJSON(map[string]any{"type": "urn:converge:problem:" + typ, "title": http.StatusText(status), "status": status, "detail": detail}))}
}

// refused is the answer expected for a request refused with status.
func refused(status int) protocol.Answer { return protocol.Answer{Status: status, Problem: true} }

// ok is a 200 answer with a JSON body.
func ok(body json.RawMessage, ignore ...string) protocol.Answer {
	return protocol.Answer{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"}, Body: body, Ignore: ignore}
}

func mustJSON(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	must(enc.Encode(v))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// must panics on err: every input of the generator is fixed, so an error
// is a bug of the generator itself.
func must(err error) {
	if err != nil {
		panic(err)
	}
}
