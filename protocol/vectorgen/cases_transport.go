package main

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/convergeplane/converge/dispatch/wire"
	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
)

// thinLimit is a request limit every test envelope is over, so each is sent
// thin.
const thinLimit = 64

// fetchCall is the GET of env's payload_url, answered a.
func fetchCall(env webhooksdk.Envelope, a protocol.Scripted) protocol.Call {
	return protocol.Call{Method: http.MethodGet, URL: wire.PayloadURL(cbBase, env.TaskID), Headers: outgoingHeaders(env, traceparent, false), Answer: a}
}

// payload is the dispatcher's 200 answer to env's payload fetch: the whole
// envelope without callback and payload_url.
func payload(env webhooksdk.Envelope) protocol.Scripted {
	env.Type = webhooksdk.EnvelopeTask
	return protocol.Scripted{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"}, Body: string(mustJSON(env))}
}

// thinServed is a vector delivering env thin, its fetch answered a.
func thinServed(name, description string, env webhooksdk.Envelope, a protocol.Scripted) protocol.Vector {
	body, id := single(env, thinLimit)
	v := newVector(name, "§5.1", description)
	v.Request = signed(body, id, signedAt, traceparent, secretA)
	v.Outgoing = []protocol.Call{fetchCall(env, a)}
	return v
}

func thinCases() []protocol.Vector {
	env := vpcTask(30)
	fetched := thinServed("thin-payload-fetched", "A thin envelope (payload_url, no documents): the SDK GETs payload_url with the callback token before calling the handler, which sees the fetched resource and config.",
		env, payload(env))
	fetched.Handlers = map[string]protocol.Behaviour{env.TaskID: returns(created, protocol.WaitNone, seesTask(env))}
	fetched.Expect = ok(result(env, created, nil))

	failed := func(name, description string, a protocol.Scripted) protocol.Vector {
		v := thinServed(name, description, env, a)
		v.Expect = ok(result(env, nil, &protocol.Error{Message: "(the SDK's words)"}), "/error/message")
		return v
	}
	slow := vpcTask(31)
	async := thinServed("thin-payload-async", "A thin envelope whose handler outlasts the sync budget: the SDK fetches the payload, answers 202, and posts the Result to the callback.",
		slow, payload(slow))
	async.Setup.SyncBudgetMS = asyncBudgetMS
	async.Handlers = map[string]protocol.Behaviour{slow.TaskID: returns(created, protocol.WaitAnswered, seesTask(slow))}
	async.Expect = protocol.Answer{Status: http.StatusAccepted}
	async.Outgoing = append(async.Outgoing, callbackCall(slow, result(slow, created, nil), traceparent, applied))

	return []protocol.Vector{
		fetched,
		async,
		failed("thin-payload-gone", "A payload fetch answered 410 (the resource is gone) is not worked on: the task is answered with a transient error Result; the handler never runs.",
			problem(http.StatusGone, "gone", "resource deleted")),
		failed("thin-payload-unauthorized", "A payload fetch answered 401 becomes a transient error Result; the handler never runs.",
			problem(http.StatusUnauthorized, "unauthorized", "bad or expired token")),
		failed("thin-payload-superseded", "A payload fetch answered 409 (the claim no longer holds the task): the handler never runs; inline, the answer is a transient error Result, which the dispatcher discards.",
			problem(http.StatusConflict, "conflict", "task superseded")),
	}
}

func batchCases() []protocol.Vector {
	ok1, fail2, term3 := vpcTask(40), vpcTask(41), vpcTask(42)
	transient := &protocol.Error{Message: "cloud API quota exceeded"}
	terminal := &protocol.Error{Message: "cidr 10.42.0.0/16 overlaps vpc team-red", Terminal: true}
	body, id := batch(0, ok1, fail2, term3)
	mixed := newVector("batch-mixed", "§16", "A batch of three tasks, signed once over the whole body: each reaches the handler, and the answer is 200 with one result per task: an outcome, a transient error, a terminal error.")
	mixed.Handlers = map[string]protocol.Behaviour{
		ok1.TaskID:   returns(created, protocol.WaitNone, seesTask(ok1)),
		fail2.TaskID: fails(transient, protocol.WaitNone),
		term3.TaskID: fails(terminal, protocol.WaitNone),
	}
	mixed.Request = signed(body, id, signedAt, traceparent, secretA)
	mixed.Expect = ok(batchAnswer(result(ok1, created, nil), result(fail2, nil, transient), result(term3, nil, terminal)))

	bad := newVector("batch-bad-signature", "§16.2", "A batch whose signature does not verify is refused whole (401); no task reaches the handler.")
	bad.Request = signed(body, id, signedAt, traceparent, secretB)
	bad.Expect = refused(http.StatusUnauthorized)

	fast, slow := vpcTask(43), vpcTask(44)
	body, id = batch(0, fast, slow)
	acc := newVector("batch-accepted", "§16.3", "A batch with a task still running at the end of the sync budget: that task is answered accepted in the batch response and its Result goes to its own callback, with its own token.")
	acc.Setup.SyncBudgetMS = asyncBudgetMS
	acc.Handlers = map[string]protocol.Behaviour{
		fast.TaskID: returns(created, protocol.WaitNone, nil),
		slow.TaskID: returns(created, protocol.WaitAnswered, seesTask(slow)),
	}
	acc.Request = signed(body, id, signedAt, traceparent, secretA)
	acc.Expect = ok(batchAnswer(result(fast, created, nil), mustJSON(webhooksdk.BatchResult{Result: webhooksdk.Result{TaskID: slow.TaskID, ClaimEpoch: slow.ClaimEpoch}, Accepted: true})))
	acc.Outgoing = []protocol.Call{callbackCall(slow, result(slow, created, nil), traceparent, applied)}

	served, stray := vpcTask(45), vpcTask(46)
	stray.Kind = "subnet"
	stray.Resource.Kind = "subnet"
	body, id = batch(0, served, stray)
	unknown := newVector("batch-unknown-kind", "§16.5", "A task of a batch that the SDK would refuse alone (here 404: no provider for its kind) is answered in the batch with a transient error; its neighbours are served.")
	unknown.Handlers = map[string]protocol.Behaviour{served.TaskID: returns(created, protocol.WaitNone, nil)}
	unknown.Request = signed(body, id, signedAt, traceparent, secretA)
	unknown.Expect = ok(batchAnswer(result(served, created, nil), result(stray, nil, &protocol.Error{Message: "(the SDK's words)"})), "/results/1/error/message")

	small, big := vpcTask(47), vpcTask(48)
	big.Resource.Spec = json.RawMessage(`{"cidr":"10.48.0.0/16","region":"eu-west-1","note":"` + strings.Repeat("x", 600) + `"}`)
	alone, _ := single(small, 0)
	// Each envelope's share of the limit takes the small one, not the big one.
	body, id = batch(2*(len(alone)+64), small, big)
	thin := newVector("batch-thin-item", "§16.2", "In a batch, an envelope over its share of the request limit is sent thin: the SDK fetches that task's payload with that task's token; the other is served as sent.")
	thin.Handlers = map[string]protocol.Behaviour{
		small.TaskID: returns(created, protocol.WaitNone, seesTask(small)),
		big.TaskID:   returns(created, protocol.WaitNone, seesTask(big)),
	}
	thin.Request = signed(body, id, signedAt, traceparent, secretA)
	thin.Expect = ok(batchAnswer(result(small, created, nil), result(big, created, nil)))
	thin.Outgoing = []protocol.Call{fetchCall(big, payload(big))}
	if !strings.Contains(*thin.Request.Body, `"payload_url"`) || strings.Count(*thin.Request.Body, `"payload_url"`) != 1 {
		panic("batch-thin-item: want exactly one thin envelope")
	}
	return []protocol.Vector{mixed, bad, acc, unknown, thin}
}

// batchAnswer is a batch response of results, in task order.
func batchAnswer(results ...json.RawMessage) json.RawMessage {
	return mustJSON(webhooksdk.BatchResponse{Type: webhooksdk.EnvelopeBatch, Results: results})
}

// probe is the dispatcher's health probe, signed with secret A.
func probe() protocol.Request {
	body := mustJSON(webhooksdk.Envelope{Type: webhooksdk.EnvelopeHealth})
	return signed(body, "msg_probe_1", signedAt, "", secretA)
}

// healthAnswer is the health answer listing kinds.
func healthAnswer(kinds ...webhooksdk.KindReadiness) json.RawMessage {
	return mustJSON(webhooksdk.HealthResponse{Kinds: kinds})
}

func healthCases() []protocol.Vector {
	h := newVector("health-probe", "§10", "A signed health probe is answered 200 with one entry per (kind, kind_version) served and its readiness.")
	h.Setup.Providers = append(h.Setup.Providers, protocol.Provider{Kind: "vpc", KindVersion: 2, Ready: false})
	h.Request = probe()
	h.Expect = ok(healthAnswer(webhooksdk.KindReadiness{Kind: "vpc", KindVersion: 1, Ready: true}, webhooksdk.KindReadiness{Kind: "vpc", KindVersion: 2, Ready: false}))

	bad := newVector("health-bad-signature", "§10", "A health probe is verified like a task: a wrong signature is refused 401.")
	bad.Setup.Secrets = []string{secretB}
	bad.Request = probe()
	bad.Expect = refused(http.StatusUnauthorized)
	return []protocol.Vector{h, bad}
}

// lambdaVector is a vector for the SDK's Lambda adapter.
func lambdaVector(name, section, description string) protocol.Vector {
	v := newVector(name, section, description)
	v.Setup.Transport = protocol.TransportLambda
	return v
}

func lambdaCases() []protocol.Vector {
	env := vpcTask(50)
	body, id := single(env, 0)
	done := result(env, created, nil)

	sync := lambdaVector("lambda-invoke-sync", "§15.1", "The dispatcher's RequestResponse Invoke event (version converge.v1, the envelope as the body string): verified and served like HTTPS, answered with a response object whose body is the Result.")
	sync.Handlers = map[string]protocol.Behaviour{env.TaskID: returns(created, protocol.WaitNone, seesTask(env))}
	sync.Request = invoke(body, id, traceparent, false)
	sync.Expect = ok(done)

	event := lambdaVector("lambda-invoke-event", "§15.1", "An Event invoke (x-converge-invocation: event): nobody reads the answer, so the adapter posts the Result to the callback before it returns, then answers 202.")
	event.Handlers = map[string]protocol.Behaviour{env.TaskID: returns(created, protocol.WaitNone, seesTask(env))}
	event.Request = invoke(body, id, traceparent, true)
	event.Expect = protocol.Answer{Status: http.StatusAccepted}
	event.Outgoing = []protocol.Call{callbackCall(env, done, traceparent, applied)}

	badSync := lambdaVector("lambda-invoke-sync-bad-signature", "§15.1", "A sync Invoke event whose signature does not verify is answered like HTTPS: a response object with statusCode 401.")
	badSync.Setup.Secrets = []string{secretB}
	badSync.Request = invoke(body, id, traceparent, false)
	badSync.Expect = refused(http.StatusUnauthorized)

	badEvent := lambdaVector("lambda-invoke-event-bad-signature", "§15.1", "An Event invoke that is refused (here: the signature does not verify) fails the invocation with a function error, which Lambda counts and retries, rather than returning an answer nobody reads.")
	badEvent.Setup.Secrets = []string{secretB}
	badEvent.Request = invoke(body, id, traceparent, true)
	badEvent.Expect = protocol.Answer{FunctionError: true}

	url := lambdaVector("lambda-function-url", "§15.2", "A Function URL event (version 2.0, the body base64-encoded, the method in requestContext): decoded, verified and served like HTTPS.")
	url.Handlers = map[string]protocol.Behaviour{env.TaskID: returns(created, protocol.WaitNone, seesTask(env))}
	url.Request = functionURL(signed(body, id, signedAt, traceparent, secretA))
	url.Expect = ok(done)

	one, two := vpcTask(51), vpcTask(52)
	terminal := &protocol.Error{Message: "cidr 10.52.0.0/16 overlaps vpc team-red", Terminal: true}
	bbody, bid := batch(0, one, two)
	b := lambdaVector("lambda-invoke-batch", "§16.5", "A batch in one sync Invoke event: the response object's body is the batch response.")
	b.Handlers = map[string]protocol.Behaviour{
		one.TaskID: returns(created, protocol.WaitNone, seesTask(one)),
		two.TaskID: fails(terminal, protocol.WaitNone),
	}
	b.Request = invoke(bbody, bid, traceparent, false)
	b.Expect = ok(batchAnswer(result(one, created, nil), result(two, nil, terminal)))

	health := lambdaVector("lambda-invoke-health", "§15.6", "A health probe as a sync Invoke event is answered like an HTTPS probe.")
	hb := mustJSON(webhooksdk.Envelope{Type: webhooksdk.EnvelopeHealth})
	health.Request = invoke(hb, "msg_probe_1", "", false)
	health.Expect = ok(healthAnswer(webhooksdk.KindReadiness{Kind: "vpc", KindVersion: 1, Ready: true}))

	return []protocol.Vector{sync, event, badSync, badEvent, url, b, health}
}
