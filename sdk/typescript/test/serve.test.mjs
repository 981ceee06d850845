// The SDK over real HTTP: serve() with providers, driven by signed requests and a
// stand-in control plane.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import { serve, provider, TerminalError, terminal, SupersededError } from "@convergeplane/provider-sdk";
import { controlPlane, deliver, gate, OTHER_SECRET, quiet, SECRET, task, TRACEPARENT, signed } from "./helpers.mjs";

/** later resolves to v after a moment: work that outlasts a sync budget of 0. */
const later = (v) => new Promise((r) => setTimeout(() => r(v), 20));

async function start(providers, opts = {}) {
  return serve(providers, { secrets: [SECRET], port: 0, host: "127.0.0.1", logger: quiet, handleSignals: false, ...opts });
}

describe("inline answers", () => {
  let srv, cp;
  const seen = [];
  const configs = [];
  before(async () => {
    cp = await controlPlane();
    srv = await start([
      {
        kind: "vpc",
        version: 1,
        onConfig(cfg) {
          configs.push(cfg);
        },
        work(req) {
          seen.push(req);
          if (req.reaction === "fail") throw new Error("quota exceeded");
          if (req.reaction === "terminal") throw new TerminalError("cidr is malformed");
          if (req.reaction === "wrapped") throw terminal(new Error("denied for good"));
          if (req.reaction === "invalid") return { children: [{ kind: "subnet", name: "a" }] };
          if (req.reaction === "empty") throw new Error("");
          return { status: { vpc_id: "vpc-" + req.resource.name, cidr: req.resource.spec.cidr }, conditions: [{ type: "Ready", status: "True" }] };
        },
      },
    ]);
  });
  after(async () => {
    await srv.stop();
    await cp.close();
  });

  test("a task is answered 200 with its Result, the Request complete", async () => {
    const env = task(cp, { config: { region: "eu", n: 1 }, bundle: Buffer.from("zip").toString("base64"), status: { partial: true } });
    const r = await deliver(srv.url, env);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, {
      task_id: env.task_id,
      claim_epoch: 7,
      outcome: { status: { vpc_id: "vpc-team-blue", cidr: "10.0.0.0/16" }, conditions: [{ type: "Ready", status: "True" }] },
    });
    const req = seen.at(-1);
    assert.equal(req.taskId, env.task_id);
    assert.equal(req.claimEpoch, 7);
    assert.equal(req.generation, 3);
    assert.equal(req.resource.kindVersion, 1);
    assert.deepEqual(req.config, { region: "eu", n: 1 });
    assert.equal(Buffer.from(req.bundle).toString(), "zip");
    assert.deepEqual(req.status, { partial: true });
    assert.ok(req.deadline instanceof Date);
  });

  test("onConfig runs when the effective config changes, not on a repeat", async () => {
    const before = configs.length;
    await deliver(srv.url, task(cp, { config: { region: "us" } }));
    await deliver(srv.url, task(cp, { config: { region: "us" } }));
    assert.equal(configs.length, before + 1);
    assert.deepEqual(configs.at(-1), { spec: { region: "us" } });
    await deliver(srv.url, task(cp, { config: { region: "ap" } }));
    assert.equal(configs.length, before + 2);
  });

  test("errors are transient unless terminal", async () => {
    const cases = [
      ["fail", { message: "quota exceeded", terminal: false }],
      ["terminal", { message: "cidr is malformed", terminal: true }],
      ["wrapped", { message: "denied for good", terminal: true }],
      ["empty", { message: "unspecified error", terminal: false }],
    ];
    for (const [reaction, error] of cases) {
      const r = await deliver(srv.url, task(cp, { reaction }));
      assert.equal(r.status, 200, reaction);
      assert.deepEqual(r.json.error, error, reaction);
      assert.equal(r.json.outcome, undefined);
    }
  });

  test("an invalid outcome is a transient error naming the problem", async () => {
    const r = await deliver(srv.url, task(cp, { reaction: "invalid" }));
    assert.equal(r.json.error.terminal, false);
    assert.match(r.json.error.message, /children\[0\]: kind_version 0 outside 1\.\.32767/);
  });

  test("signatures: refused unless one entry matches one secret, in tolerance", async () => {
    const body = JSON.stringify(task(cp));
    const bad = await fetch(srv.url, { method: "POST", headers: { ...signed(body), "webhook-signature": "v1,AAAA" }, body });
    assert.equal(bad.status, 401);
    assert.match((await bad.json()).detail, /no matching webhook signature/);
    const stale = await deliver(srv.url, body, { ts: Math.floor(Date.now() / 1000) - 301 });
    assert.equal(stale.status, 401);
    assert.match(stale.json.detail, /outside tolerance/);
    const other = await deliver(srv.url, body, { secrets: [OTHER_SECRET] });
    assert.equal(other.status, 401);
    const rotated = await deliver(srv.url, body, { secrets: [OTHER_SECRET, SECRET] });
    assert.equal(rotated.status, 200);
    const missing = await fetch(srv.url, { method: "POST", headers: { "content-type": "application/json" }, body });
    assert.equal(missing.status, 401);
    assert.equal(missing.headers.get("content-type"), "application/problem+json");
    const notInt = await fetch(srv.url, { method: "POST", headers: { ...signed(body), "webhook-timestamp": "12x" }, body });
    assert.equal((await notInt.json()).detail, "signature verification failed: invalid webhook-timestamp");
  });

  test("other methods, media types and oversized bodies are refused", async () => {
    const get = await fetch(srv.url);
    assert.equal(get.status, 405);
    assert.equal(get.headers.get("allow"), "POST");
    const body = JSON.stringify(task(cp));
    const text = await fetch(srv.url, { method: "POST", headers: { ...signed(body), "content-type": "text/plain" }, body });
    assert.equal(text.status, 415);
    const malformed = await deliver(srv.url, "{not json");
    assert.equal(malformed.status, 400);
    const noKind = await deliver(srv.url, task(cp, { kind: "" }));
    assert.equal(noKind.status, 400);
    const unknown = await deliver(srv.url, task(cp, { kind: "subnet" }));
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json.detail, "no provider for subnet/v1 at this endpoint");
  });

  test("a health probe lists every provider's readiness", async () => {
    const r = await deliver(srv.url, { type: "health" });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { kinds: [{ kind: "vpc", kind_version: 1, ready: true }] });
    assert.equal(r.headers.get("cache-control"), "no-store");
  });
});

