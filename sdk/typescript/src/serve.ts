// One-call serving over HTTP(S) with a graceful drain (webhooksdk's serve.go).

import { createServer as createHTTPServer, type IncomingMessage, type Server as HTTPServer, type ServerResponse } from "node:http";
import { createServer as createHTTPSServer } from "node:https";
import type { AddressInfo } from "node:net";
import { Endpoint, type Invocation } from "./endpoint.js";
import { errorMessage } from "./errors.js";
import { DRAIN_TIMEOUT_DEFAULT_MS, type EndpointOptions } from "./options.js";
import type { Provider } from "./types.js";

/** Options of {@link serve}: the Endpoint's, and the server's. */
export interface ServeOptions extends EndpointOptions {
  /** "host:port" to listen on; or give port (and host). */
  addr?: string;
  /** The TCP port; 0 picks a free one. Default 8080 when addr is not given. */
  port?: number;
  /** The interface to listen on; default all. */
  host?: string;
  /**
   * How long the graceful stop waits for requests in flight, asynchronous work and its
   * callbacks; past it every work signal aborts (reason ShutdownError) and the stop
   * fails. Default 30 000; 0 aborts at once.
   */
  drainTimeoutMs?: number;
  /** Serve HTTPS (TLS 1.2 at least) with this PEM certificate chain and key; plain HTTP without. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** Stops the server gracefully when it aborts, as SIGTERM does. */
  signal?: AbortSignal;
  /** Stop gracefully on SIGINT and SIGTERM; default true. */
  handleSignals?: boolean;
}

/** A running server. */
export interface Server {
  /** The Endpoint it serves. */
  readonly endpoint: Endpoint;
  /** The address it listens on. */
  readonly address: AddressInfo;
  /** Its base URL, e.g. "http://127.0.0.1:8080/". */
  readonly url: string;
  /** Starts the graceful stop (if not yet started) and returns {@link Server.done}. */
  stop(): Promise<void>;
  /** Settles once the server stopped: resolved after a drain that finished its work, rejected otherwise. */
  readonly done: Promise<void>;
}

/**
 * Serves providers over HTTP (HTTPS with tls) until stop() is called, signal aborts or
 * the process receives SIGINT or SIGTERM, then stops gracefully: it stops accepting,
 * waits for the requests in flight, then for the asynchronous work and its callbacks,
 * all within drainTimeoutMs. It resolves once listening; the providers and options are
 * checked before it listens. It never exits the process.
 */
