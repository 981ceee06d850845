package protocol

import "encoding/json"

// Vector is one conformance case (protocol/vectors/README.md is its
// normative description): a request the dispatcher sends, the SDK's setup
// and handler behaviour, and what a conforming SDK answers and sends.
type Vector struct {
	// Name is the case's file name without ".json".
	Name string `json:"name"`
	// Description says what the case proves.
	Description string `json:"description"`
	// Section names the section of docs/protocol.md the case checks.
	Section string `json:"section"`
	// Features lists the optional protocol features the case needs (a MAY
	// of docs/protocol.md); empty for every case a conforming SDK must pass.
	Features []string `json:"features,omitempty"`
	// Setup configures the SDK under test.
	Setup Setup `json:"setup"`
	// Handlers says, per task_id, how the handler behaves; a task not
	// listed must not reach the handler.
	Handlers map[string]Behaviour `json:"handlers,omitempty"`
	// Request is what the dispatcher sends.
	Request Request `json:"request"`
	// Expect is the SDK's answer to Request.
	Expect Answer `json:"expect"`
	// Outgoing are the requests the SDK makes, in order, each with the
	// control plane's scripted answer.
	Outgoing []Call `json:"outgoing"`
}

// The values of [Setup.Transport].
const (
	// TransportHTTP: Request is an HTTP request to the SDK's HTTP handler.
	TransportHTTP = "http"
	// TransportLambda: Request.Event is an AWS Lambda event for the SDK's
	// Lambda adapter, and Expect its returned response object.
	TransportLambda = "lambda"
)

// FeatureCallbackBatch is the optional feature of batched callbacks
// (docs/protocol.md §8.1): an SDK without it sends each Result to its own
// callback.url.
const FeatureCallbackBatch = "callback_batch"

// Setup configures the SDK under test.
type Setup struct {
	// Transport is TransportHTTP or TransportLambda.
	Transport string `json:"transport"`
	// Secrets are the signing secrets the SDK holds.
	Secrets []string `json:"secrets"`
	// Now is what the SDK's clock reads, in Unix seconds: the time
	// webhook-timestamp is checked against.
	Now int64 `json:"now"`
	// ToleranceSeconds is the signature timestamp tolerance.
	ToleranceSeconds int `json:"tolerance_seconds"`
	// SyncBudgetMS is how long the SDK waits for the handler before
	// answering 202 (HTTP transport).
	SyncBudgetMS int `json:"sync_budget_ms"`
	// HeartbeatEveryMS is the SDK's heartbeat interval while work runs
	// asynchronously.
	HeartbeatEveryMS int `json:"heartbeat_every_ms"`
	// CallbackBatch: the SDK sends asynchronous Results to callback.batch_url
	// (docs/protocol.md §8.1). False: each to its own callback.url.
	CallbackBatch bool `json:"callback_batch"`
	// Providers are the (kind, kind_version) pairs the SDK serves.
	Providers []Provider `json:"providers"`
}

// Provider is one provider the SDK serves and whether it reports ready.
type Provider struct {
	Kind        string `json:"kind"`
	KindVersion int    `json:"kind_version"`
	Ready       bool   `json:"ready"`
}

// The values of [Behaviour.Wait].
const (
	// WaitNone: the handler finishes at once.
	WaitNone = ""
	// WaitAnswered: the handler finishes only once the SDK has answered the
	// request, so the task's answer is asynchronous.
	WaitAnswered = "answered"
	// WaitCancelled: the handler blocks until the SDK cancels its work,
	// then fails with the message "cancelled".
	WaitCancelled = "cancelled"
)

// Behaviour is how the handler behaves for one task.
type Behaviour struct {
	// Wait is WaitNone, WaitAnswered or WaitCancelled.
	Wait string `json:"wait,omitempty"`
	// Outcome, when set, is the outcome the handler returns.
	Outcome json.RawMessage `json:"outcome,omitempty"`
	// Error, when set, is the error the handler fails with.
	Error *Error `json:"error,omitempty"`
	// Sees holds envelope fields (docs/protocol.md §5 names) with the
	// values the handler must receive.
	Sees map[string]json.RawMessage `json:"sees,omitempty"`
}

// Error is a handler failure: its message, and whether it is terminal.
type Error struct {
	Message  string `json:"message"`
	Terminal bool   `json:"terminal"`
}

// Request is what the dispatcher sends: an HTTP request (Method, Headers,
// Body) or, for TransportLambda, the Lambda Event.
type Request struct {
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the exact request body.
	Body *string `json:"body,omitempty"`
	// Event is the Lambda event object.
	Event json.RawMessage `json:"event,omitempty"`
}

// Answer is the SDK's answer to the request.
type Answer struct {
	// Status is the HTTP status (a Lambda response's statusCode).
	Status int `json:"status,omitempty"`
	// Headers must be present with these values (names lower case).
	Headers map[string]string `json:"headers,omitempty"`
	// HeadersPresent must be present, with any value.
	HeadersPresent []string `json:"headers_present,omitempty"`
	// Problem: the body is an application/problem+json object whose
	// status is Status.
	Problem bool `json:"problem,omitempty"`
	// Body, when set, is the JSON body, compared as JSON.
	Body json.RawMessage `json:"body,omitempty"`
	// Ignore lists JSON Pointers into Body whose values must be present
	// but are not compared (messages the SDK words itself).
	Ignore []string `json:"ignore,omitempty"`
	// FunctionError: the Lambda adapter fails the invocation (returns an
	// error) instead of answering.
	FunctionError bool `json:"function_error,omitempty"`
}

// Call is one request the SDK makes, and the scripted answer it gets.
type Call struct {
	Method string `json:"method"`
	URL    string `json:"url"`
	// Headers must be present with these values (names lower case).
	Headers map[string]string `json:"headers,omitempty"`
	// Body, when set, is the JSON body, compared as JSON; absent for a GET.
	Body json.RawMessage `json:"body,omitempty"`
	// Ignore lists JSON Pointers into Body whose values must be present
	// but are not compared.
	Ignore []string `json:"ignore,omitempty"`
	// Answer is what the runner answers the SDK.
	Answer Scripted `json:"answer"`
}

// Scripted is an answer the runner gives to one of the SDK's requests.
type Scripted struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}