describe("readiness", () => {
  test("an unready provider is 503 with Retry-After, and reported unready", async () => {
    let ready = false;
    const srv = await start([{ kind: "vpc", version: 1, ready: () => ready, work: () => ({}) }]);
    try {
      const r = await deliver(srv.url, task(null));
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("retry-after"), "5");
      assert.deepEqual((await deliver(srv.url, { type: "health" })).json.kinds[0].ready, false);
      ready = true;
      assert.equal((await deliver(srv.url, task(null))).status, 200);
    } finally {
      await srv.stop();
    }
  });
});

describe("asynchronous work", () => {
  test("past the sync budget: 202, heartbeats, then the Result to the callback with the token and trace", async () => {
    const cp = await controlPlane();
    const release = gate();
    const srv = await start([provider("vpc", 1, async () => {
      await release.p;
      return { status: { done: true } };
    })], { syncBudgetMs: 50, heartbeatEveryMs: 20 });
    try {
      const env = task(cp);
      const r = await deliver(srv.url, env, { id: "msg_async" });
      assert.equal(r.status, 202);
      const [hb] = await cp.waitFor((q) => q.path.endsWith("/heartbeat"), "heartbeat");
      assert.equal(hb.path, `/v1/tasks/${env.task_id}/heartbeat`);
      assert.equal(hb.headers.authorization, `Bearer cbt_${env.task_id}`);
      assert.deepEqual(hb.json, { task_id: env.task_id, claim_epoch: 7 });
      // A repeat of the delivery while it runs is 202 and runs nothing twice.
      assert.equal((await deliver(srv.url, env, { id: "msg_async" })).status, 202);
      release.open();
      const [cb] = await cp.waitFor((q) => q.path.endsWith("/outcome"), "callback");
      assert.equal(cb.headers.authorization, `Bearer cbt_${env.task_id}`);
      assert.equal(cb.headers.traceparent, TRACEPARENT);
      assert.equal(cb.headers["content-length"], String(Buffer.byteLength(cb.body)));
      assert.deepEqual(cb.json, { task_id: env.task_id, claim_epoch: 7, outcome: { status: { done: true } } });
      // Once finished, a repeat is answered with the same body.
      const again = await deliver(srv.url, env, { id: "msg_async" });
      assert.equal(again.status, 200);
      assert.equal(again.body, cb.body);
      await srv.stop();
      assert.equal(cp.requests.filter((q) => q.path.endsWith("/outcome")).length, 1);
    } finally {
      await srv.stop();
      await cp.close();
    }
  });

  test("a repeated webhook-id runs work once", async () => {
    let runs = 0;
    const srv = await start([provider("vpc", 1, () => ({ status: { run: ++runs } }))]);
    try {
      const env = task(null);
      const a = await deliver(srv.url, env, { id: "msg_same" });
      const b = await deliver(srv.url, env, { id: "msg_same" });
      assert.equal(runs, 1);
      assert.equal(a.body, b.body);
      const c = await deliver(srv.url, env, { id: "msg_new_claim" });
      assert.equal(c.json.outcome.status.run, 2);
    } finally {
      await srv.stop();
    }
  });

  test("a heartbeat answered 409 aborts the work with SupersededError and drops the Result", async () => {
    const cp = await controlPlane((q) => (q.path.endsWith("/heartbeat") ? { status: 409 } : {}));
    let reason;
    const aborted = gate();
    const srv = await start([provider("vpc", 1, (req, signal) => new Promise((resolve) => {
      signal.addEventListener("abort", () => {
        reason = signal.reason;
        aborted.open();
        resolve({ status: { late: true } });
      });
    }))], { syncBudgetMs: 0, heartbeatEveryMs: 20 });
    try {
      assert.equal((await deliver(srv.url, task(cp))).status, 202);
      await aborted.p;
      assert.ok(reason instanceof SupersededError, String(reason));
      await srv.stop();
      assert.equal(cp.requests.filter((q) => q.path.endsWith("/outcome")).length, 0);
    } finally {
      await srv.stop();
      await cp.close();
    }
  });

  test("a callback answered 503 is retried until accepted; a 400 is not", async () => {
    let calls = 0;
    const cp = await controlPlane((q) => {
      if (!q.path.endsWith("/outcome")) return {};
      if (q.path.includes("reject")) return { status: 400 };
      return ++calls < 3 ? { status: 503 } : {};
    });
    const srv = await start([provider("vpc", 1, () => later({}))], { syncBudgetMs: 0, callbackRetry: { initialMs: 10, maxMs: 20, graceMs: 0 } });
    try {
      assert.equal((await deliver(srv.url, task(cp, { task_id: "retry" }))).status, 202);
      assert.equal((await deliver(srv.url, task(cp, { task_id: "reject" }))).status, 202);
      await srv.stop();
      assert.equal(cp.requests.filter((q) => q.path === "/v1/tasks/retry/outcome").length, 3);
      assert.equal(cp.requests.filter((q) => q.path === "/v1/tasks/reject/outcome").length, 1);
    } finally {
      await srv.stop();
      await cp.close();
    }
  });

  test("the work signal aborts at the task deadline", async () => {
    const srv = await start([provider("vpc", 1, (req, signal) => new Promise((_, reject) => {
      signal.addEventListener("abort", () => reject(signal.reason));
    }))]);
    try {
      const r = await deliver(srv.url, task(null, { deadline: new Date(Date.now() + 100).toISOString() }));
      assert.equal(r.status, 200);
      assert.deepEqual(r.json.error, { message: "task deadline exceeded", terminal: false });
    } finally {
      await srv.stop();
    }
  });
});

