"""The serving-overhead bench server: a no-op provider for kind "bench" version 1.

Its work returns status {} at once, so a driver posting signed single and batched
requests measures what the SDK itself costs per task. It listens on BENCH_ADDR
(host:port) with the secret BENCH_SECRET (whsec_...), until SIGINT or SIGTERM.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from converge_provider import Context, FuncProvider, Outcome, Request, serve  # noqa: E402


def work(ctx: Context, req: Request) -> Outcome:
    """The no-op reaction: an empty status."""
    return Outcome(status={})


def main() -> None:
    """Serve the bench provider on BENCH_ADDR with BENCH_SECRET."""
    serve([FuncProvider("bench", 1, work)], secrets=[os.environ["BENCH_SECRET"]], addr=os.environ["BENCH_ADDR"])


if __name__ == "__main__":
    main()
