// The classic demo's `account` kind, version 1: what the provider does, without any
// of the protocol (the SDK does that).
import { createHash } from "node:crypto";
import { TerminalError } from "@convergeplane/provider-sdk";

// A team is a DNS label: anything else is a malformed spec, which no retry fixes.
const TEAM = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** accountId is deterministic from the resource's name: "acct-" + 12 hex digits. */
export function accountId(name) {
  return "acct-" + createHash("sha256").update(name, "utf8").digest("hex").slice(0, 12);
}

/** account is the provider of account v1: its `work` and `teardown` reactions. */
export const account = {
  kind: "account",
  version: 1,
  work(req) {
    switch (req.reaction) {
      case "work": {
        // specChange → status: "creates" the account the spec describes. Idempotent:
        // the same name always gives the same account id.
        const spec = req.resource.spec ?? {};
        const team = spec.team ?? "";
        if (typeof team !== "string" || !TEAM.test(team)) {
          throw new TerminalError(`spec.team ${JSON.stringify(team)} is not a DNS label (lower-case letters, digits and '-', at most 63)`);
        }
        const status = { account_id: accountId(req.resource.name), team };
        if (spec.domain) status.domain = spec.domain;
        return { status };
      }
      case "teardown":
        // deleteRequested → finalizer: closes the account; closing one already gone
        // succeeds (delivery is at least once).
        return {};
      default:
        throw new TerminalError(`account has no reaction ${JSON.stringify(req.reaction)}`);
    }
  },
};
