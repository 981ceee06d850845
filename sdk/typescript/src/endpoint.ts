// The provider endpoint: verification, deduplication, the sync budget, callbacks,
// heartbeats, thin payloads and batches (webhooksdk's endpoint.go and callback.go).

import { setMaxListeners } from "node:events";
import { errorMessage, isTerminal, ShutdownError, SupersededError } from "./errors.js";
import { ResultCache } from "./cache.js";
import {
  CALLBACK_TIMEOUT_MS,
  HEARTBEAT_MIN_MS,
  HEARTBEAT_NO_DEADLINE_MS,
  resolve,
  RETRY_AFTER_UNREADY,
  type EndpointOptions,
  type Logger,
  type Resolved,
} from "./options.js";
import { parseSecrets, verify, type Secret } from "./signature.js";
import { MAX_KIND_VERSION, type Provider, type Request } from "./types.js";
import { decodeEnvelope, encodeOutcome, parseDeadline, toRequest, type Envelope, type Result } from "./wire.js";

/** One request from the dispatcher, as a host received it. */
export interface Delivery {
  method: string;
  /** The request headers; names are matched case-insensitively. */
  headers: Record<string, string | string[] | undefined>;
  /** The raw body, exactly as received. */
  body: Uint8Array | string;
  /** The body's length as the request declared or a host counted it, when the host stopped reading past the cap. */
  declaredLength?: number;
  /** Aborts when the caller stopped waiting for the answer. */
  signal?: AbortSignal;
}

/** The answer to a Delivery. */
export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * How the caller of {@link Endpoint.handle} waits: "http" over a connection (the sync
 * budget, then 202); "sync" a host that freezes once it answered and whose caller waits
 * however long work takes (a Lambda RequestResponse invoke, a Function URL), answered
 * inline; "event" a host whose answer nobody reads (a Lambda Event invoke), which
 * delivers the Result to the callback before answering 202.
 */
export type Invocation = "http" | "sync" | "event";

const STATUS_TEXT: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  404: "Not Found",
  405: "Method Not Allowed",
  413: "Request Entity Too Large",
  415: "Unsupported Media Type",
  500: "Internal Server Error",
  503: "Service Unavailable",
};

const USER_AGENT = "converge-provider-sdk-typescript";

interface Slot {
  key: string;
  p: Provider;
  /** The last config onConfig saw, and the chain serialising its calls. */
  seen: boolean;
  lastConfig: string;
  configuring: Promise<void>;
}

class Run {
  readonly controller = new AbortController();
  body = "";
  async = false;
  finished = false;
  executing: Promise<void> = Promise.resolve();
  beating: Promise<void> = Promise.resolve();
  readonly done: Promise<void>;
  resolveDone!: () => void;
  cancelDeadline: () => void = () => {};

  constructor(
    readonly id: string,
    readonly webhookId: string,
    readonly traceparent: string,
    readonly env: Envelope,
    readonly slot: Slot,
  ) {
    this.done = new Promise((r) => (this.resolveDone = r));
  }
}

/** What delivering a Result needs of its run. */
interface Delivering {
  env: Envelope;
  traceparent: string;
  webhookId: string;
}

/** Returns the Endpoint serving providers: see {@link Endpoint}. */
export function createEndpoint(providers: readonly Provider[], options: EndpointOptions): Endpoint {
  return new Endpoint(providers, options);
}

/**
 * Endpoint serves the dispatcher's deliveries (tasks, batches and health probes) for a
 * set of providers, one per (kind, version). Hosts hand it each request with
 * {@link Endpoint.handle}: {@link serve} over HTTP, the Lambda adapter per invocation.
 */
export class Endpoint {
  readonly #o: Resolved;
  readonly #secrets: Secret[];
  readonly #log: Logger;
  readonly #slots: Slot[] = [];
  readonly #byKind = new Map<string, Slot>();
  readonly #inflight = new Map<string, Run>();
  readonly #results: ResultCache;
  readonly #pending = new Set<Promise<unknown>>();
  readonly #base = new AbortController();
  readonly #batcher: CallbackBatcher | undefined;
  #closing = false;

