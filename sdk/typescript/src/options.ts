// The Endpoint's options and their defaults (webhooksdk's option.go).

import { DEFAULT_TOLERANCE_MS } from "./signature.js";

/** How long a task request waits for work before answering 202, by default. */
export const SYNC_BUDGET_DEFAULT_MS = 2000;
/** The request body cap, by default (16 MiB). */
export const MAX_BODY_DEFAULT = 16 << 20;
/** The floor of the default heartbeat interval. */
export const HEARTBEAT_MIN_MS = 1000;
/** The heartbeat interval of a task without a deadline. */
export const HEARTBEAT_NO_DEADLINE_MS = 10_000;
/** The finished-result cache's bounds, by default. */
export const RESULT_CACHE_ENTRIES_DEFAULT = 10_000;
export const RESULT_CACHE_TTL_DEFAULT_MS = 10 * 60 * 1000;
export const RESULT_CACHE_BYTES_DEFAULT = 64 << 20;
/** How long past the task deadline a callback is still retried, by default. */
export const CALLBACK_GRACE_DEFAULT_MS = 60_000;
/** The per-attempt timeout of callbacks, heartbeats and payload fetches. */
export const CALLBACK_TIMEOUT_MS = 30_000;
/** How many tasks of one batched delivery are served at once, by default. */
export const BATCH_CONCURRENCY_DEFAULT = 16;
/** How long the first of several asynchronous Results waits for others to share a batched callback. */
export const CALLBACK_BATCH_WINDOW_DEFAULT_MS = 2;
/** The most Results in one batched callback, by default, and at all. */
export const CALLBACK_BATCH_MAX_DEFAULT = 64;
export const MAX_CALLBACK_BATCH = 256;
/** How long serve's graceful stop waits for work in flight, by default. */
export const DRAIN_TIMEOUT_DEFAULT_MS = 30_000;
/** The Retry-After, in seconds, of a 503 for an unready provider or a stopping endpoint. */
export const RETRY_AFTER_UNREADY = 5;

/** Where the SDK logs: console fits. */
export interface Logger {
  debug(msg: string, attrs?: Record<string, unknown>): void;
  info(msg: string, attrs?: Record<string, unknown>): void;
  warn(msg: string, attrs?: Record<string, unknown>): void;
  error(msg: string, attrs?: Record<string, unknown>): void;
}

/** The fetch the SDK sends its callbacks, heartbeats and payload fetches with. */
export type FetchFn = (input: string, init: RequestInit) => Promise<Response>;

/** Options of {@link createEndpoint}, {@link serve} and the Lambda handler. */
export interface EndpointOptions {
  /** The endpoint's signing secrets, "whsec_…": both the old and the new during a rotation. Required. */
  secrets: readonly string[];
  /** How long a task request waits for work to answer inline (200) before 202; default 2000. 0 answers 202 at once unless work already finished. */
  syncBudgetMs?: number;
  /** How far webhook-timestamp may be from the clock either way; default 5 minutes, at least 1000. */
  toleranceMs?: number;
  /** The request body cap (413 beyond); default 16 MiB. */
  maxBodyBytes?: number;
  /** Sends the outgoing requests (callbacks, heartbeats, payload fetches); default globalThis.fetch. */
  fetch?: FetchFn;
  /** The clock signature timestamps are checked against, in epoch milliseconds; default Date.now. Deadlines and timers use the real clock. */
  now?: () => number;
  /** Where to log; default warnings and errors on stderr. */
  logger?: Logger;
  /** The heartbeat interval of asynchronous work; default a third of the time left to the deadline (at least 1 s), 10 s without a deadline. */
  heartbeatEveryMs?: number;
  /** Bounds of the finished-result cache answering repeated deliveries. */
  resultCache?: { entries?: number; ttlMs?: number; bytes?: number };
  /** Exponential backoff between callback attempts, and how long past the deadline they go on; default 500 ms, 30 s, 60 s. */
  callbackRetry?: { initialMs?: number; maxMs?: number; graceMs?: number };
  /** How asynchronous Results share a batched callback (§8.1); default a 2 ms window, at most 64. max 1 sends each on its own. */
  callbackBatch?: { windowMs?: number; max?: number };
  /** How many tasks of one batched delivery are served at once; default 16. */
  batchConcurrency?: number;
}

