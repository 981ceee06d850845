package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
)

// created is the outcome of a worker that created its VPC.
var created = &webhooksdk.Outcome{
	Status:     json.RawMessage(`{"vpc_id":"vpc-0a1b2c3d"}`),
	Conditions: []webhooksdk.Condition{{Type: "Ready", Status: "True", Reason: "Created"}},
}

// cases returns every vector.
func cases() ([]protocol.Vector, error) {
	var vs []protocol.Vector
	for _, group := range [][]protocol.Vector{signatureCases(), envelopeCases(), resultCases(), asyncCases(),
		thinCases(), batchCases(), healthCases(), lambdaCases()} {
		vs = append(vs, group...)
	}
	return vs, nil
}

// inlineSuccess is a vector whose request is signed as req says and whose
// SDK, holding secrets, answers the standard task inline with created.
func inlineSuccess(name, description string, secrets []string, req func(body []byte, id string) protocol.Request) protocol.Vector {
	env := vpcTask(10)
	body, id := single(env, 0)
	v := newVector(name, "§3", description)
	v.Setup.Secrets = secrets
	v.Handlers = map[string]protocol.Behaviour{env.TaskID: returns(created, protocol.WaitNone, seesTask(env))}
	v.Request = req(body, id)
	v.Expect = ok(result(env, created, nil))
	return v
}

// unauthorized is a vector whose request, signed as req says, the SDK
// holding secrets refuses with 401 before any handler runs.
func unauthorized(name, description string, secrets []string, req func(body []byte, id string) protocol.Request) protocol.Vector {
	body, id := single(vpcTask(10), 0)
	v := newVector(name, "§3.3", description)
	v.Setup.Secrets = secrets
	v.Request = req(body, id)
	v.Expect = refused(http.StatusUnauthorized)
	return v
}

// signedWith signs at ts offset by skew with secrets.
func signedWith(skew time.Duration, secrets ...string) func([]byte, string) protocol.Request {
	return func(body []byte, id string) protocol.Request {
		return signed(body, id, signedAt.Add(skew), traceparent, secrets...)
	}
}

// tampered is a request signed with secret A whose headers or body edit
// then changes.
func tampered(edit func(r *protocol.Request)) func([]byte, string) protocol.Request {
	return func(body []byte, id string) protocol.Request {
		r := signed(body, id, signedAt, traceparent, secretA)
		edit(&r)
		return r
	}
}

func signatureCases() []protocol.Vector {
	a, b, ab := []string{secretA}, []string{secretB}, []string{secretA, secretB}
	vs := []protocol.Vector{
		inlineSuccess("sig-valid", "A task signed with the secret the SDK holds verifies, reaches the handler with the envelope's fields, and its outcome is answered inline: 200 with the Result (docs/protocol.md §13's worked example).",
			a, signedWith(0, secretA)),
		inlineSuccess("sig-timestamp-at-tolerance", "A timestamp exactly the tolerance (300 s) old is still accepted.",
			a, signedWith(-tolerance*time.Second, secretA)),
		inlineSuccess("sig-rotation-old-secret-held", "During a rotation the dispatcher sends two signatures; an SDK holding only the old secret accepts.",
			a, signedWith(0, secretA, secretB)),
		inlineSuccess("sig-rotation-new-secret-held", "During a rotation the dispatcher sends two signatures; an SDK holding only the new secret accepts.",
			b, signedWith(0, secretA, secretB)),
		inlineSuccess("sig-rotation-two-secrets-held", "An SDK holding two secrets accepts a request signed with either; here the second.",
			ab, signedWith(0, secretB)),
		inlineSuccess("sig-unknown-version-ignored", "Signature entries of an unknown version are ignored; a valid v1 entry beside one verifies.",
			a, tampered(func(r *protocol.Request) {
				r.Headers["webhook-signature"] = "v2,c2lnbmF0dXJlLW9mLWEtZnV0dXJlLXNjaGVtZQ== " + r.Headers["webhook-signature"]
			})),
		unauthorized("sig-wrong-secret", "A request signed with a secret the SDK does not hold is refused 401; the handler never runs.",
			a, signedWith(0, secretB)),
		unauthorized("sig-tampered-body", "A body changed after signing does not verify: 401.",
			a, tampered(func(r *protocol.Request) {
				s := strings.Replace(*r.Body, "10.10.0.0/16", "10.99.0.0/16", 1)
				r.Body = &s
			})),
		unauthorized("sig-stale-timestamp", "A timestamp more than the tolerance (300 s) in the past is refused, even with a valid signature: 401.",
			a, signedWith(-(tolerance+1)*time.Second, secretA)),
		unauthorized("sig-future-timestamp", "A timestamp more than the tolerance (300 s) in the future is refused, even with a valid signature: 401.",
			a, signedWith((tolerance+1)*time.Second, secretA)),
		unauthorized("sig-non-numeric-timestamp", "A webhook-timestamp that is not an integer is refused: 401.",
			a, tampered(func(r *protocol.Request) { r.Headers["webhook-timestamp"] = strconv.Itoa(now) + "abc" })),
		unauthorized("sig-timestamp-not-canonical", "A webhook-timestamp with a leading zero is refused (401), though its number is the one signed: the signature covers the header's text, which must be digits without a sign or a leading zero.",
			a, tampered(func(r *protocol.Request) { r.Headers["webhook-timestamp"] = "0" + r.Headers["webhook-timestamp"] })),
		unauthorized("sig-only-unknown-version", "A signature header with no v1 entry verifies nothing: 401.",
			a, tampered(func(r *protocol.Request) {
				r.Headers["webhook-signature"] = "v2," + strings.TrimPrefix(r.Headers["webhook-signature"], "v1,")
			})),
	}
	for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		vs = append(vs, unauthorized("sig-missing-"+h, "A request without the "+h+" header is refused: 401.",
			a, tampered(func(r *protocol.Request) { delete(r.Headers, h) })))
	}
	return vs
}