  constructor(providers: readonly Provider[], options: EndpointOptions) {
    try {
      this.#o = resolve(options);
      if (!options.secrets || options.secrets.length === 0) throw new Error("no signing secrets; set secrets");
      this.#secrets = parseSecrets(options.secrets);
      if (providers.length === 0) throw new Error("no providers");
      providers.forEach((p, i) => {
        if (!p || typeof p.work !== "function") throw new Error(`provider ${i} has no work function`);
        if (typeof p.kind !== "string" || p.kind === "") throw new Error(`provider ${i}: empty kind`);
        if (!Number.isInteger(p.version) || p.version < 1 || p.version > MAX_KIND_VERSION) {
          throw new Error(`provider ${i}: kind "${p.kind}": version ${p.version} outside 1..${MAX_KIND_VERSION}`);
        }
        const key = kindKey(p.kind, p.version);
        if (this.#byKind.has(key)) throw new Error(`two providers for ${key}`);
        const slot: Slot = { key, p, seen: false, lastConfig: "", configuring: Promise.resolve() };
        this.#slots.push(slot);
        this.#byKind.set(key, slot);
      });
    } catch (err) {
      throw new Error(`provider-sdk endpoint: ${errorMessage(err)}`);
    }
    this.#log = this.#o.logger;
    this.#results = new ResultCache(this.#o.cacheEntries, this.#o.cacheBytes, this.#o.cacheTtlMs);
    if (this.#o.cbBatchMax > 1) this.#batcher = new CallbackBatcher(this, this.#o.cbBatchWindowMs, this.#o.cbBatchMax);
  }

  /** The (kind, version) pairs served, as "kind/vN". */
  get kinds(): string[] {
    return this.#slots.map((s) => s.key);
  }

  /** The request body cap. */
  get maxBodyBytes(): number {
    return this.#o.maxBodyBytes;
  }

  /**
   * Stops accepting tasks (new ones get 503, health reports every kind unready) and
   * waits for work in flight, heartbeats and callbacks. If that takes over timeoutMs it
   * aborts every work signal and pending callback (reason {@link ShutdownError}) and
   * rejects; the dispatcher re-dispatches those tasks when their leases expire.
   */
  async shutdown(timeoutMs: number): Promise<void> {
    this.#closing = true;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeoutMs)));
    const idle = (async () => {
      while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
      return false;
    })();
    const late = await Promise.race([idle, timedOut]);
    clearTimeout(timer);
    const reason = new ShutdownError();
    for (const rn of this.#inflight.values()) rn.controller.abort(reason);
    this.#base.abort(reason);
    if (late) throw new Error(`provider-sdk shutdown: work still running after ${timeoutMs} ms`);
  }

  #track<T>(p: Promise<T>): Promise<T> {
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p)).catch(() => {});
    return p;
  }

