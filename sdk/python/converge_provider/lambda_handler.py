"""AWS Lambda hosting (docs/protocol.md §15): serve providers from Invoke and Function URL events.

::

    from converge_provider.lambda_handler import LambdaHandler
    handler = LambdaHandler([vpc], secrets=os.environ["PROVIDER_SECRETS"].split(","))

Point the function's handler at ``module.handler``. It takes two events, both shaped like a
Function URL request: the dispatcher's direct Invoke event (``{"version": "converge.v1",
"rawPath": "/", "headers": {...}, "body": "<envelope>", "isBase64Encoded": false}``) and a
Function URL request (its body possibly base64). Each is served by the SDK's Endpoint exactly
as an HTTP request (signature, health, deduplication, readiness) and answered with an HTTP
response object: ``{"statusCode", "headers", "body"}``.

A Lambda environment freezes once the handler returns, so nothing is left running then:

- an event with the header ``x-converge-invocation: event`` (an Event invoke, whose answer
  nobody reads) runs the work and POSTs the Result to the callback, heartbeating meanwhile,
  before returning 202; a refusal (401, 404, 503, ...) raises instead, so that it counts as a
  function error and Lambda retries the event;
- any other request is answered inline, 200 with the Result once the work finishes, however
  long after the sync budget, since a 202 would leave the work frozen.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from ._endpoint import MODE_EVENT, MODE_SYNC, Endpoint, Options, Provider
from ._signature import Secret

HEADER_INVOCATION = "x-converge-invocation"
INVOCATION_EVENT = "event"


class LambdaContext(Protocol):
    """The part of the Lambda context object the handler reads."""

    def get_remaining_time_in_millis(self) -> int: ...


class InvocationError(Exception):
    """InvocationError is raised for an event the function refuses or cannot answer in time:
    Lambda reports it as a function error."""


class LambdaHandler:
    """LambdaHandler serves providers from Lambda events; call it as ``handler(event, context)``."""

    def __init__(self, providers: Sequence[Provider], *, secrets: Iterable[str | Secret],
                 options: Options | None = None) -> None:
        self.endpoint = Endpoint(providers, secrets=secrets, options=options)

    def __call__(self, event: Mapping[str, Any], context: LambdaContext | None = None) -> dict[str, Any]:
        body_text = event.get("body") or ""
        if not isinstance(body_text, str):
            raise InvocationError("event body is not a string")
        if event.get("isBase64Encoded"):
            try:
                body = base64.b64decode(body_text, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvocationError(f"decode base64 body: {exc}") from None
        else:
            body = body_text.encode("utf-8")
        raw_headers = event.get("headers") or {}
        headers = {str(k).lower(): str(v) for k, v in raw_headers.items()}
        method = ((event.get("requestContext") or {}).get("http") or {}).get("method") or "POST"
        is_event = headers.get(HEADER_INVOCATION, "").lower() == INVOCATION_EVENT
        deadline = None
        if context is not None:
            deadline = time.time() + context.get_remaining_time_in_millis() / 1000.0
        resp = self.endpoint.handle(method, headers, body, MODE_EVENT if is_event else MODE_SYNC, deadline)
        if resp.status == 0:
            raise InvocationError("no answer before the invocation ended")
        if is_event and resp.status >= 300:
            raise InvocationError(f"event refused with {resp.status}: {resp.body.decode('utf-8', 'replace')}")
        headers_out = dict(resp.headers)
        if resp.body:
            headers_out.setdefault("Content-Type", "application/json")
        return {"statusCode": resp.status, "headers": headers_out, "body": resp.body.decode("utf-8")}


def from_env(providers: Sequence[Provider], options: Options | None = None) -> LambdaHandler:
    """Return the LambdaHandler for this function: the signing secrets come from the
    PROVIDER_SECRETS environment variable (whsec_..., comma-separated), as the Go SDK's
    lambda.Main reads them. Logs go to stderr (CloudWatch)."""
    env = os.environ.get("PROVIDER_SECRETS", "")
    if not env:
        raise ValueError("PROVIDER_SECRETS is required: the endpoint's signing secret(s), whsec_..., comma-separated")
    if options is None:
        options = Options()
    if options.logger is None:
        logging.basicConfig(level=logging.INFO)
    return LambdaHandler(providers, secrets=env.split(","), options=options)
