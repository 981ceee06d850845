// The AWS Lambda adapter (docs/protocol.md §15; webhooksdk/lambda is the reference).

import { Endpoint } from "./endpoint.js";
import type { EndpointOptions } from "./options.js";
import type { Provider } from "./types.js";

/** The event header that selects the invocation mode. */
export const HEADER_INVOCATION = "x-converge-invocation";
/** Its value on an Event invoke. */
export const INVOCATION_EVENT = "event";

/**
 * The events the handler takes, both shaped like a Function URL request: the
 * dispatcher's Invoke event ({"version": "converge.v1", "rawPath": "/", "headers",
 * "body", "isBase64Encoded"}) and a Function URL request.
 */
export interface LambdaEvent {
  version?: string;
  rawPath?: string;
  headers?: Record<string, string | undefined>;
  body?: string;
  isBase64Encoded?: boolean;
  requestContext?: { http?: { method?: string } };
}

/** The HTTP-response-like answer, as a Function URL returns it. */
export interface LambdaResult {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
}

/** The part of the Lambda context the handler reads. */
export interface LambdaContext {
  getRemainingTimeInMillis?(): number;
}

/** A Lambda handler. */
export type LambdaHandler = (event: LambdaEvent, context?: LambdaContext) => Promise<LambdaResult>;

/** Options of {@link createHandler}: the Endpoint's, with secrets defaulting to PROVIDER_SECRETS. */
export type LambdaOptions = Partial<EndpointOptions>;

/**
 * Returns the Lambda handler serving providers, for `export const handler = ...`. The
 * signing secrets default to the PROVIDER_SECRETS environment variable (whsec_...,
 * comma-separated).
 *
 * A Lambda execution environment freezes once the handler returns, so nothing is left
 * running then. A request carrying "x-converge-invocation: event" (an Event invoke,
 * whose answer nobody reads) runs work and POSTs the Result to the callback,
 * heartbeating meanwhile, before returning 202; a refusal (401, 404, 503…) is thrown
 * instead, so that it shows in the function's errors and Lambda retries the event. Any
 * other request is answered inline with the Result once work finishes, however long
 * after the sync budget, since a 202 would leave the work frozen.
 */
export function createHandler(providers: readonly Provider[], options: LambdaOptions = {}): LambdaHandler {
  const secrets = options.secrets ?? (process.env["PROVIDER_SECRETS"] ?? "").split(",").filter((s) => s !== "");
  if (secrets.length === 0) {
    throw new Error("provider-sdk lambda: PROVIDER_SECRETS is required: the endpoint's signing secret(s), whsec_..., comma-separated");
  }
  const endpoint = new Endpoint(providers, { ...options, secrets });
  return async (event, context) => {
    const body = event.isBase64Encoded ? Buffer.from(event.body ?? "", "base64") : Buffer.from(event.body ?? "");
    const headers = event.headers ?? {};
    const isEvent = Object.entries(headers).some(([k, v]) => k.toLowerCase() === HEADER_INVOCATION && v?.toLowerCase() === INVOCATION_EVENT);
    const left = context?.getRemainingTimeInMillis?.();
    const signal = left === undefined ? undefined : AbortSignal.timeout(Math.max(left - 50, 0));
    const answer = await endpoint.handle(
      { method: event.requestContext?.http?.method ?? "POST", headers, body, ...(signal ? { signal } : {}) },
      isEvent ? "event" : "sync",
    );
    if (!answer) throw new Error("provider-sdk lambda: no answer before the invocation ended");
    if (isEvent && answer.status >= 300) throw new Error(`provider-sdk lambda: event refused with ${answer.status}: ${answer.body}`);
    return { statusCode: answer.status, headers: answer.headers, body: answer.body };
  };
}