  /**
   * Serves one delivery and returns its answer, or undefined when the caller stopped
   * waiting (d.signal) before there was one.
   */
  async handle(d: Delivery, inv: Invocation = "http"): Promise<Answer | undefined> {
    const header = headerGetter(d.headers);
    // Every task of a batch waits on the request's signal: many listeners, no leak.
    if (d.signal) setMaxListeners(0, d.signal);
    if (d.method.toUpperCase() !== "POST") {
      const a = problem(405, "only POST is served");
      a.headers["allow"] = "POST";
      return a;
    }
    const ct = header("content-type");
    if (ct !== undefined && ct !== "" && ct.split(";")[0]!.trim().toLowerCase() !== "application/json") {
      return problem(415, "content type must be application/json");
    }
    const raw = typeof d.body === "string" ? Buffer.from(d.body) : d.body;
    if (raw.byteLength > this.#o.maxBodyBytes || (d.declaredLength ?? 0) > this.#o.maxBodyBytes) return problem(413, `body exceeds ${this.#o.maxBodyBytes} bytes`);
    const body = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString("utf8");
    try {
      verify(this.#secrets, header, body, this.#o.now(), this.#o.toleranceMs);
    } catch (err) {
      return problem(401, "signature verification failed: " + errorMessage(err));
    }
    let env: Envelope;
    try {
      env = decodeEnvelope(body);
    } catch (err) {
      return problem(400, "malformed envelope: " + errorMessage(err));
    }
    const until = Date.now() + this.#o.syncBudgetMs;
    const ctx: Ctx = { webhookId: header("webhook-id") ?? "", traceparent: traceParent(header("traceparent")), inv, until, signal: d.signal };
    switch (env.type) {
      case "health":
        return this.#health();
      case "task":
        return this.#task(env, ctx);
      case "batch":
        return this.#batch(env.tasks ?? [], ctx);
      default:
        return problem(400, `malformed envelope: unknown type ${JSON.stringify(env.type ?? "")}`);
    }
  }

  #health(): Answer {
    const kinds = this.#slots.map((s) => ({ kind: s.p.kind, kind_version: s.p.version, ready: !this.#closing && this.#ready(s) }));
    const a = json(200, JSON.stringify({ kinds }));
    a.headers["cache-control"] = "no-store";
    return a;
  }

  async #batch(tasks: Envelope[], ctx: Ctx): Promise<Answer> {
    if (tasks.length === 0) return problem(400, "malformed batch: no tasks");
    this.#log.debug("serving a batch", { tasks: tasks.length });
    const results = new Array<string>(tasks.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < tasks.length; i = next++) {
        const env = tasks[i]!;
        results[i] = batchResult(await this.#task(env, ctx), env);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#o.batchConcurrency, tasks.length) }, worker));
    return json(200, `{"type":"batch","results":[${results.join(",")}]}`);
  }

  async #task(env: Envelope, ctx: Ctx): Promise<Answer | undefined> {
    if (!env.task_id) return problem(400, "malformed envelope: task_id is required");
    if (!env.kind) return problem(400, "malformed envelope: kind is required");
    const kv = env.kind_version ?? 0;
    if (kv < 1 || kv > MAX_KIND_VERSION) return problem(400, `malformed envelope: kind_version ${kv} outside 1..${MAX_KIND_VERSION}`);
    if (env.callback && !env.callback.url) return problem(400, "malformed envelope: callback.url is empty");
    if (!env.callback && ctx.inv === "event") return problem(400, "malformed envelope: an event invocation needs a callback");
    if (env.payload_url && !env.callback) return problem(400, "malformed envelope: payload_url without a callback token to fetch it with");
    const key = kindKey(env.kind, kv);
    const slot = this.#byKind.get(key);
    if (!slot) return problem(404, `no provider for ${key} at this endpoint`);
    const id = `${ctx.webhookId}\0${env.task_id}\0${env.claim_epoch ?? 0}`;
    const ready = this.#ready(slot);

    const cached = this.#results.get(id, Date.now());
    if (cached !== undefined) {
      if (ctx.inv === "event") {
        // Nobody reads this answer: the Result reaches the dispatcher only by the callback.
        await this.#deliver({ env, traceparent: ctx.traceparent, webhookId: ctx.webhookId }, cached);
        return accepted();
      }
      return json(200, cached);
    }
    const running = this.#inflight.get(id);
    if (running) {
      if (ctx.inv === "event" && running.env.callback) {
        this.#markAsync(running);
        return this.#settle(running, ctx);
      }
      if (running.env.callback && ctx.inv === "http") {
        // The promise of a callback is what the 202 means, even if the first request is
        // still waiting inline: mark the run so its Result is delivered too.
        this.#markAsync(running);
        return accepted();
      }
      return this.#awaitInline(running, ctx);
    }
    if (this.#closing) return unavailable("endpoint is shutting down");
    if (!ready) return unavailable(`provider ${key} is not ready`);

    const rn = new Run(id, ctx.webhookId, ctx.traceparent, env, slot);
    if (env.deadline) {
      const reason = new DOMException("task deadline exceeded", "TimeoutError");
      rn.cancelDeadline = after(() => rn.controller.abort(reason), parseDeadline(env.deadline) - Date.now());
    }
    this.#inflight.set(id, rn);
    if (ctx.inv === "event") this.#markAsync(rn);
    rn.executing = this.#track(this.#execute(rn));
    switch (ctx.inv) {
      case "sync":
        return this.#awaitInline(rn, ctx);
      case "event":
        return this.#settle(rn, ctx);
      default:
        return this.#await(rn, ctx);
    }
  }

  /** Answers inline if the Result is ready within the sync budget (or at all, without a callback), else 202. */
  async #await(rn: Run, ctx: Ctx): Promise<Answer | undefined> {
    if (!rn.env.callback) return this.#awaitInline(rn, ctx);
    const outcome = await race(rn.done, ctx.until - Date.now(), ctx.signal);
    if (outcome === "done") return json(200, rn.body);
    if (!rn.finished) this.#markAsync(rn);
    // The dispatcher gave up waiting: the Result must reach it by the callback.
    if (outcome === "aborted") return undefined;
    return rn.finished ? json(200, rn.body) : accepted();
  }

  /** Answers with the Result however long work takes. */
  async #awaitInline(rn: Run, ctx: Ctx): Promise<Answer | undefined> {
    const outcome = await race(rn.done, Infinity, ctx.signal);
    return outcome === "done" ? json(200, rn.body) : undefined;
  }