describe("batches", () => {
  test("each task is served as alone; a slow one is accepted and completes by a batched callback", async () => {
    const cp = await controlPlane((q) => (q.path === "/v1/tasks/outcomes"
      ? { body: JSON.stringify({ results: q.json.outcomes.map((o) => ({ task_id: o.result.task_id, status: 200, result: "applied" })) }) }
      : {}));
    const release = gate();
    const srv = await start([provider("vpc", 1, async (req) => {
      if (req.resource.name === "slow") await release.p;
      return { status: { name: req.resource.name } };
    })], { syncBudgetMs: 100 });
    try {
      const batchURL = `${cp.url}v1/tasks/outcomes`;
      const fast = task(cp, { resource: { ...task(null).resource, name: "fast" } });
      const slow = task(cp, { resource: { ...task(null).resource, name: "slow" } });
      const wrong = task(cp, { kind: "subnet" });
      for (const t of [fast, slow, wrong]) t.callback.batch_url = batchURL;
      const r = await deliver(srv.url, { type: "batch", tasks: [fast, slow, wrong] });
      assert.equal(r.status, 200);
      assert.equal(r.json.type, "batch");
      assert.deepEqual(r.json.results, [
        { task_id: fast.task_id, claim_epoch: 7, outcome: { status: { name: "fast" } } },
        { task_id: slow.task_id, claim_epoch: 7, accepted: true },
        { task_id: wrong.task_id, claim_epoch: 7, error: { message: "404 Not Found: no provider for subnet/v1 at this endpoint", terminal: false } },
      ]);
      release.open();
      const [cb] = await cp.waitFor((q) => q.path === "/v1/tasks/outcomes", "batched callback");
      assert.equal(cb.headers.authorization, undefined);
      assert.deepEqual(cb.json, { outcomes: [{ token: `cbt_${slow.task_id}`, result: { task_id: slow.task_id, claim_epoch: 7, outcome: { status: { name: "slow" } } } }] });
      await srv.stop();
      assert.equal(cp.requests.filter((q) => q.path.endsWith("/outcome")).length, 0);
    } finally {
      await srv.stop();
      await cp.close();
    }
  });

  test("an empty batch is 400", async () => {
    const srv = await start([provider("vpc", 1, () => ({}))]);
    try {
      assert.equal((await deliver(srv.url, { type: "batch", tasks: [] })).status, 400);
    } finally {
      await srv.stop();
    }
  });
});