export async function serve(providers: readonly Provider[], options: ServeOptions): Promise<Server> {
  const endpoint = new Endpoint(providers, options);
  const drainMs = options.drainTimeoutMs ?? DRAIN_TIMEOUT_DEFAULT_MS;
  if (drainMs < 0) throw new Error("provider-sdk serve: drainTimeoutMs: negative duration");
  let host = options.host;
  let port = options.port ?? 8080;
  if (options.addr !== undefined) {
    const i = options.addr.lastIndexOf(":");
    if (i < 0) throw new Error(`provider-sdk serve: addr ${JSON.stringify(options.addr)} is not host:port`);
    host = options.addr.slice(0, i).replace(/^\[(.*)\]$/, "$1") || undefined;
    port = Number(options.addr.slice(i + 1));
  }
  const serveRequest = requestListener(endpoint);
  let stopping = false;
  // A keep-alive client (the dispatcher probes every few seconds) would hold its
  // connection open through a drain: once stopping, every answer closes its connection.
  // The requests being answered, so that a drain past its timeout says which.
  const active = new Set<string>();
  const listener = (req: IncomingMessage, res: ServerResponse): void => {
    if (stopping) res.setHeader("connection", "close");
    const what = `${req.method ?? "?"} ${String(req.headers["webhook-id"] ?? req.url ?? "")} since ${new Date().toISOString()}`;
    active.add(what);
    res.on("close", () => active.delete(what));
    serveRequest(req, res);
  };
  const server: HTTPServer = options.tls
    ? createHTTPSServer({ cert: options.tls.cert, key: options.tls.key, minVersion: "TLSv1.2" }, listener)
    : createHTTPServer(listener);
  server.headersTimeout = 5000;
  await new Promise<void>((resolveListen, rejectListen) => {
    server.once("error", rejectListen);
    server.listen(port, host, () => {
      server.off("error", rejectListen);
      resolveListen();
    });
  }).catch((err: unknown) => {
    throw new Error(`provider-sdk serve: ${errorMessage(err)}`);
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const url = `${options.tls ? "https" : "http"}://${shownHost}:${address.port}/`;
  endpoint.logger.info("provider endpoint listening", { addr: url, kinds: endpoint.kinds });

  let settle!: (p: Promise<void>) => void;
  const done = new Promise<void>((r) => (settle = r as (p: Promise<void>) => void));
  const handleSignals = options.handleSignals ?? true;
  const stop = (): Promise<void> => {
    if (!stopping) {
      stopping = true;
      endpoint.logger.info("provider endpoint stopping", { drain_timeout_ms: drainMs });
      if (handleSignals) {
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
      options.signal?.removeEventListener("abort", onSignal);
      settle(drain(server, endpoint, drainMs, active).then(() => endpoint.logger.info("provider endpoint stopped")));
    }
    return done;
  };
  const onSignal = (): void => void stop().catch(() => {});
  if (handleSignals) {
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  }
  if (options.signal?.aborted) onSignal();
  else options.signal?.addEventListener("abort", onSignal, { once: true });
  return { endpoint, address, url, stop, done };
}

/** drain closes the server, waits for the answers in flight, then for the Endpoint's work. */
async function drain(server: HTTPServer, endpoint: Endpoint, drainMs: number, active: ReadonlySet<string>): Promise<void> {
  const deadline = Date.now() + drainMs;
  const closed = new Promise<void>((r) => server.close(() => r()));
  // close() waits for every connection. A sweep every 50 ms closes those idle by
  // node's count (one whose answer was sent after the close included), and, once no
  // request is being answered, every connection left, whatever node's count says
  // (a drain in CI once waited its whole timeout on a connection it kept).
  const closeUnused = (): void => (active.size === 0 ? server.closeAllConnections() : server.closeIdleConnections());
  closeUnused();
  const sweep = setInterval(closeUnused, 50);
  let timer: NodeJS.Timeout | undefined;
  const late = await Promise.race([closed.then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), drainMs)))]);
  clearTimeout(timer);
  clearInterval(sweep);
  // Read before closeAllConnections, which ends them.
  const held = late ? `: ${active.size ? [...active].slice(0, 5).join(", ") : "no request, an open connection"}` : "";
  if (late) server.closeAllConnections();
  try {
    await endpoint.shutdown(Math.max(deadline - Date.now(), 0));
  } catch (err) {
    throw new Error(`provider-sdk serve: ${errorMessage(err)}`);
  }
  if (late) throw new Error(`provider-sdk serve: requests still in flight after ${drainMs} ms${held}`);
}

/**
 * Returns a node:http request listener serving endpoint, to mount in a server of your
 * own; serve uses it. The body is read up to the endpoint's cap (413 beyond).
 */
export function requestListener(endpoint: Endpoint, inv: Invocation = "http"): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    void (async () => {
      const gone = new AbortController();
      res.on("close", () => {
        if (!res.writableFinished) gone.abort();
      });
      const max = endpoint.maxBodyBytes;
      const declared = Number(req.headers["content-length"] ?? NaN);
      const chunks: Buffer[] = [];
      let size = 0;
      let tooLarge = declared > max;
      if (!tooLarge) {
        for await (const chunk of req as AsyncIterable<Buffer>) {
          size += chunk.length;
          if (size > max) {
            tooLarge = true;
            break;
          }
          chunks.push(chunk);
        }
      }
      const answer = await endpoint.handle(
        { method: req.method ?? "", headers: req.headers, body: tooLarge ? Buffer.alloc(0) : Buffer.concat(chunks), declaredLength: tooLarge ? Math.max(declared, size) : size, signal: gone.signal },
        inv,
      );
      if (!answer) {
        res.destroy();
        return;
      }
      const headers: Record<string, string | number> = { ...answer.headers };
      if (answer.body !== "") headers["content-length"] = Buffer.byteLength(answer.body);
      if (tooLarge) headers["connection"] = "close";
      res.writeHead(answer.status, headers);
      res.end(answer.body);
    })().catch((err: unknown) => {
      endpoint.logger.error("cannot serve a request", { err: errorMessage(err) });
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  };
}
