// The wire format of docs/protocol.md: envelopes in, Results out.

import { MAX_KIND_VERSION, type Outcome, type Request, type Resource, type Transition } from "./types.js";

/** A resource on the wire (§5). */
export interface WireResource {
  id: string;
  kind: string;
  kind_version: number;
  name: string;
  labels?: Record<string, string>;
  spec?: unknown;
  status?: unknown;
  generation?: number;
  phase?: string;
}

/** The callback object of an envelope (§5, §8). */
export interface WireCallback {
  url: string;
  token: string;
  batch_url?: string;
}

/** A task envelope (§5), as decoded. */
export interface Envelope {
  type: string;
  task_id?: string;
  claim_epoch?: number;
  attempt?: number;
  task_type?: string;
  reaction?: string;
  trigger?: string;
  kind?: string;
  kind_version?: number;
  resource?: WireResource;
  status?: unknown;
  observed?: WireResource[];
  descendants?: WireResource[];
  operation?: { verb: string; input?: unknown };
  transition?: string;
  dedup_token?: string;
  config?: unknown;
  bundle?: string;
  deadline?: string;
  callback?: WireCallback;
  payload_url?: string;
  tasks?: Envelope[];
}

/** The Result of §7: exactly one of outcome and error. */
export interface Result {
  task_id: string;
  claim_epoch: number;
  outcome?: Record<string, unknown>;
  error?: { message: string; terminal: boolean };
}

/** decodeEnvelope parses a delivery body; it throws on what Go's decoder refuses. */
export function decodeEnvelope(body: string): Envelope {
  const v: unknown = JSON.parse(body);
  if (!isObject(v)) throw new Error("json: cannot unmarshal " + jsonKind(v) + " into Go value of type struct");
  const env = v as Record<string, unknown>;
  checkEnvelope(env, "");
  if (env["tasks"] !== undefined && env["tasks"] !== null) {
    if (!Array.isArray(env["tasks"])) throw new Error("json: tasks is not an array");
    env["tasks"].forEach((t, i) => {
      if (!isObject(t)) throw new Error(`json: tasks[${i}] is not an object`);
      checkEnvelope(t, `tasks[${i}].`);
    });
  }
  return env as unknown as Envelope;
}

function checkEnvelope(env: Record<string, unknown>, where: string): void {
  const want = (field: string, ok: (x: unknown) => boolean, what: string): void => {
    const x = env[field];
    if (x !== undefined && x !== null && !ok(x)) throw new Error(`json: ${where}${field} is not ${what}`);
  };
  const isString = (x: unknown): boolean => typeof x === "string";
  want("type", isString, "a string");
  want("task_id", isString, "a string");
  want("claim_epoch", Number.isSafeInteger, "an integer");
  want("attempt", Number.isSafeInteger, "an integer");
  want("task_type", isString, "a string");
  want("reaction", isString, "a string");
  want("trigger", isString, "a string");
  want("kind", isString, "a string");
  want("kind_version", Number.isSafeInteger, "an integer");
  want("transition", isString, "a string");
  want("dedup_token", isString, "a string");
  want("payload_url", isString, "a string");
  want("resource", isObject, "an object");
  want("operation", isObject, "an object");
  want("observed", Array.isArray, "an array");
  want("descendants", Array.isArray, "an array");
  want("bundle", (x) => typeof x === "string" && /^[A-Za-z0-9+/]*={0,2}$/.test(x) && x.length % 4 === 0, "base64");
  want("deadline", (x) => typeof x === "string" && !Number.isNaN(parseDeadline(x)), "an RFC 3339 time");
  want("callback", (x) => isObject(x) && (x["url"] === undefined || typeof x["url"] === "string") &&
    (x["token"] === undefined || typeof x["token"] === "string"), "a callback object");
}

/** parseDeadline returns an RFC 3339 time in epoch milliseconds, NaN if it is not one. */
export function parseDeadline(s: string): number {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i.test(s)) return NaN;
  return Date.parse(s);
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function jsonKind(v: unknown): string {
  if (Array.isArray(v)) return "array";
  if (v === null) return "null";
  return typeof v;
}

/** toResource converts a wire resource. */
export function toResource(r: WireResource): Resource {
  const out: Resource = {
    id: r.id,
    kind: r.kind,
    kindVersion: r.kind_version,
    name: r.name,
    labels: r.labels ?? {},
    spec: r.spec,
    generation: r.generation ?? 0,
    phase: r.phase ?? "",
  };
  if (r.status !== undefined && r.status !== null) out.status = r.status;
  return out;
}

