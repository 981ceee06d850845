// The console's only way to the server: the REST API under /api/v1 on the
// origin that served the page, with the operator's bearer token when the
// API asks for one, and the change stream that tells pages when to re-read.

import type { components } from "./api-types";
import { currentNamespace, inNamespace } from "./namespace";
import type { Problem, ProblemError } from "./types";

// ApiError is an error answer: its RFC 9457 problem document, as every API
// error is, with its errors always a list (empty when the answer had none).
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem & { errors: ProblemError[] },
  ) {
    super(problem.detail || problem.title);
  }
}

const tokenKey = "converge.token";
const tokenKindKey = "converge.tokenKind";

// OIDCSignIn is how the server lets the console sign in (GET /auth/config).
export type OIDCSignIn = components["schemas"]["OIDCSignIn"];

// Auth holds the token (for this tab only), whether it came from an OIDC
// sign-in or was typed in, and whether the API refused the one it had (and
// why), which is when the app signs in again or shows the token prompt.
class Auth {
  private listeners = new Set<() => void>();
  token = sessionStorage.getItem(tokenKey) ?? "";
  kind: "static" | "oidc" = sessionStorage.getItem(tokenKindKey) === "oidc" ? "oidc" : "static";
  needed = false;
  reason = "";
  // oidc is the server's sign-in, null when it takes no OIDC tokens.
  oidc: OIDCSignIn | null = null;
  // version changes on every change, for useSyncExternalStore.
  version = 0;

  set(token: string, kind: "static" | "oidc" = "static") {
    this.token = token;
    this.kind = kind;
    this.needed = false;
    this.reason = "";
    if (token) {
      sessionStorage.setItem(tokenKey, token);
      sessionStorage.setItem(tokenKindKey, kind);
    } else {
      sessionStorage.removeItem(tokenKey);
      sessionStorage.removeItem(tokenKindKey);
    }
    this.emit();
  }
  refuse(reason = "") {
    if (!this.needed || reason !== this.reason) {
      this.needed = true;
      this.reason = reason;
      this.emit();
    }
  }
  // fail shows why a sign-in failed, in the token prompt.
  fail(reason: string) {
    this.needed = true;
    this.reason = reason;
    this.emit();
  }
  subscribe = (fn: () => void) => {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  };
  private emit() {
    this.version++;
    this.listeners.forEach((fn) => fn());
  }
  headers(): Record<string, string> {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }
}

export const auth = new Auth();

// loadAuthConfig asks the server how to sign in (a route that takes no
// token) and keeps the answer in auth.oidc.
export async function loadAuthConfig() {
  const resp = await fetch("/api/v1/auth/config", { headers: { Accept: "application/json" } });
  if (resp.ok) auth.oidc = ((await resp.json()) as { oidc: OIDCSignIn | null }).oidc ?? null;
}

export interface Answer<T> {
  data: T;
  status: number;
  headers: Headers;
}

// idempotencyKey is a fresh key for one POST: a retry of it (the browser's,
// a proxy's) then runs it at most once. getRandomValues, unlike
// randomUUID, works on a page served over plain http.
function idempotencyKey(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// call sends one API request; an error answer throws an ApiError carrying
// the problem document. A POST carries an Idempotency-Key; extra headers
// (If-Match) go as given. A call to namespaced objects is made in the
// namespace shown (inNamespace) unless path names one.
export async function call<T>(method: string, path: string, body?: unknown, extra?: Record<string, string>): Promise<Answer<T>> {
  const headers: Record<string, string> = { Accept: "application/json", ...auth.headers(), ...extra };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method === "POST") headers["Idempotency-Key"] = idempotencyKey();
  const resp = await fetch(`/api/v1${inNamespace(path)}`, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await resp.text();
  let data: unknown = undefined;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!resp.ok) {
    const p = (data && typeof data === "object" ? data : {}) as Partial<Problem>;
    if (resp.status === 401) auth.refuse(p.detail ?? "");
    throw new ApiError(resp.status, {
      type: p.type ?? "about:blank",
      title: p.title ?? resp.statusText,
      status: p.status ?? resp.status,
      detail: p.detail ?? (typeof data === "string" ? data : resp.statusText),
      errors: p.errors ?? [],
    });
  }
  return { data: data as T, status: resp.status, headers: resp.headers };
}

export const get = <T>(path: string) => call<T>("GET", path).then((a) => a.data);

