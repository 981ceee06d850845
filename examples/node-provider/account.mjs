// The classic demo's `account` kind, version 1: what the provider does, without any
// of the protocol. Written from docs/protocol.md §7 (Result, outcome) and §7.3.
import { createHash } from "node:crypto";

export const KIND = "account";
export const KIND_VERSION = 1;

/** A failure a retry cannot fix: answered with `"terminal": true` (§7.1). */
export class TerminalError extends Error {}

// A team is a DNS label: anything else is a malformed spec, which no retry fixes.
const TEAM = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** accountId is deterministic from the resource's name: "acct-" + 12 hex digits. */
export function accountId(name) {
  return "acct-" + createHash("sha256").update(name, "utf8").digest("hex").slice(0, 12);
}

/**
 * work is the `work` reaction (specChange → status): it "creates" the account the
 * spec describes and returns its status. It converges to the spec (idempotent: the same
 * name always gives the same account id).
 */
export function work(resource) {
  const spec = resource.spec ?? {};
  const team = spec.team ?? "";
  if (typeof team !== "string" || !TEAM.test(team)) {
    throw new TerminalError(`spec.team ${JSON.stringify(team)} is not a DNS label (lower-case letters, digits and '-', at most 63)`);
  }
  const status = { account_id: accountId(resource.name), team };
  if (spec.domain) status.domain = spec.domain;
  return { status };
}

/**
 * teardown is the `teardown` reaction (deleteRequested → finalizer): it closes the
 * account. Closing one that is already gone succeeds (delivery is at least once, §7.3).
 */
export function teardown(_resource) {
  return {};
}

export const reactions = { work, teardown };
