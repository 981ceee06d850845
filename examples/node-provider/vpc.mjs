// The classic demo's `vpc` kind, version 1: a leaf with an operator verb that reads
// the effective provider config.
import { createHash } from "node:crypto";
import { TerminalError } from "@convergeplane/provider-sdk";

/** vpcId is deterministic from the resource's name: "vpc-" + 12 hex digits. */
export function vpcId(name) {
  return "vpc-" + createHash("sha256").update(name, "utf8").digest("hex").slice(0, 12);
}

/** vpc is the provider of vpc v1: `work`, the `enable_flow_logs` verb and `teardown`. */
export const vpc = {
  kind: "vpc",
  version: 1,
  work(req) {
    const spec = req.resource.spec ?? {};
    const status = { vpc_id: vpcId(req.resource.name), account_id: spec.account_id, cidr: spec.cidr };
    switch (req.reaction) {
      case "work":
        return { status };
      case "enable_flow_logs": {
        // An operator verb: its output goes to the operation, its status to the resource.
        const bucket = req.config?.flow_logs_bucket;
        if (!bucket) throw new TerminalError("enable_flow_logs: the vpc/1 provider config names no flow_logs_bucket");
        return { status: { ...status, flow_logs: true }, operationOutput: { flow_logs: true, bucket, operation_id: req.taskId } };
      }
      case "teardown":
        return {};
      default:
        throw new TerminalError(`vpc has no reaction ${JSON.stringify(req.reaction)}`);
    }
  },
};
