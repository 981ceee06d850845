"""A client of the AWS Lambda Runtime API, for a custom runtime (provided.al2023) or the
Runtime Interface Emulator, where the managed Python runtime's awslambdaric is absent.

``python3 -m converge_provider.lambda_runtime module:attr`` (or ``run(handler)``) loops:
GET the next invocation, call ``handler(event, context)``, POST its return value as the
response, or the exception as an error (``errorType`` ``Terminal`` for a TerminalError,
which the dispatcher takes as a terminal failure, docs/protocol.md §15.3). The managed
python3.12 runtime does not need it: it calls ``module.handler`` itself.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from ._context import TerminalError

API_VERSION = "2018-06-01"

Handler = Callable[[Mapping[str, Any], Any], Any]


class InvocationContext:
    """The context object handed to the handler: the invocation's id and deadline."""

    def __init__(self, request_id: str, deadline_ms: int, function_arn: str) -> None:
        self.aws_request_id = request_id
        self.deadline_ms = deadline_ms
        self.invoked_function_arn = function_arn
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before Lambda stops the invocation."""
        return max(self.deadline_ms - int(time.time() * 1000), 0)


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> None:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def error_body(exc: BaseException) -> bytes:
    """The Runtime API error document for exc."""
    typ = "Terminal" if isinstance(exc, TerminalError) else type(exc).__name__
    return json.dumps({"errorMessage": str(exc) or typ, "errorType": typ,
                       "stackTrace": traceback.format_exception(exc)}).encode("utf-8")


def run_once(api: str, handler: Handler) -> None:
    """Serve one invocation from the Runtime API at api (host:port)."""
    base = f"http://{api}/{API_VERSION}/runtime"
    with urllib.request.urlopen(f"{base}/invocation/next", timeout=None) as resp:
        request_id = resp.headers["Lambda-Runtime-Aws-Request-Id"]
        deadline_ms = int(resp.headers.get("Lambda-Runtime-Deadline-Ms") or 0)
        arn = resp.headers.get("Lambda-Runtime-Invoked-Function-Arn") or ""
        event = json.loads(resp.read())
    ctx = InvocationContext(request_id, deadline_ms, arn)
    try:
        result = handler(event, ctx)
        body = json.dumps(result).encode("utf-8")
    except Exception as exc:
        _post(f"{base}/invocation/{request_id}/error", error_body(exc),
              {"Lambda-Runtime-Function-Error-Type": "Terminal" if isinstance(exc, TerminalError) else "Unhandled"})
        return
    _post(f"{base}/invocation/{request_id}/response", body)


def run(handler: Handler) -> None:
    """Serve invocations forever from the Runtime API named by AWS_LAMBDA_RUNTIME_API."""
    api = os.environ["AWS_LAMBDA_RUNTIME_API"]
    while True:
        run_once(api, handler)


def load(spec: str) -> Handler:
    """Import "module:attr" (or the _HANDLER form "module.attr") and return the handler."""
    mod, sep, attr = spec.partition(":")
    if not sep:
        mod, _, attr = spec.rpartition(".")
    h: Handler = getattr(importlib.import_module(mod), attr)
    return h


def main(argv: list[str]) -> None:
    """Entry point: the handler named by argv[1] or the _HANDLER environment variable."""
    spec = argv[1] if len(argv) > 1 else os.environ.get("_HANDLER", "")
    if not spec:
        sys.exit("usage: python3 -m converge_provider.lambda_runtime module:handler (or set _HANDLER)")
    try:
        handler = load(spec)
    except Exception as exc:
        api = os.environ.get("AWS_LAMBDA_RUNTIME_API")
        if api:
            _post(f"http://{api}/{API_VERSION}/runtime/init/error", error_body(exc))
        raise
    run(handler)


if __name__ == "__main__":
    main(sys.argv)
