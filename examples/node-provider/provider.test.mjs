// Node-side tests (`npm test`): the kinds over real HTTP, with requests signed by the
// standardwebhooks package as the dispatcher signs them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { start } from "./provider.mjs";
import { accountId } from "./account.mjs";

const secret = "whsec_" + randomBytes(32).toString("base64");

async function post(url, body) {
  const text = JSON.stringify(body);
  const id = "msg_" + randomBytes(8).toString("hex");
  const now = new Date();
  const resp = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", "webhook-id": id, "webhook-timestamp": String(Math.floor(now / 1000)), "webhook-signature": new Webhook(secret).sign(id, now, text) },
    body: text,
  });
  return { status: resp.status, json: await resp.json().catch(() => undefined) };
}

const task = (kind, reaction, name, spec, extra = {}) => ({
  type: "task", task_id: "t-" + name + reaction, claim_epoch: 1, attempt: 1, task_type: "reconcile", reaction, trigger: "specChange",
  kind, kind_version: 1, resource: { id: "r-" + name, kind, kind_version: 1, name, labels: {}, spec, generation: 1, phase: "Reconciling" }, ...extra,
});

test("account and vpc over HTTP: status, terminal errors, the verb, health", async () => {
  const srv = await start({ PROVIDER_SECRETS: secret, PROVIDER_ADDR: "127.0.0.1:0" });
  try {
    const health = await post(srv.url, { type: "health" });
    assert.deepEqual(health.json.kinds.map((k) => `${k.kind}/${k.kind_version}/${k.ready}`), ["account/1/true", "vpc/1/true"]);
    const ok = await post(srv.url, task("account", "work", "team-blue", { team: "blue", domain: "payments" }));
    assert.deepEqual(ok.json.outcome.status, { account_id: accountId("team-blue"), team: "blue", domain: "payments" });
    const bad = await post(srv.url, task("account", "work", "team-bad", { team: "Not A Label" }));
    assert.equal(bad.json.error.terminal, true);
    assert.match(bad.json.error.message, /not a DNS label/);
    const spec = { account_id: "123456789012", cidr: "10.0.0.0/24" };
    const verb = await post(srv.url, task("vpc", "enable_flow_logs", "v", spec, { config: { flow_logs_bucket: "s3://logs" } }));
    assert.deepEqual(verb.json.outcome.operation_output, { flow_logs: true, bucket: "s3://logs", operation_id: "t-venable_flow_logs" });
    assert.equal(verb.json.outcome.status.flow_logs, true);
    const noBucket = await post(srv.url, task("vpc", "enable_flow_logs", "w", spec));
    assert.equal(noBucket.json.error.terminal, true);
  } finally {
    await srv.stop();
  }
});