describe("thin payloads", () => {
  test("the documents are fetched with the callback token before work", async () => {
    let cp;
    cp = await controlPlane((q) => (q.method === "GET"
      ? { body: JSON.stringify({ ...task(cp, { task_id: "thin" }), callback: undefined, config: { tier: "gold" } }) }
      : {}));
    let got;
    const srv = await start([provider("vpc", 1, (req) => {
      got = req;
      return {};
    })]);
    try {
      const thin = task(cp, { task_id: "thin", payload_url: `${cp.url}v1/tasks/thin` });
      delete thin.resource;
      const r = await deliver(srv.url, thin);
      assert.equal(r.status, 200);
      const [get] = await cp.waitFor((q) => q.method === "GET");
      assert.equal(get.headers.authorization, "Bearer cbt_thin");
      assert.equal(get.headers.traceparent, TRACEPARENT);
      assert.equal(got.resource.name, "team-blue");
      assert.deepEqual(got.config, { tier: "gold" });
    } finally {
      await srv.stop();
      await cp.close();
    }
  });

  test("a 409 from the payload URL is a superseded claim: an error Result, no callback", async () => {
    // The 409 comes after the sync budget of 0 ran out: the task is answered 202.
    const cp = await controlPlane((q) => (q.method === "GET" ? later({ status: 409 }) : {}));
    let ran = false;
    const srv = await start([provider("vpc", 1, () => ((ran = true), {}))], { syncBudgetMs: 0 });
    try {
      const thin = task(cp, { payload_url: `${cp.url}v1/tasks/x` });
      delete thin.resource;
      assert.equal((await deliver(srv.url, thin)).status, 202);
      await cp.waitFor((q) => q.method === "GET");
      await srv.stop();
      assert.equal(ran, false);
      assert.equal(cp.requests.filter((q) => q.method === "POST" && q.path.endsWith("/outcome")).length, 0);
    } finally {
      await srv.stop();
      await cp.close();
    }
  });
});

