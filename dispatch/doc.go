// Package dispatch is the push dispatcher: the duty that claims reconcile
// tasks from Postgres and delivers each one as a Standard-Webhooks-signed
// HTTPS request to a registered provider endpoint, then records the outcome.
// It is the production sibling of dispatch/inproc (same claim → build → run
// → batch-complete shape), with the run step crossing the network.
//
// # The path of a task
//
//  1. Claim. The dispatcher asks the endpoint registry which (kind,
//     kind_version) pairs have a ready endpoint with a free slot, and claims
//     only those pairs' tasks in its shard range, at most the total spare
//     capacity (FOR UPDATE SKIP LOCKED, bumping claim_epoch). A pair with no
//     ready endpoint is not claimed at all: its resources park, and
//     Registry.PairStatus says why. Pairs are per namespace: a namespace's
//     tasks of a pair go to its own endpoints serving the pair, or to the
//     default namespace's when it has none (Registry.Route), and the
//     namespaces with claimable tasks share each claim (claims.sql).
//  2. Choose. Each task goes to the ready endpoint of its route serving its
//     pair with the fewest deliveries in flight; an endpoint never has more than its
//     max_concurrency (this pod's share of it) in flight. A task claimed
//     while every slot is busy waits locally up to QueueWait, then is
//     released without burning an attempt. An endpoint with max_batch n > 1
//     gets up to n tasks of a pair already waiting in one request, which
//     takes one slot (docs/protocol.md §16): no task waits for a batch to
//     fill, so a lone task goes alone, as a plain envelope.
//  3. Sign and deliver. The envelope (docs/protocol.md; the effective
//     provider config merged in, a callback URL and token bound to this
//     claim) is signed with every secret in force (two during a rotation)
//     and POSTed with webhook-id msg_<task_id>_<claim_epoch> — stable for
//     the claim, new for every claim — through the hardened egress client.
//     No database transaction is open meanwhile; the lease is renewed every
//     Lease/3 and a lost claim cancels the request.
//  4. Classify. 200 {"outcome"} or 204 completes the task; 200 {"error"}
//     completes it failed (terminal only if the body says "terminal":
//     true — an HTTP status never is); 202 keeps the claim for a callback.
//     Network errors fail over to another ready endpoint. 408/425/5xx,
//     3xx (never followed), other 4xx, timeouts, a passed task deadline and
//     malformed bodies are transient failures: completed with a non-terminal
//     error, so the engine backs off and counts the attempt; a Retry-After
//     also keeps the endpoint idle that long. 429 releases the task after
//     Retry-After without counting an attempt and backs the endpoint off;
//     410 disables the endpoint and releases the task. Every attempt — a
//     success, a failed delivery, a task error the provider reported
//     inline, a 202, an accepted task that never called back; one per task
//     of a batch — is recorded in the delivery log (endpoint_deliveries)
//     with its classification (the result label of deliveries_total); the
//     callback receiver records each callback's outcome. A batch's answer is classified once for the
//     request (breaker, back-off, failover) and, when it is a batch
//     response, per task as that task's inline answer would be.
//  5. Complete. Results, releases and the delivery log's rows are written
//     in batches (one round trip each per batch).
//
// # Fencing
//
// Every write about a task names its claim (task_id, shard, claim_epoch).
// The engine applies an outcome only while the row is still claimed at that
// epoch, so a result from a claim that lapsed and was re-claimed — a slow
// provider, a late callback, a partitioned pod — is refused ("superseded",
// 409 to a callback) and can never be applied twice; a repeat of the
// accepted outcome is a no-op ("duplicate", 200). When the dispatcher gives
// up on a claim (a timeout, a broken connection, a 202 with no callback) it
// records a failure in the provider's place, marked abandoned: the
// provider's own Result for that claim, if it still comes, was not applied,
// so it is superseded too, never a duplicate.
//
// # Asynchronous outcomes
//
// On 202 the claim is kept. Its dispatch lease still has most of its term,
// and most callbacks land within it; shortly before it could lapse, the
// tasks still claimed get their async lease — until the task deadline plus
// CallbackGrace, or AsyncLease when the task has none — in one batched
// LeaseExtend. The provider POSTs the result to /v1/tasks/{id}/outcome on
// any dispatch pod (Dispatcher.Callbacks, package callback: New builds the
// receiver from the same Config, so its token keys, async lease and grace
// are the dispatcher's) and may heartbeat
// /v1/tasks/{id}/heartbeat, which extends the lease the same way. If the
// lease lapses with neither, the pod that saw the 202 completes the task
// with a transient "async task timed out without a callback" error, burning
// an attempt (a provider that never calls back is retried with backoff and
// eventually fails the resource, instead of looping silently); if that pod
// is gone, the reaper re-pends the task.
//
// # Readiness and the breaker
//
// An endpoint with a health URL is probed (package health); each pair it
// serves turns ready after HealthyThreshold good answers and unready after
// UnhealthyThreshold bad ones (the first answer decides at once). An
// endpoint without one is ready for all its pairs while its breaker is
// closed. The per-endpoint circuit breaker (package breaker) opens after
// consecutive failures, sheds the endpoint for a cooldown (doubling per
// failed trial), then admits one trial delivery or probe: success closes
// it, failure re-opens it. An open breaker, a 429 back-off, a disable or an
// unusable configuration makes the endpoint not ready, and the pairs it
// alone served park until it recovers — while every other pair keeps
// flowing.
//
// # Shutdown
//
// Stop is a two-phase drain: stop claiming and release the tasks still
// waiting for a slot; let deliveries in flight finish for up to
// DrainTimeout and complete their results; then cancel the stragglers and
// release their tasks for a fast re-claim elsewhere. Accepted tasks keep
// their claims — their callbacks land on any pod.
package dispatch
