// The Lambda adapter: the dispatcher's Invoke events and Function URL requests.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createHandler } from "@convergeplane/provider-sdk/lambda";
import { controlPlane, quiet, SECRET, signed, task } from "./helpers.mjs";

function invokeEvent(body, extra = {}) {
  const text = JSON.stringify(body);
  return { version: "converge.v1", rawPath: "/", headers: { ...signed(text), ...extra }, body: text, isBase64Encoded: false };
}

const slow = (v) => new Promise((r) => setTimeout(() => r(v), 50));

test("a sync invoke is answered inline however long work takes", async () => {
  const handler = createHandler([{ kind: "vpc", version: 1, work: () => slow({ status: { ok: true } }) }], { secrets: [SECRET], syncBudgetMs: 0, logger: quiet });
  const env = task(null);
  const res = await handler(invokeEvent(env), { getRemainingTimeInMillis: () => 60_000 });
  assert.equal(res.statusCode, 200);
  assert.deepEqual(JSON.parse(res.body), { task_id: env.task_id, claim_epoch: 7, outcome: { status: { ok: true } } });
  const health = await handler(invokeEvent({ type: "health" }));
  assert.deepEqual(JSON.parse(health.body), { kinds: [{ kind: "vpc", kind_version: 1, ready: true }] });
});

test("an Event invoke delivers the Result to the callback before it returns 202", async () => {
  const cp = await controlPlane();
  try {
    const handler = createHandler([{ kind: "vpc", version: 1, work: () => slow({ status: { ok: true } }) }], { secrets: [SECRET], logger: quiet });
    const env = task(cp);
    const res = await handler(invokeEvent(env, { "x-converge-invocation": "event" }));
    assert.equal(res.statusCode, 202);
    const outcomes = cp.requests.filter((q) => q.path.endsWith("/outcome"));
    assert.equal(outcomes.length, 1);
    assert.deepEqual(outcomes[0].json.outcome, { status: { ok: true } });
    // A refused event is a function error, so Lambda retries it and it shows in the metrics.
    const bad = invokeEvent(env, { "x-converge-invocation": "event" });
    bad.headers["webhook-signature"] = "v1,AAAA";
    await assert.rejects(handler(bad), /event refused with 401/);
  } finally {
    await cp.close();
  }
});

test("a Function URL request with a base64 body; secrets from PROVIDER_SECRETS", async () => {
  process.env.PROVIDER_SECRETS = "whsec_" + Buffer.alloc(24, 1).toString("base64") + "," + SECRET;
  try {
    const handler = createHandler([{ kind: "vpc", version: 1, work: (req) => ({ status: { name: req.resource.name } }) }], { logger: quiet });
    const env = task(null);
    const text = JSON.stringify(env);
    const res = await handler({ rawPath: "/", headers: signed(text), body: Buffer.from(text).toString("base64"), isBase64Encoded: true, requestContext: { http: { method: "POST" } } });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(JSON.parse(res.body).outcome, { status: { name: "team-blue" } });
    const get = await handler({ rawPath: "/", headers: {}, body: "", requestContext: { http: { method: "GET" } } });
    assert.equal(get.statusCode, 405);
  } finally {
    delete process.env.PROVIDER_SECRETS;
  }
  assert.throws(() => createHandler([{ kind: "vpc", version: 1, work: () => ({}) }]), /PROVIDER_SECRETS is required/);
});
