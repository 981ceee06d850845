// Test helpers: requests signed by the official standardwebhooks package (so every
// test is also an interop check), and a stand-in control plane over real HTTP that
// records the callbacks, heartbeats and payload fetches it receives.
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

export const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
export const OTHER_SECRET = "whsec_" + Buffer.alloc(32, 7).toString("base64");
export const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
export const quiet = { debug() {}, info() {}, warn() {}, error() {} };

let seq = 0;

/** Signed headers for body: webhook-id id, timestamp ts (seconds), one signature per secret. */
export function signed(body, { id = `msg_${++seq}`, ts = Math.floor(Date.now() / 1000), secrets = [SECRET] } = {}) {
  const sig = secrets.map((s) => new Webhook(s).sign(id, new Date(ts * 1000), body)).join(" ");
  return { "content-type": "application/json", "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": sig, traceparent: TRACEPARENT };
}

/** POSTs body (an object or a string) signed to url; returns {status, headers, body, json}. */
export async function deliver(url, body, opts = {}) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  const resp = await fetch(url, { method: "POST", headers: { ...signed(text, opts), ...(opts.headers ?? {}) }, body: text });
  const raw = await resp.text();
  let json;
  try {
    json = JSON.parse(raw);
  } catch {
    json = undefined;
  }
  return { status: resp.status, headers: resp.headers, body: raw, json };
}

/** A task envelope for kind/version with a callback to cp (a controlPlane), overridable. */
export function task(cp, over = {}) {
  const id = over.task_id ?? `task-${++seq}`;
  return {
    type: "task",
    task_id: id,
    claim_epoch: 7,
    attempt: 1,
    task_type: "reconcile",
    reaction: "work",
    trigger: "specChange",
    kind: "vpc",
    kind_version: 1,
    resource: { id: "r-" + id, kind: "vpc", kind_version: 1, name: "team-blue", labels: {}, spec: { cidr: "10.0.0.0/16" }, generation: 3, phase: "Reconciling" },
    deadline: new Date(Date.now() + 60_000).toISOString(),
    callback: cp ? { url: `${cp.url}v1/tasks/${id}/outcome`, token: `cbt_${id}` } : undefined,
    ...over,
  };
}

/**
 * A stand-in control plane: answers each request with answer(req) ({status, body,
 * headers}, default 200 {"result":"applied"}) and records it. waitFor polls the record.
 */
export async function controlPlane(answer = () => ({})) {
  const requests = [];
  const server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString();
    const rec = { method: req.method, path: req.url, headers: req.headers, body: text, json: text ? JSON.parse(text) : undefined };
    requests.push(rec);
    const a = (await answer(rec)) ?? {};
    res.writeHead(a.status ?? 200, { "content-type": "application/json", ...(a.headers ?? {}) });
    res.end(a.body ?? JSON.stringify({ result: "applied" }));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}/`;
  return {
    url,
    requests,
    async waitFor(pred, what = "a request") {
      const deadline = Date.now() + 20_000;
      for (;;) {
        const found = requests.filter(pred);
        if (found.length > 0) return found;
        if (Date.now() > deadline) throw new Error(`no ${what} reached the control plane; got ${JSON.stringify(requests.map((r) => r.path))}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

/** A promise with its resolve, for work a test releases. */
export function gate() {
  let open;
  const p = new Promise((r) => (open = r));
  return { p, open };
}
