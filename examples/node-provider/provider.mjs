// A Converge provider endpoint in Node on the TypeScript SDK
// (@convergeplane/provider-sdk), serving the classic demo's account and vpc kinds v1.
// The SDK does the protocol (signatures, Results, dedup, the async path, heartbeats,
// batches, health); this file only configures it and wraps the kinds with the demo's
// fault injection.
//
// Environment:
//   PROVIDER_SECRETS   whsec_… secrets, separated by commas or spaces (two during a rotation). Required.
//   PROVIDER_ADDR      host:port to listen on (default 127.0.0.1:8080).
//   SYNC_BUDGET_MS     how long a delivery waits for the work before answering 202 (default 1000).
//   FAKE_WORK_DELAY_MS extra time every work reaction takes (default 0); a resource's label
//                      node-provider.converge.dev/work-delay-ms overrides it.
//   FAKE_FAULT_RATE    probability (0..1) that a work reaction fails transiently (default 0).
import { pathToFileURL } from "node:url";
import { serve } from "@convergeplane/provider-sdk";
import { account } from "./account.mjs";
import { vpc } from "./vpc.mjs";

const DELAY_LABEL = "node-provider.converge.dev/work-delay-ms";

/** log writes one JSON line to stderr; it is also the SDK's logger, debug included. */
const line = (level) => (msg, attrs = {}) => process.stderr.write(JSON.stringify({ time: new Date().toISOString(), level, msg, ...attrs }) + "\n");
export const logger = { debug: line("debug"), info: line("info"), warn: line("warn"), error: line("error") };

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); reject(signal.reason); }, { once: true });
  });

/**
 * withFaults wraps a kind's provider with the demo's knobs: a delay before `work`
 * (FAKE_WORK_DELAY_MS, or the resource's label), a transient fault rate, and a log
 * line per teardown.
 */
export function withFaults(p, { workDelayMs = 0, faultRate = 0 } = {}) {
  return {
    kind: p.kind,
    version: p.version,
    async work(req, signal) {
      if (req.reaction === "work") {
        const label = Number(req.resource.labels[DELAY_LABEL]);
        const delay = Number.isFinite(label) && label >= 0 ? label : workDelayMs;
        if (delay > 0) await sleep(delay, signal);
        if (faultRate > 0 && Math.random() < faultRate) throw new Error("injected transient fault (FAKE_FAULT_RATE)");
      }
      if (req.reaction === "teardown") logger.info("teardown", { kind: p.kind, name: req.resource.name, task_id: req.taskId });
      return p.work(req, signal);
    },
  };
}

/** start serves the kinds with the options the environment gives. */
export function start(env = process.env) {
  const [host, port] = (env.PROVIDER_ADDR ?? "127.0.0.1:8080").split(/:(?=[^:]*$)/);
  const knobs = { workDelayMs: Number(env.FAKE_WORK_DELAY_MS ?? 0), faultRate: Number(env.FAKE_FAULT_RATE ?? 0) };
  return serve([withFaults(account, knobs), withFaults(vpc, knobs)], {
    host,
    port: Number(port),
    secrets: (env.PROVIDER_SECRETS ?? "").split(/[\s,]+/).filter(Boolean),
    syncBudgetMs: Number(env.SYNC_BUDGET_MS ?? 1000),
    logger,
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  try {
    const srv = await start();
    logger.info("listening", { addr: srv.url, kinds: srv.endpoint.kinds });
    await srv.done;
  } catch (err) {
    logger.error("provider failed", { err: String(err?.message ?? err) });
    process.exitCode = 1;
  }
}
