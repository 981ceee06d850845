// Package webhooksdk is the provider SDK for Converge's push dispatch: write a kind's
// handler code once as a [Provider] and serve it over HTTPS with [ListenAndServe], or
// mount [Handler] in a server of your own.
//
// # Model
//
// Converge's dispatcher claims a task from Postgres and POSTs it to a registered
// provider endpoint as a JSON [Envelope], signed the Standard Webhooks way
// (https://www.standardwebhooks.com): headers webhook-id, webhook-timestamp and
// webhook-signature, the signature being "v1," + base64(HMAC-SHA256(key,
// "id.timestamp.body")). The endpoint answers in one of two ways:
//
//   - inline: 200 with a [Result] body, {"outcome": {...}} or {"error": {"message",
//     "terminal"}};
//   - asynchronously: 202 at once, then a POST of the same Result body to the
//     envelope's callback URL with "Authorization: Bearer <callback token>", and
//     heartbeats to the matching …/heartbeat URL while the work runs.
//
// The dispatcher also probes readiness with a signed {"type": "health"} POST, answered
// with a [HealthResponse] of every provider's readiness.
//
// docs/protocol.md in this repository is the normative wire protocol; this package is
// one implementation of its provider side, and its wire types and signing functions
// ([Sign], [Signer], [Verify]) are the ones the dispatcher uses too.
//
// # The contract
//
// A [Provider] serves exactly one (kind, version) with two methods: Kind, called once at
// construction, and Work, called once per delivery. Two more are optional, found by type
// assertion: a [Readier]'s Ready answers health probes and is checked before each task
// (without it, the provider is always ready), and a [Configurer]'s OnConfig runs before
// Work whenever the task's effective config differs from the last one the provider saw
// (without it, config changes are ignored). [WorkFunc] makes a Provider of a function. Work returns an [Outcome] or an error; an
// error is retried with backoff unless wrapped with [Terminal]. An HTTP status is never
// a terminal failure — only a Result with "terminal": true is.
//
// The dispatcher merges each task's provider config (kind default ⊕ per-resource
// override) and sends the effective config in the envelope ([Request.Config],
// [Request.Bundle]); a provider is stateless. [EffectiveConfig] and [EffectiveBundle]
// remain for providers that layer their own defaults.
//
// # Invariants of the Handler
//
//   - A request whose signature does not verify with any configured secret is refused
//     (401) before its body is decoded.
//   - Work runs at most once per webhook-id while that id's result is cached (bounded by
//     entries, bytes and age): a repeat delivery gets 202 while the run is in flight and
//     the identical result body once it finished. The webhook-id is stable across HTTP
//     retries of one claim, and a new claim gets a new one, so a new claim always runs.
//   - Work runs under the envelope's deadline; a panic becomes a transient error result.
//   - Once a request has been answered 202 for a run, that run's result is POSTed to the
//     callback (with backoff, until the deadline plus a grace), even if an inline answer
//     was also written; the dispatcher treats a duplicate outcome as a no-op. A 409 from
//     the callback or a heartbeat means a newer claim superseded this one: the result is
//     dropped and the Work context is cancelled with cause [ErrSuperseded].
//   - Readiness is advisory: an unready provider is answered 503 (transient), never a
//     terminal failure.
//
// # Serving
//
// [ListenAndServe] (or [Serve], on a listener of the caller's) is a provider process's
// whole server: it checks the providers and options, listens (HTTPS with [WithTLS]),
// serves the Endpoint (beside routes of the caller's with [WithMiddleware]) and, once
// its context ends or SIGINT or SIGTERM arrives, stops gracefully: the listener closes,
// requests in flight finish, then asynchronous Work and its callbacks, all within
// [WithDrainTimeout]. It returns nil after a stop that finished its work and an error
// otherwise; it never exits the process.
//
// # Batched deliveries
//
// An endpoint registered with max_batch > 1 may receive a [Batch] of task envelopes in
// one request (docs/protocol.md §16). The Handler verifies its signature once, serves
// each task exactly as it would serve it alone — the same Provider calls, deduplication
// and sync budget (one budget for the whole request) — at most [WithBatchConcurrency]
// at once, and answers a [BatchResponse]: each task's Result, or accepted when it went
// asynchronous (its Result then goes to its own callback). Provider code is unchanged.
//
// # Function platforms
//
// A host that freezes the process once a delivery is answered (AWS Lambda) serves
// deliveries with [Endpoint.ServeInvocation] instead of ServeHTTP: it never answers 202
// for work left running, and under [InvocationEvent] it delivers the Result to the
// callback before returning. Package webhooksdk/lambda is that host for AWS Lambda.
//
// Test helpers live in package webhooksdk/sdktest.
package webhooksdk