// ifMatch makes a write conditional on the version the page showed: if
// someone changed the object since, the API refuses it (412) and the page
// shows why instead of overwriting their change.
export const ifMatch = (version?: number): Record<string, string> | undefined =>
  version ? { "If-Match": `"${version}"` } : undefined;

// staleVersion says whether an API refusal is a write from a version
// someone has since changed (If-Match, or the resource_version sent).
export const staleVersion = (p: Problem) =>
  p.type === "urn:converge:problem:version-conflict" || p.type === "urn:converge:problem:precondition-failed";

export const enc = encodeURIComponent;

// Topics of the change stream (see control/api/events.go).
export type Topic = "resources" | "kinds" | "providerconfigs" | "bindings" | "endpoints" | "cluster";
const allTopics: Topic[] = ["resources", "kinds", "providerconfigs", "bindings", "endpoints", "cluster"];

type ChangeListener = (topics: Set<Topic>) => void;

// Changes is the one open stream of the tab: GET /api/v1/events/stream,
// read with fetch so that it carries the bearer token like every other
// call, of the namespace shown (every one under "All namespaces"): it is
// opened again when the namespace changes. It reconnects with back-off
// and, since changes made while it was down are lost, tells every page to
// re-read when it is back.
class Changes {
  private listeners = new Set<ChangeListener>();
  private started = false;
  connected = false;
  private statusListeners = new Set<() => void>();

  subscribe(fn: ChangeListener) {
    this.listeners.add(fn);
    this.start();
    return () => {
      this.listeners.delete(fn);
    };
  }
  onStatus = (fn: () => void) => {
    this.statusListeners.add(fn);
    return () => this.statusListeners.delete(fn);
  };
  private setConnected(c: boolean) {
    if (this.connected !== c) {
      this.connected = c;
      this.statusListeners.forEach((fn) => fn());
    }
  }
  private emit(topics: Set<Topic>) {
    this.listeners.forEach((fn) => fn(topics));
  }
  private start() {
    if (this.started) return;
    this.started = true;
    void this.run();
    // A token entered after a refusal opens the stream again at once.
    // A token dropped (signed out, forgotten) closes the stream it opened.
    let token = auth.token;
    auth.subscribe(() => {
      if (auth.token !== token && !auth.token) this.abort?.abort();
      token = auth.token;
      if (!auth.needed) this.retryNow?.();
    });
    // A page left for another keeps no stream open: kept in the back/forward
    // cache, its open stream held one of the browser's six connections to
    // the server, and a few navigations later a page could not load. Back
    // on it, the stream opens again and the page re-reads.
    window.addEventListener("pagehide", () => this.abort?.abort());
    window.addEventListener("pageshow", (e) => {
      if (e.persisted) this.retryNow?.();
    });
  }
  private retryNow?: () => void;
  private abort?: AbortController;
  // namespace is the one the open stream follows; reopen asks the loop to
  // open it again at once, in the namespace now shown.
  private namespace = "";
  private reopen = false;

  // follow opens the stream again when ns is not the namespace it follows.
  follow(ns: string) {
    if (!this.started || ns === this.namespace) return;
    this.reopen = true;
    this.abort?.abort();
  }

  private async run() {
    let delay = 1000;
    let first = true;
    for (;;) {
      try {
        this.abort = new AbortController();
        this.namespace = currentNamespace();
        const resp = await fetch(`/api/v1/events/stream?namespace=${encodeURIComponent(this.namespace)}`, {
          headers: { Accept: "text/event-stream", ...auth.headers() },
          signal: this.abort.signal,
        });
        if (resp.status === 401) auth.refuse();
        if (resp.ok && resp.body) {
          this.setConnected(true);
          if (!first) this.emit(new Set(allTopics));
          first = false;
          delay = 1000;
          await this.read(resp.body);
        }
      } catch {
        // The server is away; wait and try again.
      }
      if (this.reopen) {
        // Another namespace was chosen: its stream, at once.
        this.reopen = false;
        continue;
      }
      this.setConnected(false);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.retryNow = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      delay = Math.min(delay * 2, 30000);
    }
  }

  private async read(body: ReadableStream<Uint8Array>) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let event = "message";
        let data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (event === "change") {
          try {
            const topics = (JSON.parse(data) as { topics: Topic[] }).topics;
            this.emit(new Set(topics));
          } catch {
            // A malformed event tells nothing; the next one will.
          }
        }
      }
    }
  }
}

export const changes = new Changes();
