// Node-side unit tests: `npm test` (node --test). They exercise the provider over real
// HTTP with requests signed by the standardwebhooks package, as the dispatcher signs them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { createProvider, verifier } from "./provider.mjs";
import { accountId } from "./account.mjs";

const newSecret = () => "whsec_" + randomBytes(32).toString("base64");

test("docs/protocol.md §3.5 and §13 vectors", () => {
  const hook = new Webhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  assert.equal(hook.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", new Date(1614265330000), '{"test": 2432232314}'),
    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  assert.equal(hook.sign("msg_probe_1", new Date(1767225600000), '{"type":"health"}'),
    "v1,c6DZa7pCxREqJ1/O7m7UJjZwfgO2GfqFLYOi0OenLg8=");
});

test("verifier: rotation, tolerance, bad timestamps", () => {
  const a = newSecret(), b = newSecret();
  const body = Buffer.from('{"type":"health"}');
  const now = new Date();
  const ts = String(Math.floor(now.getTime() / 1000));
  const both = `${new Webhook(a).sign("m1", now, body)} ${new Webhook(b).sign("m1", now, body)}`;
  for (const held of [[a], [b], [a, b]]) {
    assert.equal(verifier(held)({ "webhook-id": "m1", "webhook-timestamp": ts, "webhook-signature": both }, body), null);
  }
  assert.notEqual(verifier([newSecret()])({ "webhook-id": "m1", "webhook-timestamp": ts, "webhook-signature": both }, body), null);
  const old = new Date(now.getTime() - 6 * 60 * 1000);
  assert.match(verifier([a])({ "webhook-id": "m1", "webhook-timestamp": String(Math.floor(old / 1000)), "webhook-signature": new Webhook(a).sign("m1", old, body) }, body), /too old/);
  assert.match(verifier([a])({ "webhook-id": "m1", "webhook-timestamp": ts + "abc", "webhook-signature": both }, body), /integer/);
  assert.match(verifier([a])({ "webhook-id": "m1", "webhook-timestamp": ts }, body), /missing/);
});

test("over HTTP: health, inline Result, dedup, terminal error, teardown, 401, 404, async", async (t) => {
  // The dispatcher's callback side: records what the provider posts.
  const posted = [];
  const cb = (await import("node:http")).createServer((req, res) => {
    let b = "";
    req.on("data", (c) => (b += c));
    req.on("end", () => {
      posted.push({ path: req.url, auth: req.headers.authorization, body: b ? JSON.parse(b) : null });
      res.writeHead(200, { "content-type": "application/json" });
      res.end(req.url.endsWith("/outcome") ? '{"result":"applied"}' : '{"lease_until":"2030-01-01T00:00:00Z"}');
    });
  });
  await new Promise((r) => cb.listen(0, "127.0.0.1", r));
  t.after(() => cb.close());
  const cbURL = `http://127.0.0.1:${cb.address().port}/v1/tasks/t1/outcome`;
  const secret = newSecret();
  const p = createProvider({ secrets: [secret], syncBudgetMs: 200 });
  await new Promise((r) => p.server.listen(0, "127.0.0.1", r));
  t.after(() => { p.shutdown(); p.server.close(); p.server.closeAllConnections(); });
  const url = `http://127.0.0.1:${p.server.address().port}/`;
  const hook = new Webhook(secret);
  const post = async (id, obj, sign = hook) => {
    const body = JSON.stringify(obj), now = new Date();
    const r = await fetch(url, { method: "POST", body, headers: { "content-type": "application/json", "webhook-id": id,
      "webhook-timestamp": String(Math.floor(now / 1000)), "webhook-signature": sign.sign(id, now, body) } });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };
  const task = (over) => ({ type: "task", task_id: "t1", claim_epoch: 3, attempt: 1, task_type: "reconcile", reaction: "work",
    trigger: "specChange", kind: "account", kind_version: 1,
    resource: { id: "r1", kind: "account", kind_version: 1, name: "blue", labels: {}, spec: { team: "blue" }, generation: 1, phase: "Reconciling" },
    callback: { url: cbURL, token: "cbt_x" }, ...over });

  assert.deepEqual((await post("h1", { type: "health" })).body, { kinds: [{ kind: "account", kind_version: 1, ready: true }] });
  assert.equal((await post("h2", { type: "health" }, new Webhook(newSecret()))).status, 401);

  const ok = await post("m1", task());
  assert.equal(ok.status, 200);
  assert.deepEqual(ok.body, { task_id: "t1", claim_epoch: 3, outcome: { status: { account_id: accountId("blue"), team: "blue" } } });
  assert.deepEqual((await post("m1", task())).body, ok.body, "a repeated webhook-id gets the same Result");

  const bad = await post("m2", task({ resource: { ...task().resource, spec: { team: "Not A Label" } } }));
  assert.equal(bad.status, 200);
  assert.equal(bad.body.error.terminal, true);
  assert.equal(bad.body.outcome, undefined);

  const del = await post("m3", task({ task_type: "delete", reaction: "teardown", trigger: "deleteRequested" }));
  assert.deepEqual(del.body, { task_id: "t1", claim_epoch: 3, outcome: {} });

  assert.equal((await post("m4", task({ kind_version: 2 }))).status, 404);
  assert.equal((await post("m5", task({ kind: undefined }))).status, 400);

  // Slower than the sync budget: 202, and a repeat of the id is 202 too (the Result goes to the callback).
  const slow = task({ resource: { ...task().resource, labels: { "node-provider.converge.dev/work-delay-ms": "600" } } });
  assert.equal((await post("m6", slow)).status, 202);
  assert.equal((await post("m6", slow)).status, 202);
  for (let i = 0; i < 50 && !posted.some((x) => x.path.endsWith("/outcome")); i++) await new Promise((r) => setTimeout(r, 50));
  const outcomes = posted.filter((x) => x.path.endsWith("/outcome"));
  assert.equal(outcomes.length, 1, "one callback for the run, however many deliveries");
  assert.equal(outcomes[0].auth, "Bearer cbt_x");
  assert.deepEqual(outcomes[0].body, { task_id: "t1", claim_epoch: 3, outcome: { status: { account_id: accountId("blue"), team: "blue" } } });
});
