// Standard Webhooks signatures (docs/protocol.md §3), computed by the standardwebhooks
// package; the header checks around it are webhooksdk's.

import { timingSafeEqual } from "node:crypto";
import { Webhook } from "standardwebhooks";

/** The prefix of a signing secret. */
export const SECRET_PREFIX = "whsec_";
/** The shortest and longest key of a secret, in bytes. */
export const SECRET_MIN_BYTES = 24;
export const SECRET_MAX_BYTES = 64;
/** How far webhook-timestamp may be from the clock either way, by default (5 minutes). */
export const DEFAULT_TOLERANCE_MS = 5 * 60 * 1000;

/** Why a request's signature does not verify; its message is webhooksdk's. */
export class SignatureError extends Error {
  override name = "SignatureError";
}

/** A parsed signing secret. Its string forms redact the key. */
export class Secret {
  readonly #hook: Webhook;
  private constructor(hook: Webhook) {
    this.#hook = hook;
  }

  /** Parses "whsec_<standard base64 of 24..64 bytes>"; the error never quotes the secret. */
  static parse(s: string): Secret {
    if (!s.startsWith(SECRET_PREFIX)) throw new Error(`parse secret: missing "${SECRET_PREFIX}" prefix`);
    const enc = s.slice(SECRET_PREFIX.length);
    if (enc.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(enc)) throw new Error("parse secret: invalid base64");
    const raw = Buffer.from(enc, "base64");
    if (raw.length < SECRET_MIN_BYTES || raw.length > SECRET_MAX_BYTES) {
      throw new Error(`parse secret: key is ${raw.length} bytes, want ${SECRET_MIN_BYTES}..${SECRET_MAX_BYTES}`);
    }
    return new Secret(new Webhook(s));
  }

  /** Returns the signature "v1,<base64 HMAC-SHA256>" of "msgId.timestamp.body", timestamp in Unix seconds. */
  sign(msgId: string, timestampSec: number, body: string): string {
    return this.#hook.sign(msgId, new Date(timestampSec * 1000), body);
  }

  toString(): string {
    return SECRET_PREFIX + "[redacted]";
  }

  toJSON(): string {
    return this.toString();
  }
}

/** Parses every secret; at least one is required. */
export function parseSecrets(secrets: readonly string[]): Secret[] {
  if (secrets.length === 0) throw new Error("no secrets");
  return secrets.map((s, i) => {
    try {
      return Secret.parse(s);
    } catch (err) {
      throw new Error(`secret ${i}: ${(err as Error).message}`);
    }
  });
}

/** Signs body with every secret: the webhook-signature header value, entries joined by a space. */
export function signHeader(secrets: readonly Secret[], msgId: string, timestampSec: number, body: string): string {
  return secrets.map((s) => s.sign(msgId, timestampSec, body)).join(" ");
}

/** A header lookup by lower-case name. */
export type HeaderGetter = (name: string) => string | undefined;

/**
 * Verifies a Standard Webhooks request as webhooksdk's Verify does: the three headers
 * present, webhook-timestamp an integer within ±tolerance of nowMs, and one "v1,"
 * entry of webhook-signature equal (in constant time) to the signature under one of
 * secrets. Throws a {@link SignatureError} otherwise.
 */
export function verify(secrets: readonly Secret[], header: HeaderGetter, body: string, nowMs: number, toleranceMs = DEFAULT_TOLERANCE_MS): void {
  const msgId = header("webhook-id") ?? "";
  const tsHeader = header("webhook-timestamp") ?? "";
  const sigHeader = header("webhook-signature") ?? "";
  if (msgId === "" || tsHeader === "" || sigHeader === "") throw new SignatureError("missing webhook signature headers");
  // The one form it is signed in (§3.2): decimal digits, no sign, no leading zero,
  // within int64. A lenient parse would check the signature over the number
  // re-formatted rather than the text received.
  if (!/^(0|[1-9][0-9]*)$/.test(tsHeader)) throw new SignatureError("invalid webhook-timestamp");
  const big = BigInt(tsHeader);
  if (big > 9223372036854775807n) throw new SignatureError("invalid webhook-timestamp");
  const tol = BigInt(Math.floor((toleranceMs > 0 ? toleranceMs : DEFAULT_TOLERANCE_MS) / 1000));
  const n = BigInt(Math.floor(nowMs / 1000));
  if (big < n - tol || big > n + tol) {
    throw new SignatureError(`webhook-timestamp outside tolerance: timestamp ${big}, now ${n}, tolerance ${formatTolerance(tol)}`);
  }
  const ts = Number(big);
  const entries = sigHeader.split(" ").filter((e) => e.startsWith("v1,")).map((e) => Buffer.from(e.slice(3)));
  for (const secret of secrets) {
    const want = Buffer.from(secret.sign(msgId, ts, body).slice(3));
    let found = false;
    for (const got of entries) {
      if (got.length === want.length && timingSafeEqual(got, want)) found = true;
    }
    if (found) return;
  }
  throw new SignatureError("no matching webhook signature");
}

// formatTolerance writes seconds as Go's time.Duration String does ("5m0s").
function formatTolerance(sec: bigint): string {
  const h = sec / 3600n;
  const m = (sec % 3600n) / 60n;
  const s = sec % 60n;
  if (h > 0n) return `${h}h${m}m${s}s`;
  if (m > 0n) return `${m}m${s}s`;
  return `${s}s`;
}
