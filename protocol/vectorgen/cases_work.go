package main

import (
	"encoding/json"
	"net/http"

	"github.com/convergeplane/converge/protocol"
	"github.com/convergeplane/converge/webhooksdk"
)

// served is a vector in which env, delivered alone, gets to a handler
// behaving as b, answered inline with the Result of out or fail.
func served(name, section, description string, env webhooksdk.Envelope, b protocol.Behaviour, out *webhooksdk.Outcome, fail *protocol.Error) protocol.Vector {
	body, id := single(env, 0)
	v := newVector(name, section, description)
	v.Handlers = map[string]protocol.Behaviour{env.TaskID: b}
	v.Request = signed(body, id, signedAt, traceparent, secretA)
	v.Expect = ok(result(env, out, fail))
	return v
}

func resultCases() []protocol.Vector {
	env := vpcTask(10)
	transient := &protocol.Error{Message: "cloud API quota exceeded", Terminal: false}
	terminal := &protocol.Error{Message: "cidr 10.10.0.0/16 overlaps vpc team-red", Terminal: true}
	empty := &webhooksdk.Outcome{}

	op := vpcTask(11)
	op.TaskType, op.Reaction, op.Trigger = webhooksdk.TaskOperate, "resize", webhooksdk.TriggerOperation
	op.Operation = &webhooksdk.Operation{Verb: "resize", Input: json.RawMessage(`{"size":3}`)}
	opOut := &webhooksdk.Outcome{OperationOutput: json.RawMessage(`{"resized":true,"size":3}`)}

	del := vpcTask(12)
	del.TaskType, del.Reaction, del.Trigger = webhooksdk.TaskDelete, "teardown", webhooksdk.TriggerDeleteRequested
	del.Resource.Phase = "Deleting"
	del.Resource.Status = json.RawMessage(`{"vpc_id":"vpc-0a1b2c3d"}`)

	react := vpcTask(13)
	react.TaskType, react.Reaction, react.Trigger = webhooksdk.TaskReact, "notify", webhooksdk.TriggerReactor
	react.Transition = webhooksdk.TransitionCreated
	react.DedupToken = react.Resource.ID + ":created:3:notify"
	react.Config = nil
	reactOut := &webhooksdk.Outcome{SideEffectDone: true}

	compose := vpcTask(14)
	compose.Reaction = "compose"
	composeOut := &webhooksdk.Outcome{
		Status: json.RawMessage(`{"subnets":2}`),
		Children: []webhooksdk.Child{
			{Kind: "subnet", KindVersion: 1, Name: "net-14-a", Labels: map[string]string{"zone": "a"}, Spec: json.RawMessage(`{"cidr":"10.14.0.0/24"}`)},
			{Kind: "route", KindVersion: 2, Name: "net-14-default", Spec: json.RawMessage(`{"to":"0.0.0.0/0"}`)},
		},
		Edges: []webhooksdk.Edge{{
			Dependent:  webhooksdk.Ref{Kind: "route", Name: "net-14-default"},
			Dependency: webhooksdk.Ref{Kind: "subnet", Name: "net-14-a"},
			Values:     []webhooksdk.ValueFlow{{DependentField: "/subnet_id", SourceField: "/subnet_id"}},
		}},
		Configs: []webhooksdk.Config{{Name: "net-14-routes", Kind: "route", KindVersion: 2, Spec: json.RawMessage(`{"mtu":9001}`), Data: []byte("PK")}},
	}

	return []protocol.Vector{
		served("result-transient-error", "§7.1", "A handler failing with an ordinary error is answered inline with a transient error Result (terminal false): the dispatcher retries.",
			env, fails(transient, protocol.WaitNone), nil, transient),
		served("result-terminal-error", "§7.1", "A handler failing with a terminal error is answered with \"terminal\": true, which pins the resource Failed.",
			env, fails(terminal, protocol.WaitNone), nil, terminal),
		served("result-empty-outcome", "§7.1", "A success with nothing to apply is the outcome {}.",
			env, returns(empty, protocol.WaitNone, seesTask(env)), empty, nil),
		served("result-composer", "§7.2", "A composer's children, edges and configs travel in the outcome as the handler returned them.",
			compose, returns(composeOut, protocol.WaitNone, seesTask(compose)), composeOut, nil),
		served("verb-operation", "§7.3", "An operator verb: the handler sees the operation's verb and input, and its operation_output is the Result's.",
			op, returns(opOut, protocol.WaitNone, sees(op, "task_id", "task_type", "reaction", "trigger", "operation", "resource")), opOut, nil),
		served("verb-teardown", "§7.3", "A teardown (delete task, trigger deleteRequested): the handler sees the resource Deleting with its last status; a success removes the finalizer.",
			del, returns(empty, protocol.WaitNone, sees(del, "task_id", "task_type", "reaction", "trigger", "resource")), empty, nil),
		served("verb-reactor", "§12", "A reactor task: the handler sees the transition and the dedup_token, and reports its side effect done.",
			react, returns(reactOut, protocol.WaitNone, sees(react, "task_id", "task_type", "reaction", "trigger", "transition", "dedup_token", "resource")), reactOut, nil),
	}
}