  /** Answers 202 once rn, already promised to the callback, delivered its Result and stopped beating. */
  async #settle(rn: Run, ctx: Ctx): Promise<Answer | undefined> {
    const outcome = await race(Promise.all([rn.executing, rn.beating]).then(() => undefined), Infinity, ctx.signal);
    return outcome === "done" ? accepted() : undefined;
  }

  /** Promises rn, not yet finished, to its callback and starts its heartbeats. */
  #markAsync(rn: Run): void {
    if (rn.async || rn.finished) return;
    rn.async = true;
    rn.beating = this.#track(this.#heartbeat(rn));
  }

  async #execute(rn: Run): Promise<void> {
    const res = await this.#work(rn);
    rn.cancelDeadline();
    const superseded = rn.controller.signal.reason instanceof SupersededError;
    rn.controller.abort(new DOMException("work finished", "AbortError"));
    rn.body = JSON.stringify(res);
    rn.finished = true;
    this.#inflight.delete(rn.id);
    this.#results.put(rn.id, rn.body, Date.now());
    rn.resolveDone();
    if (!rn.async) return;
    if (superseded) {
      this.#log.info("task superseded; result dropped", taskAttrs(rn));
      return;
    }
    await this.#deliver(rn, rn.body);
  }

  /** Fetches a thin envelope's documents, calls onConfig and work; any failure becomes an error Result. */
  async #work(rn: Run): Promise<Result> {
    const res: Result = { task_id: rn.env.task_id ?? "", claim_epoch: rn.env.claim_epoch ?? 0 };
    let env = rn.env;
    const signal = rn.controller.signal;
    if (env.payload_url) {
      try {
        env = await this.#fetchPayload(env, rn.traceparent, signal);
      } catch (err) {
        if (err instanceof SupersededError) rn.controller.abort(err);
        res.error = { message: errorMessage(err), terminal: false };
        this.#log.warn("cannot fetch the task payload", { ...taskAttrs(rn), err: errorMessage(err) });
        return res;
      }
    }
    const req = toRequest(env);
    let out: unknown;
    try {
      await this.#configure(rn.slot, req, env);
      out = await rn.slot.p.work(req, signal);
    } catch (err) {
      const message = errorMessage(err) || "unspecified error";
      res.error = { message, terminal: isTerminal(err) };
      this.#log.info("task failed", { ...taskAttrs(rn), err: message, terminal: res.error.terminal });
      return res;
    }
    try {
      res.outcome = encodeOutcome((out ?? {}) as Parameters<typeof encodeOutcome>[0]);
    } catch (err) {
      res.error = { message: errorMessage(err), terminal: false };
      this.#log.error("provider returned an invalid outcome", { ...taskAttrs(rn), err: errorMessage(err) });
    }
    return res;
  }

  /** Calls onConfig, serialised per provider, when req's effective config differs from the last one it saw. */
  #configure(slot: Slot, req: Request, env: Envelope): Promise<void> {
    const onConfig = slot.p.onConfig;
    if (!onConfig) return Promise.resolve();
    const run = slot.configuring.then(async () => {
      const key = JSON.stringify(env.config ?? null) + "\0" + (env.bundle ?? "");
      if (slot.seen && slot.lastConfig === key) return;
      const cfg: { spec?: unknown; data?: Uint8Array } = {};
      if (req.config !== undefined) cfg.spec = req.config;
      if (req.bundle !== undefined) cfg.data = req.bundle;
      await onConfig.call(slot.p, cfg);
      slot.seen = true; // only once onConfig returned normally
      slot.lastConfig = key;
    });
    slot.configuring = run.catch(() => {});
    return run;
  }

  #ready(s: Slot): boolean {
    if (!s.p.ready) return true;
    try {
      return s.p.ready() === true;
    } catch (err) {
      this.#log.error("provider ready threw", { kind: s.p.kind, kind_version: s.p.version, err: errorMessage(err) });
      return false;
    }
  }

  /**
   * POSTs a Result body to the callback until it is accepted, refused for good, or the
   * deadline plus the grace passes. The first attempt goes in a batched callback when the
   * dispatcher offers one; network errors, 408, 425, 429 and 5xx are retried with
   * exponential backoff (at least the Retry-After asked for); anything else ends delivery.
   */
  async #deliver(rn: Delivering, body: string): Promise<void> {
    const cb = rn.env.callback!;
    const log = { task_id: rn.env.task_id, claim_epoch: rn.env.claim_epoch, webhook_id: rn.webhookId };
    const deadline = rn.env.deadline ? parseDeadline(rn.env.deadline) : NaN;
    const stopAt = (Number.isNaN(deadline) || deadline < Date.now() ? Date.now() : deadline) + this.#o.graceMs;
    const giveUp = new AbortController();
    const cancelTimer = after(() => giveUp.abort(new DOMException("callback deadline", "TimeoutError")), stopAt - Date.now());
    const signal = AbortSignal.any([this.#base.signal, giveUp.signal]);
    const backoff = new Backoff(this.#o.retryInitialMs, this.#o.retryMaxMs);
    try {
      for (let attempt = 1; ; attempt++) {
        let status = 0;
        let retryAfterMs = 0;
        let batched = false;
        let failure: unknown;
        if (attempt === 1 && cb.batch_url && this.#batcher) {
          const r = await this.#batcher.send(signal, cb.batch_url, cb.token, rn.traceparent, body);
          ({ status, ok: batched } = r);
        }
        if (!batched) {
          try {
            ({ status, retryAfterMs } = await this.post(cb.url, cb.token, rn.traceparent, body, signal));
          } catch (err) {
            failure = err;
          }
        }
        if (failure !== undefined) {
          this.#log.warn("callback attempt failed", { ...log, attempt, err: errorMessage(failure) });
        } else if (status === 200 || status === 204) {
          this.#log.debug("callback delivered", { ...log, attempt, status });
          return;
        } else if (status === 409) {
          this.#log.info("callback refused: task superseded by a newer claim; result dropped", log);
          return;
        } else if (retryableStatus(status)) {
          this.#log.warn("callback attempt failed", { ...log, attempt, status });
        } else {
          this.#log.error("callback rejected; result dropped", { ...log, status });
          return;
        }
        const wait = Math.max(backoff.next(), retryAfterMs);
        if (stopAt - Date.now() < wait) {
          this.#log.error("callback not delivered before the task deadline; result dropped", { ...log, attempts: attempt });
          return;
        }
        if ((await race(new Promise<void>(() => {}), wait, signal)) === "aborted") {
          this.#log.error("callback abandoned", { ...log, attempts: attempt, cause: errorMessage(signal.reason) });
          return;
        }
      }
    } finally {
      cancelTimer();
    }
  }

  /** Extends the claim's lease while asynchronous work runs; a 409 aborts the work (reason SupersededError). */
  async #heartbeat(rn: Run): Promise<void> {
    const signal = rn.controller.signal;
    let interval = this.#o.heartbeatEveryMs;
    if (interval === 0) {
      interval = HEARTBEAT_NO_DEADLINE_MS;
      if (rn.env.deadline) interval = Math.max((parseDeadline(rn.env.deadline) - Date.now()) / 3, HEARTBEAT_MIN_MS);
    }
    const url = heartbeatURL(rn.env.callback!.url);
    const body = JSON.stringify({ task_id: rn.env.task_id, claim_epoch: rn.env.claim_epoch ?? 0 });
    for (;;) {
      if ((await race(new Promise<void>(() => {}), interval, signal)) === "aborted") return;
      let status: number;
      try {
        ({ status } = await this.post(url, rn.env.callback!.token, rn.traceparent, body, signal));
      } catch (err) {
        if (!signal.aborted) this.#log.warn("heartbeat failed", { ...taskAttrs(rn), err: errorMessage(err) });
        continue;
      }
      if (status === 409) {
        this.#log.info("heartbeat refused: task superseded; cancelling work", taskAttrs(rn));
        rn.controller.abort(new SupersededError());
        return;
      }
      if (status >= 300) this.#log.warn("heartbeat refused", { ...taskAttrs(rn), status });
    }
  }

  /** Sends one authenticated JSON POST and returns its status and the Retry-After asked for. */
  async post(url: string, token: string, traceparent: string, body: string, signal: AbortSignal): Promise<{ status: number; retryAfterMs: number }> {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      authorization: "Bearer " + token,
      "user-agent": USER_AGENT,
    };
    if (traceparent) headers["traceparent"] = traceparent;
    const resp = await this.#o.fetch(url, {
      method: "POST",
      headers,
      body,
      redirect: "manual",
      signal: AbortSignal.any([signal, AbortSignal.timeout(CALLBACK_TIMEOUT_MS)]),
    });
    await resp.arrayBuffer().catch(() => {}); // drained for reuse; the body is ignored
    return { status: resp.status, retryAfterMs: retryAfter(resp.headers.get("retry-after")) };
  }

  /** Sends a batched callback (§8.1) and returns the answer's raw text and status. */
  async postBatch(url: string, traceparent: string, body: string): Promise<{ status: number; text: string }> {
    const headers: Record<string, string> = { "content-type": "application/json", "user-agent": USER_AGENT };
    if (traceparent) headers["traceparent"] = traceparent;
    const resp = await this.#o.fetch(url, {
      method: "POST",
      headers,
      body,
      redirect: "manual",
      signal: AbortSignal.timeout(CALLBACK_TIMEOUT_MS),
    });
    return { status: resp.status, text: await resp.text() };
  }

  get logger(): Logger {
    return this.#log;
  }

  /**
   * Completes a thin envelope: GETs payload_url with the callback token and returns env
   * with the fetched documents. The answer must be for env's task and claim; a 409 is a
   * SupersededError.
   */
  async #fetchPayload(env: Envelope, traceparent: string, signal: AbortSignal): Promise<Envelope> {
    const url = env.payload_url!;
    const headers: Record<string, string> = {
      authorization: "Bearer " + env.callback!.token,
      accept: "application/json",
      "user-agent": USER_AGENT,
    };
    if (traceparent) headers["traceparent"] = traceparent;
    let resp: Response;
    let text: string;
    try {
      resp = await this.#o.fetch(url, { method: "GET", headers, redirect: "manual", signal: AbortSignal.any([signal, AbortSignal.timeout(CALLBACK_TIMEOUT_MS)]) });
      text = await resp.text();
    } catch (err) {
      throw new Error(`fetch task payload: ${errorMessage(err)}`);
    }
    if (resp.status === 409) throw new SupersededError();
    if (resp.status !== 200) throw new Error(`fetch task payload: ${url} answered ${resp.status}: ${text.slice(0, 512)}`);
    if (Buffer.byteLength(text) > this.#o.maxBodyBytes) throw new Error(`fetch task payload: over ${this.#o.maxBodyBytes} bytes (maxBodyBytes)`);
    let full: Envelope;
    try {
      full = decodeEnvelope(text);
    } catch (err) {
      throw new Error(`fetch task payload: malformed: ${errorMessage(err)}`);
    }
    if (full.task_id !== env.task_id || (full.claim_epoch ?? 0) !== (env.claim_epoch ?? 0)) {
      throw new Error(`fetch task payload: got task ${full.task_id ?? ""} claim_epoch ${full.claim_epoch ?? 0}, want ${env.task_id} claim_epoch ${env.claim_epoch ?? 0}`);
    }
    const out: Envelope = { ...env };
    for (const k of ["resource", "status", "observed", "descendants", "operation", "config", "bundle"] as const) {
      if (full[k] === undefined) delete out[k];
      else (out as unknown as Record<string, unknown>)[k] = full[k];
    }
    return out;
  }
}