/** toRequest builds the Request work receives for a task envelope. */
export function toRequest(env: Envelope): Request {
  const resource = env.resource ? toResource(env.resource) : toResource({ id: "", kind: "", kind_version: 0, name: "" });
  const req: Request = {
    taskId: env.task_id ?? "",
    claimEpoch: env.claim_epoch ?? 0,
    attempt: env.attempt ?? 0,
    reaction: env.reaction ?? "",
    kindVersion: env.kind_version ?? 0,
    trigger: (env.trigger ?? "") as Request["trigger"],
    taskType: (env.task_type ?? "") as Request["taskType"],
    resource,
    observed: (env.observed ?? []).map(toResource),
    descendants: (env.descendants ?? []).map(toResource),
    generation: env.resource?.generation ?? 0,
  };
  if (env.status !== undefined && env.status !== null) req.status = env.status;
  if (env.operation) {
    req.operation = { verb: env.operation.verb };
    if (env.operation.input !== undefined && env.operation.input !== null) req.operation.input = env.operation.input;
  }
  if (env.transition) req.transition = env.transition as Transition;
  if (env.dedup_token) req.dedupToken = env.dedup_token;
  if (env.deadline) req.deadline = new Date(parseDeadline(env.deadline));
  if (env.config !== undefined && env.config !== null) req.config = env.config;
  if (env.bundle) req.bundle = Buffer.from(env.bundle, "base64");
  return req;
}

/**
 * encodeOutcome validates an Outcome as webhooksdk's Outcome.Validate does and returns
 * its wire form, fields in webhooksdk's order with empty ones left out. It throws an
 * Error naming every problem.
 */
export function encodeOutcome(o: Outcome): Record<string, unknown> {
  if (typeof o !== "object" || o === null || Array.isArray(o)) throw new Error("invalid outcome: not an object");
  const errs: string[] = [];
  const out: Record<string, unknown> = {};
  const present = (x: unknown): boolean => x !== undefined && x !== null;
  const checkJSON = (where: string, x: unknown): void => {
    try {
      if (JSON.stringify(x) === undefined) errs.push(`${where}: not valid JSON`);
    } catch {
      errs.push(`${where}: not valid JSON`);
    }
  };
  const kvOK = (v: unknown): boolean => Number.isInteger(v) && (v as number) >= 1 && (v as number) <= MAX_KIND_VERSION;
  if (present(o.status)) {
    checkJSON("status", o.status);
    out["status"] = o.status;
  }
  if (o.conditions?.length) {
    out["conditions"] = o.conditions.map((c) => {
      const w: Record<string, unknown> = { type: c.type, status: c.status };
      if (c.reason) w["reason"] = c.reason;
      if (c.message) w["message"] = c.message;
      return w;
    });
  }
  if (o.children?.length) {
    out["children"] = o.children.map((c, i) => {
      const where = `children[${i}]`;
      if (!c.kind || !c.name) errs.push(`${where}: kind and name are required`);
      if (!kvOK(c.kindVersion)) errs.push(`${where}: kind_version ${String(c.kindVersion ?? 0)} outside 1..${MAX_KIND_VERSION}`);
      const w: Record<string, unknown> = { kind: c.kind, kind_version: c.kindVersion, name: c.name };
      if (c.labels && Object.keys(c.labels).length > 0) w["labels"] = c.labels;
      if (present(c.spec)) {
        checkJSON(`${where}.spec`, c.spec);
        w["spec"] = c.spec;
      }
      return w;
    });
  }
  if (o.edges?.length) {
    out["edges"] = o.edges.map((e, i) => {
      const where = `edges[${i}]`;
      if (!e.dependent?.kind || !e.dependent?.name || !e.dependency?.kind || !e.dependency?.name) {
        errs.push(`${where}: dependent and dependency need kind and name`);
      }
      const w: Record<string, unknown> = {
        dependent: { kind: e.dependent?.kind, name: e.dependent?.name },
        dependency: { kind: e.dependency?.kind, name: e.dependency?.name },
      };
      if (e.values?.length) {
        w["values"] = e.values.map((v, j) => {
          if (!v.dependentField?.startsWith("/") || !v.sourceField?.startsWith("/")) {
            errs.push(`${where}.values[${j}]: fields must be JSON Pointers starting with "/"`);
          }
          return { dependent_field: v.dependentField, source_field: v.sourceField };
        });
      }
      return w;
    });
  }
  if (o.configs?.length) {
    out["configs"] = o.configs.map((c, i) => {
      const where = `configs[${i}]`;
      if (!c.kind || !c.name) errs.push(`${where}: kind and name are required`);
      if (!kvOK(c.kindVersion)) errs.push(`${where}: kind_version ${String(c.kindVersion ?? 0)} outside 1..${MAX_KIND_VERSION}`);
      if (present(c.spec) && !isObject(c.spec)) errs.push(`${where}.spec: is not a JSON object`);
      const w: Record<string, unknown> = { name: c.name, kind: c.kind, kind_version: c.kindVersion };
      if (c.isDefault) w["is_default"] = true;
      if (present(c.spec)) w["spec"] = c.spec;
      if (c.data?.length) w["data"] = Buffer.from(c.data).toString("base64");
      return w;
    });
  }
  if (present(o.operationOutput)) {
    checkJSON("operation_output", o.operationOutput);
    out["operation_output"] = o.operationOutput;
  }
  if (o.sideEffectDone) out["side_effect_done"] = true;
  if (errs.length > 0) throw new Error("invalid outcome: " + errs.join("\n"));
  return out;
}