describe("injected clock and fetch", () => {
  test("now is the clock timestamps are checked against; fetch sends the callbacks", async () => {
    const sent = [];
    const fakeFetch = async (url, init) => {
      sent.push({ url, init });
      return new Response(JSON.stringify({ result: "applied" }), { status: 200 });
    };
    const ts = 1767225600;
    const srv = await start([provider("vpc", 1, () => later({ status: {} }))], { now: () => ts * 1000, fetch: fakeFetch, syncBudgetMs: 0 });
    try {
      const env = task({ url: "https://dispatch.internal:8080/" });
      const r = await deliver(srv.url, env, { ts });
      assert.equal(r.status, 202);
      assert.equal((await deliver(srv.url, env, { ts: Math.floor(Date.now() / 1000) })).status, 401);
      await srv.stop();
      assert.equal(sent.length, 1);
      assert.equal(sent[0].url, `https://dispatch.internal:8080/v1/tasks/${env.task_id}/outcome`);
      assert.equal(sent[0].init.headers.authorization, `Bearer cbt_${env.task_id}`);
    } finally {
      await srv.stop();
    }
  });
});

describe("graceful drain", () => {
  test("stop waits for asynchronous work and its callback; a drain past its timeout aborts work and fails", async () => {
    const cp = await controlPlane();
    const srv = await start([provider("vpc", 1, async () => {
      await new Promise((r) => setTimeout(r, 100));
      return { status: { drained: true } };
    })], { syncBudgetMs: 0 });
    assert.equal((await deliver(srv.url, task(cp))).status, 202);
    await srv.stop();
    assert.equal(cp.requests.filter((q) => q.path.endsWith("/outcome")).length, 1);

    let reason;
    const stuck = await start([provider("vpc", 1, (req, signal) => new Promise((resolve) => {
      signal.addEventListener("abort", () => ((reason = signal.reason), resolve({})));
    }))], { syncBudgetMs: 0, drainTimeoutMs: 50 });
    assert.equal((await deliver(stuck.url, task(cp))).status, 202);
    await assert.rejects(stuck.stop(), /work still running/);
    assert.equal(reason?.name, "ShutdownError");
    await cp.close();
  });

  test("a keep-alive client probing through the drain does not hold it open", async () => {
    const srv = await start([provider("vpc", 1, () => ({}))], { drainTimeoutMs: 1000 });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const get = () => new Promise((resolve) => {
      const req = http.get(srv.url, { agent }, (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode, connection: res.headers.connection }));
      });
      req.on("error", (err) => resolve({ error: err.code }));
    });
    assert.equal((await get()).connection, "keep-alive");
    // Requests back to back on the kept connection, a busy prober, while the server
    // stops: the connection is never idle when the stop begins.
    let probing = true;
    const answers = [];
    const prober = (async () => {
      while (probing) answers.push(await get());
    })();
    await new Promise((r) => setTimeout(r, 50));
    await srv.stop(); // rejects when a connection is still open after drainTimeoutMs
    probing = false;
    await prober;
    agent.destroy();
    assert.ok(answers.length > 1 && answers.every((a) => a.error !== undefined || a.status === 405), JSON.stringify(answers));
    assert.equal((await get()).error, "ECONNREFUSED");
  });

  test("invalid providers and options are refused before listening", async () => {
    await assert.rejects(start([]), /no providers/);
    await assert.rejects(start([provider("vpc", 0, () => ({}))]), /version 0 outside 1\.\.32767/);
    await assert.rejects(start([provider("vpc", 1, () => ({})), provider("vpc", 1, () => ({}))]), /two providers for vpc\/v1/);
    await assert.rejects(start([provider("vpc", 1, () => ({}))], { secrets: ["nope"] }), /missing "whsec_" prefix/);
  });
});