interface Ctx {
  webhookId: string;
  traceparent: string;
  inv: Invocation;
  /** When the request's sync budget ends, epoch ms. */
  until: number;
  signal: AbortSignal | undefined;
}

/**
 * CallbackBatcher coalesces the Results of tasks finishing together into one POST per
 * batch URL (§8.1): the first Result waits the window (or until the batch is full) and
 * sends for everyone in it.
 */
class CallbackBatcher {
  readonly #open = new Map<string, OpenBatch>();
  constructor(
    private readonly ep: Endpoint,
    private readonly windowMs: number,
    private readonly max: number,
  ) {}

  /**
   * Delivers one Result as part of a batch and returns the status the dispatcher gave
   * it; ok is false when the batch failed as a whole or signal ended first (the caller
   * then sends the Result on its own).
   */
  async send(signal: AbortSignal, url: string, token: string, traceparent: string, result: string): Promise<{ status: number; ok: boolean }> {
    let b = this.#open.get(url);
    const leader = b === undefined;
    if (!b) {
      b = new OpenBatch(traceparent);
      this.#open.set(url, b);
    }
    const i = b.items.length;
    b.items.push(`{"token":${JSON.stringify(token)},"result":${result}}`);
    if (b.items.length >= this.max) {
      this.#open.delete(url);
      b.fill();
    }
    if (leader) {
      const batch = b;
      void (async () => {
        await race(batch.full, this.windowMs, undefined);
        if (this.#open.get(url) === batch) this.#open.delete(url);
        batch.finish(await this.#post(url, batch));
      })();
    }
    if ((await race(b.settled, Infinity, signal)) === "aborted") return { status: 0, ok: false };
    if (b.err !== undefined) {
      this.ep.logger.warn("batched callback failed; sending the result on its own", { err: b.err });
      return { status: 0, ok: false };
    }
    return { status: b.answers[i]!, ok: true };
  }

  async #post(url: string, b: OpenBatch): Promise<{ answers: number[] } | { err: string }> {
    try {
      const { status, text } = await this.ep.postBatch(url, b.traceparent, `{"outcomes":[${b.items.join(",")}]}`);
      if (status !== 200) return { err: `batched callback answered ${status}` };
      const a = JSON.parse(text) as { results?: { status?: unknown }[] };
      if (!Array.isArray(a.results) || a.results.length !== b.items.length) {
        return { err: `batched callback answered ${Array.isArray(a.results) ? a.results.length : 0} results for ${b.items.length} outcomes` };
      }
      return { answers: a.results.map((r) => (typeof r?.status === "number" ? r.status : 0)) };
    } catch (err) {
      return { err: errorMessage(err) };
    }
  }
}

class OpenBatch {
  readonly items: string[] = [];
  answers: number[] = [];
  err: string | undefined;
  readonly full: Promise<void>;
  readonly settled: Promise<void>;
  fill!: () => void;
  #settle!: () => void;
  constructor(readonly traceparent: string) {
    this.full = new Promise((r) => (this.fill = r));
    this.settled = new Promise((r) => (this.#settle = r));
  }
  finish(r: { answers: number[] } | { err: string }): void {
    if ("err" in r) this.err = r.err;
    else this.answers = r.answers;
    this.#settle();
  }
}

/** Exponential backoff as webhooksdk's (cenkalti/backoff defaults): ×1.5, ±50 % jitter, capped. */
class Backoff {
  #current: number;
  constructor(
    initial: number,
    private readonly max: number,
  ) {
    this.#current = initial;
  }
  next(): number {
    const delta = 0.5 * this.#current;
    const wait = this.#current - delta + Math.random() * (2 * delta + 1);
    this.#current = Math.min(this.#current * 1.5, this.max);
    return wait;
  }
}

/** race waits for p, ms to pass, or signal to abort, whichever is first. */
function race(p: Promise<unknown>, ms: number, signal: AbortSignal | undefined): Promise<"done" | "timeout" | "aborted"> {
  if (signal?.aborted) return Promise.resolve("aborted");
  return new Promise((resolveRace) => {
    let cancelTimer = (): void => {};
    const finish = (v: "done" | "timeout" | "aborted"): void => {
      cancelTimer();
      signal?.removeEventListener("abort", onAbort);
      resolveRace(v);
    };
    const onAbort = (): void => finish("aborted");
    signal?.addEventListener("abort", onAbort, { once: true });
    if (ms !== Infinity) cancelTimer = after(() => finish("timeout"), ms);
    void p.then(() => finish("done"), () => finish("done"));
  });
}

/** after calls fn once ms have passed, also past setTimeout's 24.8-day ceiling, and returns its cancel. */
function after(fn: () => void, ms: number): () => void {
  const ceiling = 0x7fffffff;
  let handle: NodeJS.Timeout;
  const arm = (left: number): void => {
    handle = setTimeout(() => (left > ceiling ? arm(left - ceiling) : fn()), Math.min(Math.max(left, 0), ceiling));
  };
  arm(ms);
  return () => clearTimeout(handle);
}

function kindKey(kind: string, version: number): string {
  return `${kind}/v${version}`;
}

function taskAttrs(rn: Run): Record<string, unknown> {
  return { task_id: rn.env.task_id, claim_epoch: rn.env.claim_epoch, kind: rn.env.kind, kind_version: rn.env.kind_version, webhook_id: rn.webhookId };
}

function headerGetter(h: Delivery["headers"]): (name: string) => string | undefined {
  const lower = new Map<string, string>();
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined) continue;
    const name = k.toLowerCase();
    if (!lower.has(name)) lower.set(name, Array.isArray(v) ? (v[0] ?? "") : v);
  }
  return (name) => lower.get(name);
}

/** traceParent returns a well-formed W3C traceparent (§17), else "". */
export function traceParent(v: string | undefined): string {
  if (!v || !/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(v) || v.startsWith("ff")) return "";
  if (/^0+$/.test(v.slice(3, 35)) || /^0+$/.test(v.slice(36, 52))) return "";
  return v;
}

/** heartbeatURL derives the heartbeat URL from a callback URL (§9). */
export function heartbeatURL(callbackURL: string): string {
  const u = new URL(callbackURL);
  u.pathname = u.pathname.replace(/\/$/, "").replace(/\/outcome$/, "") + "/heartbeat";
  return u.toString();
}

function retryableStatus(s: number): boolean {
  return s === 408 || s === 425 || s === 429 || s >= 500;
}

function retryAfter(v: string | null): number {
  if (!v) return 0;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? 0 : Math.max(t - Date.now(), 0);
}

function json(status: number, body: string): Answer {
  return { status, headers: { "content-type": "application/json" }, body };
}

function accepted(): Answer {
  return { status: 202, headers: {}, body: "" };
}

function unavailable(detail: string): Answer {
  const a = problem(503, detail);
  a.headers["retry-after"] = String(RETRY_AFTER_UNREADY);
  return a;
}

/** problem is an RFC 9457 problem details answer. */
function problem(status: number, detail: string): Answer {
  const body = JSON.stringify({ type: "about:blank", title: STATUS_TEXT[status] ?? "", status, detail });
  return { status, headers: { "content-type": "application/problem+json" }, body };
}

/** batchResult turns a task's answer into its entry of a batch response (§16.3). */
function batchResult(a: Answer | undefined, env: Envelope): string {
  if (a?.status === 200) return a.body;
  const res: Record<string, unknown> = { task_id: env.task_id ?? "", claim_epoch: env.claim_epoch ?? 0 };
  if (a === undefined) {
    res["error"] = { message: "no answer: the batch request ended before the task was answered", terminal: false };
  } else if (a.status === 202) {
    res["accepted"] = true;
  } else {
    let detail = "";
    try {
      detail = String((JSON.parse(a.body) as { detail?: unknown }).detail ?? "");
    } catch {
      // a detail-less answer still names its status
    }
    const msg = `${a.status} ${STATUS_TEXT[a.status] ?? ""}: ${detail}`.replace(/: $/, "");
    res["error"] = { message: msg, terminal: false };
  }
  return JSON.stringify(res);
}