/** Resolved is EndpointOptions with every default applied and checked. */
export interface Resolved {
  syncBudgetMs: number;
  toleranceMs: number;
  maxBodyBytes: number;
  fetch: FetchFn;
  now: () => number;
  logger: Logger;
  heartbeatEveryMs: number;
  cacheEntries: number;
  cacheTtlMs: number;
  cacheBytes: number;
  retryInitialMs: number;
  retryMaxMs: number;
  graceMs: number;
  cbBatchWindowMs: number;
  cbBatchMax: number;
  batchConcurrency: number;
}

/** resolve applies the defaults to o and throws on an invalid value. */
export function resolve(o: EndpointOptions): Resolved {
  const r: Resolved = {
    syncBudgetMs: o.syncBudgetMs ?? SYNC_BUDGET_DEFAULT_MS,
    toleranceMs: o.toleranceMs ?? DEFAULT_TOLERANCE_MS,
    maxBodyBytes: o.maxBodyBytes ?? MAX_BODY_DEFAULT,
    fetch: o.fetch ?? ((input, init) => globalThis.fetch(input, init)),
    now: o.now ?? Date.now,
    logger: o.logger ?? stderrLogger,
    heartbeatEveryMs: o.heartbeatEveryMs ?? 0,
    cacheEntries: o.resultCache?.entries ?? RESULT_CACHE_ENTRIES_DEFAULT,
    cacheTtlMs: o.resultCache?.ttlMs ?? RESULT_CACHE_TTL_DEFAULT_MS,
    cacheBytes: o.resultCache?.bytes ?? RESULT_CACHE_BYTES_DEFAULT,
    retryInitialMs: o.callbackRetry?.initialMs ?? 500,
    retryMaxMs: o.callbackRetry?.maxMs ?? 30_000,
    graceMs: o.callbackRetry?.graceMs ?? CALLBACK_GRACE_DEFAULT_MS,
    cbBatchWindowMs: o.callbackBatch?.windowMs ?? CALLBACK_BATCH_WINDOW_DEFAULT_MS,
    cbBatchMax: o.callbackBatch?.max ?? CALLBACK_BATCH_MAX_DEFAULT,
    batchConcurrency: o.batchConcurrency ?? BATCH_CONCURRENCY_DEFAULT,
  };
  const check = (ok: boolean, msg: string): void => {
    if (!ok) throw new Error(msg);
  };
  check(r.syncBudgetMs >= 0, "syncBudgetMs: negative duration");
  check(r.toleranceMs >= 1000, "toleranceMs: must be at least 1000");
  check(r.maxBodyBytes > 0, "maxBodyBytes: must be positive");
  check(typeof r.fetch === "function", "fetch: not a function");
  check(typeof r.now === "function", "now: not a function");
  check(o.heartbeatEveryMs === undefined || o.heartbeatEveryMs > 0, "heartbeatEveryMs: must be positive");
  check(r.cacheEntries > 0 && r.cacheTtlMs > 0 && r.cacheBytes > 0, "resultCache: entries, ttlMs and bytes must be positive");
  check(r.retryInitialMs > 0 && r.retryMaxMs >= r.retryInitialMs && r.graceMs >= 0, "callbackRetry: need 0 < initialMs <= maxMs and graceMs >= 0");
  check(r.cbBatchWindowMs >= 0 && r.cbBatchMax >= 1 && r.cbBatchMax <= MAX_CALLBACK_BATCH, `callbackBatch: need windowMs >= 0 and 1 <= max <= ${MAX_CALLBACK_BATCH}`);
  check(Number.isInteger(r.batchConcurrency) && r.batchConcurrency >= 1, "batchConcurrency: must be a positive integer");
  return r;
}

/** The default logger: warnings and errors, one line each, on stderr. */
const stderrLogger: Logger = {
  debug() {},
  info() {},
  warn(msg, attrs) {
    process.stderr.write(`WARN ${msg}${attrs ? " " + JSON.stringify(attrs) : ""}\n`);
  },
  error(msg, attrs) {
    process.stderr.write(`ERROR ${msg}${attrs ? " " + JSON.stringify(attrs) : ""}\n`);
  },
};
