"""A Converge provider in Python on the converge_provider SDK (sdk/python).

It serves the quickstart's leaf kinds, bucket/v1 and cdn/v1 (examples/quickstart/manifests),
and the classic demo's vpc/v1 with its operator verb enable_flow_logs
(examples/classic/testfixtures/vpc.kind.json), each torn down through its finalizer.

    PROVIDER_SECRETS=whsec_... PROVIDER_ADDR=127.0.0.1:8443 python3 provider.py

SYNC_BUDGET_MS sets the sync budget and PROVIDER_LOG_LEVEL the log level (INFO). A
resource labelled python-provider.converge.dev/work-delay-ms takes that long, so a delay
past the budget goes through the asynchronous path (202, heartbeats, callback).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys

from converge_provider import Context, Options, Outcome, Request, TerminalError, provider, serve

DELAY_LABEL = "python-provider.converge.dev/work-delay-ms"
log = logging.getLogger("python-provider")


def delay(ctx: Context, req: Request) -> None:
    """Wait the resource's work-delay label, if any, returning early if the task is cancelled."""
    ms = req.resource.labels.get(DELAY_LABEL)
    if ms and ctx.wait(int(ms) / 1000):
        ctx.raise_if_cancelled()


def teardown(req: Request) -> Outcome:
    """The finalizer: nothing to delete in this simulation; it must succeed when already gone."""
    log.info("teardown %s/%s", req.kind, req.resource.name)
    return Outcome()


@provider("bucket", 1)
def bucket(ctx: Context, req: Request) -> Outcome:
    delay(ctx, req)
    if req.task_type == "delete":
        return teardown(req)
    region = req.resource.spec.get("region", "")
    return Outcome(status={"bucket_id": "bkt-" + req.resource.name, "region": region})


@provider("cdn", 1)
def cdn(ctx: Context, req: Request) -> Outcome:
    delay(ctx, req)
    if req.task_type == "delete":
        return teardown(req)
    origin = req.resource.spec.get("origin", "")
    if not origin:
        raise TerminalError("spec.origin is empty: no bucket flowed into this cdn")
    return Outcome(status={"distribution_id": "dist-" + req.resource.name, "origin": origin,
                           "ttl_secs": req.resource.spec.get("ttl_secs", 0)})


@provider("vpc", 1)
def vpc(ctx: Context, req: Request) -> Outcome:
    delay(ctx, req)
    vpc_id = "vpc-" + hashlib.sha256(req.resource.name.encode()).hexdigest()[:12]
    if req.reaction == "teardown":
        return teardown(req)
    if req.reaction == "enable_flow_logs":
        assert req.operation is not None
        bucket_name = (req.config or {}).get("flow_logs_bucket", "default-flow-logs")
        return Outcome(status={"vpc_id": vpc_id, "flow_logs": True},
                       operation_output={"vpc_id": vpc_id, "bucket": bucket_name,
                                         "input": req.operation.input})
    return Outcome(status={"vpc_id": vpc_id, "flow_logs": False})


def main() -> None:
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("PROVIDER_LOG_LEVEL", "INFO"),
                        format="%(levelname)s %(name)s: %(message)s")
    secrets = [s for s in os.environ.get("PROVIDER_SECRETS", "").split(",") if s]
    if not secrets:
        sys.exit("PROVIDER_SECRETS is required: the endpoint's signing secret(s), whsec_..., comma-separated")
    budget = float(os.environ.get("SYNC_BUDGET_MS", "2000")) / 1000
    serve([bucket, cdn, vpc], secrets=secrets, addr=os.environ.get("PROVIDER_ADDR", "127.0.0.1:8443"),
          options=Options(sync_budget=budget))


if __name__ == "__main__":
    main()
