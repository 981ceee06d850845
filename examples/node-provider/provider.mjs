// A Converge provider endpoint in Node, written from docs/protocol.md alone, serving
// the classic demo's account kind v1. Node's standard library plus the official
// Standard Webhooks package; section numbers (§) refer to docs/protocol.md.
//
// Environment:
//   PROVIDER_SECRETS   whsec_… secrets, separated by commas or spaces (two during a rotation). Required.
//   PROVIDER_ADDR      host:port to listen on (default 127.0.0.1:8080).
//   SYNC_BUDGET_MS     how long a delivery waits for the work before answering 202 (default 1000).
//   FAKE_WORK_DELAY_MS extra time every work reaction takes (default 0); a resource's label
//                      node-provider.converge.dev/work-delay-ms overrides it.
//   FAKE_FAULT_RATE    probability (0..1) that a work reaction fails transiently (default 0).
import http from "node:http";
import { pathToFileURL } from "node:url";
import { Webhook } from "standardwebhooks";
import { KIND, KIND_VERSION, TerminalError, reactions } from "./account.mjs";

const MAX_BODY = 16 << 20; // §2: the provider caps request bodies.
const DEDUP_MAX = 10000; // §4: remember finished Results…
const DEDUP_TTL_MS = 10 * 60 * 1000; // …for 10 minutes.
const DELAY_LABEL = "node-provider.converge.dev/work-delay-ms";

const log = (msg, fields = {}) => process.stderr.write(JSON.stringify({ time: new Date().toISOString(), msg, ...fields }) + "\n");
const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });

// ---------------------------------------------------------------------------------
// §3 Signatures

/** verifier returns verify(headers, rawBody) → null if a signature matches, else the reason. */
export function verifier(secrets) {
  if (secrets.length === 0) throw new Error("no secrets: set PROVIDER_SECRETS to the endpoint's whsec_… secret(s)");
  const hooks = secrets.map((s) => {
    if (!/^whsec_[A-Za-z0-9+/]+={0,2}$/.test(s)) throw new Error("a secret is not whsec_<standard base64>");
    return new Webhook(s);
  });
  return (headers, rawBody) => {
    const id = headers["webhook-id"], ts = headers["webhook-timestamp"], sig = headers["webhook-signature"];
    if (!id || !ts || !sig) return "missing webhook-id, webhook-timestamp or webhook-signature";
    // §3: integer seconds, decimal, no sign, no fraction. The library's parseInt would
    // accept "12abc", so check the text here first.
    if (!/^[0-9]{1,15}$/.test(ts)) return "webhook-timestamp is not an integer";
    let reason = "no matching signature";
    for (const hook of hooks) {
      try {
        // The library checks the 5-minute tolerance, the v1 entries of the space-separated
        // list (ignoring other versions) and compares in constant time.
        hook.verify(rawBody, { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig }, { jsonParse: false });
        return null;
      } catch (err) {
        reason = err?.message ?? String(err);
        if (/timestamp/i.test(reason)) return reason; // the same for every secret
      }
    }
    return reason;
  };
}

// ---------------------------------------------------------------------------------
// HTTP helpers

function send(res, status, body, headers = {}) {
  if (body === undefined) {
    res.writeHead(status, headers);
    return res.end();
  }
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { "content-type": headers["content-type"] ?? "application/json", "content-length": data.length, ...headers });
  res.end(data);
}

