// The conformance vectors of protocol/vectors (see its README): every case, run
// in-process against the SDK's Endpoint (transport "http") or its Lambda adapter
// (transport "lambda"), with the injected clock and a scripted fetch playing the
// control plane. No case is skipped: the SDK implements every optional feature.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { createEndpoint, TerminalError } from "@convergeplane/provider-sdk";
import { createHandler } from "@convergeplane/provider-sdk/lambda";

const dir = new URL("../../../protocol/vectors/", import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

test("the vectors are there", () => assert.ok(files.length >= 50, `only ${files.length} vectors in ${dir}`));

for (const file of files) {
  const c = JSON.parse(readFileSync(new URL(file, dir), "utf8"));
  test(`vector ${c.name} (${c.section})`, () => runCase(c));
}

async function runCase(c) {
  const failures = [];
  const calls = new Map();
  let released;
  const answered = new Promise((r) => (released = r));
  const cancelledSeen = new Set();

  const work = async (req, signal) => {
    const h = c.handlers?.[req.taskId];
    if (!h) {
      failures.push(`the handler ran for task ${req.taskId}, which the case does not list`);
      return {};
    }
    calls.set(req.taskId, (calls.get(req.taskId) ?? 0) + 1);
    const seen = wireView(req);
    for (const [k, v] of Object.entries(h.sees ?? {})) {
      if (!jsonEqual(seen[k], v)) failures.push(`task ${req.taskId}: the handler saw ${k} = ${JSON.stringify(seen[k])}, want ${JSON.stringify(v)}`);
    }
    if (h.wait === "answered") await answered;
    if (h.wait === "cancelled") {
      await new Promise((resolve) => {
        const t = setTimeout(() => {
          failures.push(`task ${req.taskId}: not cancelled within 30 s`);
          resolve();
        }, 30_000);
        signal.addEventListener("abort", () => (clearTimeout(t), cancelledSeen.add(req.taskId), resolve()), { once: true });
        if (signal.aborted) (clearTimeout(t), cancelledSeen.add(req.taskId), resolve());
      });
      throw new Error("cancelled");
    }
    if (h.error) throw h.error.terminal ? new TerminalError(h.error.message) : new Error(h.error.message);
    return fromWireOutcome(h.outcome ?? {});
  };
  const providers = c.setup.providers.map((p) => ({ kind: p.kind, version: p.kind_version, ready: () => p.ready, work }));

  const outgoing = c.outgoing ?? [];
  let next = 0;
  const fetch = async (url, init) => {
    const i = next++;
    const want = outgoing[i];
    if (!want) {
      failures.push(`unexpected outgoing call ${i}: ${init.method} ${url} ${init.body ?? ""}`);
      return new Response("{}", { status: 400 });
    }
    const where = `outgoing[${i}]`;
    if (init.method !== want.method || url !== want.url) failures.push(`${where}: ${init.method} ${url}, want ${want.method} ${want.url}`);
    const headers = lowerKeys(init.headers ?? {});
    checkHeaders(where, headers, want.headers ?? {}, failures);
    if (want.body !== undefined) {
      let got;
      try {
        got = JSON.parse(init.body);
      } catch {
        failures.push(`${where}: body ${init.body} is not JSON`);
      }
      compareJSON(where + " body", got, want.body, want.ignore ?? [], failures);
    }
    return new Response(want.answer.body ?? "", { status: want.answer.status, headers: want.answer.headers ?? {} });
  };

  const options = {
    secrets: c.setup.secrets,
    now: () => c.setup.now * 1000,
    toleranceMs: c.setup.tolerance_seconds * 1000,
    syncBudgetMs: c.setup.sync_budget_ms,
    heartbeatEveryMs: c.setup.heartbeat_every_ms,
    callbackBatch: { max: c.setup.callback_batch ? 64 : 1 },
    callbackRetry: { initialMs: 1, maxMs: 5, graceMs: 60_000 },
    fetch,
    logger: quiet,
  };

  let status, headers, body, threw;
  if (c.setup.transport === "lambda") {
    const handler = createHandler(providers, options);
    try {
      const res = await handler(c.request.event);
      ({ statusCode: status, headers, body } = res);
    } catch (err) {
      threw = err;
    }
    released();
  } else {
    const endpoint = createEndpoint(providers, options);
    const a = await endpoint.handle({ method: c.request.method, headers: c.request.headers ?? {}, body: c.request.body ?? "" });
    released();
    await endpoint.shutdown(30_000);
    ({ status, headers, body } = a);
  }

  const e = c.expect;
  if (e.function_error) {
    if (!threw) failures.push(`the Lambda adapter returned ${status} ${body}, want a function error`);
  } else {
    if (threw) throw threw;
    headers = lowerKeys(headers ?? {});
    if (status !== e.status) failures.push(`status ${status}, want ${e.status}: ${body}`);
    checkHeaders("answer", headers, e.headers ?? {}, failures);
    for (const h of e.headers_present ?? []) if (headers[h.toLowerCase()] === undefined) failures.push(`answer: no ${h} header`);
    let parsed;
    if (e.problem || e.body !== undefined) {
      try {
        parsed = JSON.parse(body);
      } catch {
        failures.push(`answer body ${JSON.stringify(body)} is not JSON`);
      }
    }
    if (e.problem) {
      if (mediaType(headers["content-type"]) !== "application/problem+json") failures.push(`problem content-type ${headers["content-type"]}`);
      if (parsed?.status !== e.status) failures.push(`problem status ${parsed?.status}, want ${e.status}`);
    }
    if (e.body !== undefined) compareJSON("answer body", parsed, e.body, e.ignore ?? [], failures);
  }
  if (next < outgoing.length) failures.push(`outgoing calls ${next}..${outgoing.length - 1} never made (next: ${outgoing[next].method} ${outgoing[next].url})`);
  for (const [id, h] of Object.entries(c.handlers ?? {})) {
    if (calls.get(id) !== 1) failures.push(`the handler ran ${calls.get(id) ?? 0} times for task ${id}, want once`);
    if (h.wait === "cancelled" && !cancelledSeen.has(id)) failures.push(`task ${id} was not cancelled`);
  }
  assert.deepEqual(failures, [], `${c.name}: ${c.description}`);
}

/** wireView maps a Request onto the envelope's field names, for `sees`. */
function wireView(req) {
  const resource = (r) => r && dropNulls({ id: r.id, kind: r.kind, kind_version: r.kindVersion, name: r.name, labels: r.labels, spec: r.spec, status: r.status, generation: r.generation, phase: r.phase });
  return dropNulls({
    task_id: req.taskId, claim_epoch: req.claimEpoch, attempt: req.attempt, kind_version: req.kindVersion, reaction: req.reaction,
    trigger: req.trigger, task_type: req.taskType, resource: resource(req.resource), config: req.config, operation: req.operation,
    transition: req.transition, dedup_token: req.dedupToken,
  });
}

/** fromWireOutcome turns a case's wire-shaped outcome into the SDK's Outcome. */
function fromWireOutcome(o) {
  const out = {};
  if (o.status !== undefined) out.status = o.status;
  if (o.conditions) out.conditions = o.conditions;
  if (o.children) out.children = o.children.map((c) => ({ kind: c.kind, kindVersion: c.kind_version, name: c.name, labels: c.labels, spec: c.spec }));
  if (o.edges) {
    out.edges = o.edges.map((e) => ({ dependent: e.dependent, dependency: e.dependency, values: e.values?.map((v) => ({ dependentField: v.dependent_field, sourceField: v.source_field })) }));
  }
  if (o.configs) {
    out.configs = o.configs.map((c) => ({ name: c.name, kind: c.kind, kindVersion: c.kind_version, isDefault: c.is_default, spec: c.spec, data: c.data === undefined ? undefined : Buffer.from(c.data, "base64") }));
  }
  if (o.operation_output !== undefined) out.operationOutput = o.operation_output;
  if (o.side_effect_done) out.sideEffectDone = true;
  return out;
}

function checkHeaders(where, got, want, failures) {
  for (const [k, v] of Object.entries(want)) {
    const g = got[k.toLowerCase()];
    const same = k.toLowerCase() === "content-type" ? mediaType(g) === mediaType(v) : g === v;
    if (!same) failures.push(`${where}: header ${k} = ${JSON.stringify(g)}, want ${JSON.stringify(v)}`);
  }
}

function mediaType(v) {
  return v === undefined ? undefined : String(v).split(";")[0].trim().toLowerCase();
}

function lowerKeys(h) {
  const entries = h instanceof Headers ? [...h.entries()] : Object.entries(h);
  return Object.fromEntries(entries.map(([k, v]) => [k.toLowerCase(), String(v)]));
}

/** compareJSON compares as the README says: nulls dropped, batch results by task_id, ignore pointers present only. */
function compareJSON(where, got, want, ignore, failures) {
  const g = normalize(got);
  const w = normalize(want);
  for (const ptr of ignore) {
    if (!resolvePointer(g, ptr).found) {
      failures.push(`${where}: ${ptr} is missing`);
      continue;
    }
    setPointer(g, ptr, "(ignored)");
    setPointer(w, ptr, "(ignored)");
  }
  if (!jsonEqual(g, w)) failures.push(`${where}: ${JSON.stringify(g)}, want ${JSON.stringify(w)}`);
}

function normalize(v) {
  const out = dropNulls(structuredClone(v));
  if (out && out.type === "batch" && Array.isArray(out.results)) out.results.sort((a, b) => String(a.task_id).localeCompare(String(b.task_id)));
  return out;
}

function dropNulls(v) {
  if (Array.isArray(v)) return v.map(dropNulls);
  if (v && typeof v === "object" && !(v instanceof Uint8Array)) {
    const o = {};
    for (const [k, x] of Object.entries(v)) if (x !== null && x !== undefined) o[k] = dropNulls(x);
    return o;
  }
  return v;
}

function jsonEqual(a, b) {
  try {
    assert.deepStrictEqual(dropNulls(a), dropNulls(b));
    return true;
  } catch {
    return false;
  }
}

function tokens(ptr) {
  return ptr.split("/").slice(1).map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function resolvePointer(v, ptr) {
  let cur = v;
  for (const t of tokens(ptr)) {
    if (cur === null || typeof cur !== "object" || !(t in cur)) return { found: false };
    cur = cur[t];
  }
  return { found: true, value: cur };
}

function setPointer(v, ptr, value) {
  const ts = tokens(ptr);
  let cur = v;
  for (const t of ts.slice(0, -1)) {
    if (cur === null || typeof cur !== "object") return;
    cur = cur[t];
  }
  if (cur && typeof cur === "object") cur[ts.at(-1)] = value;
}