// async is a vector in which env's handler behaves as b past the short sync
// budget, so the task is answered 202 and its Result goes out as calls say.
func async(name, section, description string, env webhooksdk.Envelope, b protocol.Behaviour, calls ...protocol.Call) protocol.Vector {
	body, id := single(env, 0)
	v := newVector(name, section, description)
	v.Setup.SyncBudgetMS = asyncBudgetMS
	v.Handlers = map[string]protocol.Behaviour{env.TaskID: b}
	v.Request = signed(body, id, signedAt, traceparent, secretA)
	v.Expect = protocol.Answer{Status: http.StatusAccepted}
	v.Outgoing = calls
	return v
}

func asyncCases() []protocol.Vector {
	env := vpcTask(20)
	terminal := &protocol.Error{Message: "cidr 10.20.0.0/16 overlaps vpc team-red", Terminal: true}
	done := result(env, created, nil)
	superseded := problem(http.StatusConflict, "conflict", "task superseded: this claim no longer holds it; the result was not applied")

	beat := async("async-heartbeat-superseded", "§9", "While work runs asynchronously the SDK heartbeats (POST …/heartbeat with the token and {task_id, claim_epoch}); a 409 means another claim took the task over: the SDK cancels the handler's work and sends no Result.",
		env, protocol.Behaviour{Wait: protocol.WaitCancelled},
		protocol.Call{Method: http.MethodPost, URL: cbBase + "/v1/tasks/" + env.TaskID + "/heartbeat", Headers: outgoingHeaders(env, traceparent, true),
			Body: mustJSON(map[string]any{"task_id": env.TaskID, "claim_epoch": env.ClaimEpoch}), Answer: superseded})
	beat.Setup.HeartbeatEveryMS = heartbeatFastMS

	batched := async("async-callback-batched", "§8.1", "An SDK that batches callbacks POSTs the Result to callback.batch_url as one item carrying its own token, with no Authorization header, and reads the per-item answer.",
		env, returns(created, protocol.WaitAnswered, nil),
		protocol.Call{Method: http.MethodPost, URL: cbBase + "/v1/tasks/outcomes", Headers: map[string]string{"content-type": "application/json", "traceparent": traceparent},
			Body: mustJSON(webhooksdk.CallbackBatch{Outcomes: []webhooksdk.CallbackItem{{Token: token(env.TaskID), Result: done}}}),
			Answer: protocol.Scripted{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"},
				Body: string(mustJSON(webhooksdk.CallbackBatchAnswer{Results: []webhooksdk.CallbackItemAnswer{{TaskID: env.TaskID, Status: http.StatusOK, Result: "applied"}}}))}})
	batched.Features = []string{protocol.FeatureCallbackBatch}
	batched.Setup.CallbackBatch = true

	return []protocol.Vector{
		async("async-callback-applied", "§8", "A handler still running when the sync budget ends: the SDK answers 202 at once, then POSTs the Result to callback.url with the bearer token and the delivery's traceparent; 200 applied ends it.",
			env, returns(created, protocol.WaitAnswered, seesTask(env)),
			callbackCall(env, done, traceparent, applied)),
		async("async-callback-terminal-error", "§8", "An asynchronous failure is posted to the callback like a success: the error Result, terminal as the handler said.",
			env, fails(terminal, protocol.WaitAnswered),
			callbackCall(env, result(env, nil, terminal), traceparent, applied)),
		async("async-callback-superseded", "§8", "A callback answered 409 (superseded) is not retried: the SDK drops the Result.",
			env, returns(created, protocol.WaitAnswered, nil),
			callbackCall(env, done, traceparent, superseded)),
		async("async-callback-rejected", "§8", "A callback answered 400 is not retried: the same body cannot succeed.",
			env, returns(created, protocol.WaitAnswered, nil),
			callbackCall(env, done, traceparent, problem(http.StatusBadRequest, "validation", "malformed result"))),
		async("async-callback-retried", "§8", "A callback answered 503 is retried (with backoff) until it is applied.",
			env, returns(created, protocol.WaitAnswered, nil),
			callbackCall(env, done, traceparent, problem(http.StatusServiceUnavailable, "unavailable", "database unavailable")),
			callbackCall(env, done, traceparent, applied)),
		async("async-callback-throttled", "§8", "A callback answered 429 is retried, like a 5xx, until it is applied; a duplicate answer also ends it.",
			env, returns(created, protocol.WaitAnswered, nil),
			callbackCall(env, done, traceparent, problem(http.StatusTooManyRequests, "too-many-requests", "slow down")),
			callbackCall(env, done, traceparent, protocol.Scripted{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"}, Body: `{"result":"duplicate"}`})),
		async("async-callback-unauthorized", "§8", "A callback answered 401 (a bad or expired token) is not retried.",
			env, returns(created, protocol.WaitAnswered, nil),
			callbackCall(env, done, traceparent, problem(http.StatusUnauthorized, "unauthorized", "callback token refused"))),
		beat,
		batched,
	}
}