/** problem answers an RFC 9457 problem document (§3.3, §8). */
function problem(res, status, title, detail, headers = {}) {
  send(res, status, { type: "about:blank", title, status, detail }, { "content-type": "application/problem+json", ...headers });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on("data", (c) => {
      n += c.length;
      if (n > MAX_BODY) {
        reject(Object.assign(new Error("body too large"), { status: 413 }));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/** postJSON POSTs body to url with the callback token (§8, §9); resolves {status, text}. */
async function postJSON(url, token, body, signal) {
  const r = await fetch(url, {
    method: "POST",
    redirect: "manual", // §2: never follow a redirect.
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: signal ?? AbortSignal.timeout(30000),
  });
  return { status: r.status, text: await r.text(), retryAfter: r.headers.get("retry-after") };
}

// ---------------------------------------------------------------------------------
// The provider

export function createProvider({ secrets, syncBudgetMs = 1000, workDelayMs = 0, faultRate = 0 } = {}) {
  const verify = verifier(secrets);
  const deliveries = new Map(); // webhook-id → {done, result, expires, promise, async}
  let shuttingDown = false;

  const ready = () => !shuttingDown;

  function remember(id, entry) {
    deliveries.set(id, entry);
    if (deliveries.size > DEDUP_MAX) {
      // Map keeps insertion order: drop the oldest finished entries.
      for (const [k, v] of deliveries) {
        if (deliveries.size <= DEDUP_MAX) break;
        if (v.done) deliveries.delete(k);
      }
    }
  }
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [k, v] of deliveries) if (v.done && v.expires < now) deliveries.delete(k);
  }, 30000);
  sweep.unref();

  /** run performs the reaction and resolves to a Result (§7.1); it never rejects. */
  async function run(env, signal) {
    const result = (part) => ({ task_id: env.task_id, claim_epoch: env.claim_epoch, ...part });
    try {
      if (env.payload_url) env = await fetchPayload(env, signal);
      const handler = reactions[env.reaction];
      if (!handler) throw new TerminalError(`account/1 has no reaction ${JSON.stringify(env.reaction)}`);
      if (env.reaction === "work") {
        const label = Number(env.resource?.labels?.[DELAY_LABEL]);
        const delay = Number.isFinite(label) && label > 0 ? label : workDelayMs;
        if (delay > 0) await sleep(delay, signal);
        if (faultRate > 0 && Math.random() < faultRate) throw new Error("injected transient fault (FAKE_FAULT_RATE)");
      }
      const outcome = handler(env.resource ?? {});
      if (env.reaction === "teardown") log("teardown", { name: env.resource?.name, task_id: env.task_id });
      return result({ outcome });
    } catch (err) {
      const terminal = err instanceof TerminalError;
      return result({ error: { message: err?.message ?? String(err), terminal } });
    }
  }

  /** fetchPayload resolves a thin envelope (§5.1). */
  async function fetchPayload(env, signal) {
    const r = await fetch(env.payload_url, { headers: { authorization: `Bearer ${env.callback.token}` }, redirect: "manual", signal });
    if (r.status === 200) {
      const full = await r.json();
      return { ...full, callback: env.callback };
    }
    throw new Error(`payload_url answered ${r.status}`); // 409, 410, 401, 503: transient (§5.1)
  }

  /** deliverCallback POSTs the Result to callback.url (§8), retrying transient answers. */
  async function deliverCallback(env, result) {
    const until = (env.deadline ? Date.parse(env.deadline) : Date.now() + 10 * 60 * 1000) + 60 * 1000;
    for (let attempt = 0; ; attempt++) {
      let status = 0, retryAfter = null, text = "";
      try {
        ({ status, retryAfter, text } = await postJSON(env.callback.url, env.callback.token, result));
      } catch (err) {
        text = String(err?.message ?? err);
      }
      if (status === 200) return log("callback delivered", { task_id: env.task_id, answer: text.trim() });
      const transient = status === 0 || status === 408 || status === 425 || status === 429 || status >= 500;
      if (!transient) return log("callback refused", { task_id: env.task_id, status, answer: text.trim() });
      const backoff = Math.min(30000, 250 * 2 ** attempt) * (0.5 + Math.random());
      const wait = retryAfter && /^[0-9]+$/.test(retryAfter) ? Number(retryAfter) * 1000 : backoff;
      if (Date.now() + wait > until) return log("callback given up", { task_id: env.task_id, status });
      await sleep(wait);
    }
  }

  /** heartbeat keeps the claim alive while async work runs (§9); a 409 aborts it. */
  function heartbeat(env, controller) {
    const u = new URL(env.callback.url);
    u.pathname = u.pathname.endsWith("/outcome") ? u.pathname.slice(0, -"/outcome".length) + "/heartbeat" : u.pathname.replace(/\/?$/, "/heartbeat");
    const left = env.deadline ? Date.parse(env.deadline) - Date.now() : 30000;
    const every = Math.max(1000, left / 3);
    const timer = setInterval(async () => {
      try {
        const { status } = await postJSON(u.toString(), env.callback.token, { task_id: env.task_id, claim_epoch: env.claim_epoch });
        if (status === 409) {
          log("heartbeat superseded: stopping the work", { task_id: env.task_id });
          controller.abort(new Error("superseded"));
        }
      } catch { /* transient: try again next interval */ }
    }, every);
    return () => clearInterval(timer);
  }

  /** task answers one task delivery (§4–§8). */
  async function task(req, res, id, env) {
    const seen = deliveries.get(id);
    if (seen?.done) return send(res, 200, seen.result); // §4: the same Result body
    if (seen) {
      seen.async = true; // §4: a 202 obliges us to deliver this run's Result by callback
      return send(res, 202);
    }
    const controller = new AbortController();
    if (env.deadline) {
      const ms = Date.parse(env.deadline) - Date.now();
      if (Number.isFinite(ms)) setTimeout(() => controller.abort(new Error("task deadline passed")), Math.max(0, ms)).unref();
    }
    const entry = { done: false, async: false };
    entry.promise = run(env, controller.signal).then((result) => {
      Object.assign(entry, { done: true, result, expires: Date.now() + DEDUP_TTL_MS });
      return result;
    });
    remember(id, entry);

    const budget = new Promise((resolve) => setTimeout(resolve, syncBudgetMs, null));
    const result = await Promise.race([entry.promise, budget]);
    if (result) {
      if (entry.async) deliverCallback(env, result); // a repeat was answered 202 meanwhile
      return send(res, 200, result);
    }
    // §1, §8: too slow for inline; accept, heartbeat, and post the Result when done.
    entry.async = true;
    send(res, 202);
    const stop = heartbeat(env, controller);
    const final = await entry.promise;
    stop();
    if (controller.signal.aborted && controller.signal.reason?.message === "superseded") return; // §9: do not send it
    await deliverCallback(env, final);
  }

  async function handle(req, res) {
    if (req.method !== "POST") return problem(res, 405, "Method Not Allowed", "only POST", { allow: "POST" });
    const ct = (req.headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
    if (ct !== "application/json") return problem(res, 415, "Unsupported Media Type", "send application/json");
    let raw;
    try {
      raw = await readBody(req);
    } catch (err) {
      return problem(res, err.status ?? 400, err.status === 413 ? "Content Too Large" : "Bad Request", err.message);
    }
    // §3.3: verify first, then parse.
    const bad = verify(req.headers, raw);
    if (bad) {
      log("rejected signature", { reason: bad });
      return problem(res, 401, "Unauthorized", bad);
    }
    let env;
    try {
      env = JSON.parse(raw.toString("utf8"));
    } catch {
      return problem(res, 400, "Bad Request", "the body is not JSON");
    }
    if (env === null || typeof env !== "object" || Array.isArray(env)) return problem(res, 400, "Bad Request", "the body is not a JSON object");

    if (env.type === "health") {
      // §10: one entry per (kind, kind_version) served; unready while shutting down.
      return send(res, 200, { kinds: [{ kind: KIND, kind_version: KIND_VERSION, ready: ready() }] });
    }
    if (env.type !== "task") return problem(res, 400, "Bad Request", `unknown envelope type ${JSON.stringify(env.type)}`);
    // §5: the envelopes a provider cannot use.
    const kv = env.kind_version;
    if (typeof env.task_id !== "string" || !env.task_id || typeof env.kind !== "string" || !env.kind ||
        !Number.isInteger(kv) || kv < 1 || kv > 32767 || (env.payload_url && !env.callback)) {
      return problem(res, 400, "Bad Request", "task_id, kind or kind_version missing or invalid, or payload_url without callback");
    }
    if (env.kind !== KIND || kv !== KIND_VERSION) return problem(res, 404, "Not Found", `no provider here for ${env.kind}/${kv}`);
    if (!ready()) return problem(res, 503, "Service Unavailable", "shutting down", { "retry-after": "1" });
    return task(req, res, req.headers["webhook-id"], env);
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      log("handler failed", { error: String(err?.stack ?? err) });
      if (!res.headersSent) problem(res, 500, "Internal Server Error", "the provider failed");
    });
  });
  server.keepAliveTimeout = 65000;
  return {
    server,
    shutdown() {
      shuttingDown = true;
      clearInterval(sweep);
    },
  };
}

// ---------------------------------------------------------------------------------
// main

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secrets = (process.env.PROVIDER_SECRETS ?? "").split(/[\s,]+/).filter(Boolean);
  const [host, port] = (process.env.PROVIDER_ADDR ?? "127.0.0.1:8080").split(/:(?=[0-9]+$)/);
  const p = createProvider({
    secrets,
    syncBudgetMs: Number(process.env.SYNC_BUDGET_MS ?? 1000),
    workDelayMs: Number(process.env.FAKE_WORK_DELAY_MS ?? 0),
    faultRate: Number(process.env.FAKE_FAULT_RATE ?? 0),
  });
  p.server.listen(Number(port), host, () => log("listening", { addr: `${host}:${port}`, kind: `${KIND}/${KIND_VERSION}`, secrets: secrets.length }));
  const stop = () => {
    // §10: report every kind unready while shutting down, then stop accepting.
    p.shutdown();
    log("shutting down");
    p.server.close(() => process.exit(0));
    p.server.closeIdleConnections();
    setTimeout(() => process.exit(0), 3000).unref();
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