// envelopeRefused is a vector whose envelope, signed properly, the SDK
// refuses with status.
func envelopeRefused(name, description string, status int, body []byte, id string) protocol.Vector {
	v := newVector(name, "§5", description)
	v.Request = signed(body, id, signedAt, traceparent, secretA)
	v.Expect = refused(status)
	return v
}

func envelopeCases() []protocol.Vector {
	noTaskID := vpcTask(10)
	noTaskID.TaskID = ""
	badVersion := vpcTask(10)
	badVersion.KindVersion = webhooksdk.MaxKindVersion + 1
	thinNoCallback := vpcTask(10)
	thinNoCallback.PayloadURL = cbBase + "/v1/tasks/" + thinNoCallback.TaskID
	thinNoCallback.Resource, thinNoCallback.Config = nil, nil
	noURL := vpcTask(10)
	noURL.Callback = &webhooksdk.Callback{Token: token(noURL.TaskID)}
	var noURLBody bytes.Buffer
	must(wire.AppendEnvelope(&noURLBody, &noURL, cbBase, 0))
	otherKind := vpcTask(10)
	otherKind.Kind = "subnet"

	body, id := single(vpcTask(10), 0)
	body0 := func(env webhooksdk.Envelope) []byte {
		b, _ := single(env, 0)
		return b
	}
	thinNoCallback.Type = webhooksdk.EnvelopeTask
	notReady := envelopeRefused("env-provider-not-ready", "A task for a provider that reports itself unready is refused 503 with a Retry-After, never failed: the dispatcher retries.",
		http.StatusServiceUnavailable, body, id)
	notReady.Setup.Providers[0].Ready = false
	notReady.Expect.HeadersPresent = []string{"retry-after"}

	unknownField := strings.Replace(string(body), `{"type":"task",`, `{"type":"task","field_of_a_later_version":{"x":[1,2]},`, 1)
	env := vpcTask(10)
	future := newVector("env-unknown-field-ignored", "§14", "A field the SDK does not know is ignored: the task is served as usual.")
	future.Handlers = map[string]protocol.Behaviour{env.TaskID: returns(created, protocol.WaitNone, seesTask(env))}
	future.Request = signed([]byte(unknownField), id, signedAt, traceparent, secretA)
	future.Expect = ok(result(env, created, nil))

	get := newVector("env-method-not-post", "§2", "A method other than POST is answered 405 with Allow: POST.")
	get.Request = protocol.Request{Method: http.MethodGet, Headers: map[string]string{}}
	get.Expect = refused(http.StatusMethodNotAllowed)
	get.Expect.Headers = map[string]string{"allow": "POST"}

	return []protocol.Vector{
		envelopeRefused("env-not-json", "A signed body that is not JSON is refused 400.", http.StatusBadRequest, []byte("not json\n"), id),
		envelopeRefused("env-missing-task-id", "A task envelope without task_id is refused 400.", http.StatusBadRequest, body0(noTaskID), id),
		envelopeRefused("env-kind-version-out-of-range", "A kind_version outside 1..32767 is refused 400.", http.StatusBadRequest, body0(badVersion), id),
		envelopeRefused("env-payload-url-without-callback", "A thin envelope (payload_url) without a callback, whose token would fetch it, is refused 400.", http.StatusBadRequest, append(mustJSON(thinNoCallback), '\n'), id),
		envelopeRefused("env-callback-without-url", "A callback without a url, where no Result could be posted, is refused 400.", http.StatusBadRequest, noURLBody.Bytes(), id),
		envelopeRefused("env-batch-without-tasks", "A batch with no tasks is refused 400.", http.StatusBadRequest, []byte(`{"type":"batch","tasks":[]}`+"\n"), "msg_batch_00000000000000000000000000000000"),
		envelopeRefused("env-unknown-type", "An envelope type other than task, batch or health is refused 400.", http.StatusBadRequest, []byte(`{"type":"gossip"}`+"\n"), id),
		envelopeRefused("env-unknown-kind", "A task for a (kind, kind_version) the SDK does not serve is refused 404.", http.StatusNotFound, body0(otherKind), id),
		notReady,
		future,
		get,
	}
}
