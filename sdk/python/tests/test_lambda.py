"""The Lambda adapter (Invoke and Function URL events) and the Runtime API client."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from converge_provider import Context, FuncProvider, Outcome, Request, TerminalError, signed_headers
from converge_provider.lambda_handler import InvocationError, LambdaHandler, from_env
from converge_provider.lambda_runtime import run_once

from .conftest import SECRET, ControlPlane, task


def work(ctx: Context, req: Request) -> Outcome:
    if req.resource.name == "n-term":
        raise TerminalError("spec.origin is empty")
    ctx.wait(0.3)  # past the sync budget below: still answered inline
    return Outcome(status={"name": req.resource.name})


@pytest.fixture
def handler() -> LambdaHandler:
    from converge_provider import Options

    return LambdaHandler([FuncProvider("vpc", 1, work)], secrets=[SECRET], options=Options(sync_budget=0.01))


def invoke_event(env: dict[str, Any], msg_id: str = "msg_1", extra: dict[str, str] | None = None,
                 secret: str = SECRET) -> dict[str, Any]:
    body = json.dumps(env)
    headers = {"content-type": "application/json", **signed_headers([secret], msg_id, int(time.time()), body.encode())}
    headers.update(extra or {})
    return {"version": "converge.v1", "rawPath": "/", "headers": headers, "body": body, "isBase64Encoded": False}


class Ctx:
    def get_remaining_time_in_millis(self) -> int:
        return 20_000


def test_sync_invoke_answers_inline(handler: LambdaHandler) -> None:
    resp = handler(invoke_event(task("t1")), Ctx())
    assert resp["statusCode"] == 200
    assert json.loads(resp["body"]) == {"task_id": "t1", "claim_epoch": 7, "outcome": {"status": {"name": "n-t1"}}}
    term = json.loads(handler(invoke_event(task("term"), msg_id="m2"), Ctx())["body"])
    assert term["error"] == {"message": "spec.origin is empty", "terminal": True}


def test_function_url_base64_and_refusals(handler: LambdaHandler) -> None:
    ev = invoke_event(task("t1"))
    ev["body"] = base64.b64encode(ev["body"].encode()).decode()
    ev["isBase64Encoded"] = True
    ev["requestContext"] = {"http": {"method": "POST"}}
    assert handler(ev, Ctx())["statusCode"] == 200
    bad = invoke_event(task("t2"), secret="whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n")
    assert handler(bad, Ctx())["statusCode"] == 401
    get = invoke_event(task("t3"))
    get["requestContext"] = {"http": {"method": "GET"}}
    assert handler(get, Ctx())["statusCode"] == 405
    health = handler(invoke_event({"type": "health"}), Ctx())
    assert json.loads(health["body"]) == {"kinds": [{"kind": "vpc", "kind_version": 1, "ready": True}]}


def test_batch_invoke(handler: LambdaHandler) -> None:
    resp = handler(invoke_event({"type": "batch", "tasks": [task("a"), task("b")]}), Ctx())
    assert resp["statusCode"] == 200
    assert sorted(r["outcome"]["status"]["name"] for r in json.loads(resp["body"])["results"]) == ["n-a", "n-b"]


def test_event_invoke_delivers_before_returning(handler: LambdaHandler, control_plane: ControlPlane) -> None:
    ev = invoke_event(task("t1", callback=control_plane.callback("t1")), extra={"x-converge-invocation": "event"})
    resp = handler(ev, Ctx())
    assert resp["statusCode"] == 202
    (cb,) = control_plane.outcomes()  # already there when the handler returned
    assert cb.json()["outcome"] == {"status": {"name": "n-t1"}}
    # A repeat of a finished delivery posts the cached Result again: nobody reads the answer.
    assert handler(ev, Ctx())["statusCode"] == 202
    assert len(control_plane.outcomes()) == 2
    with pytest.raises(InvocationError, match="refused with 400"):
        handler(invoke_event(task("t2"), extra={"x-converge-invocation": "event"}), Ctx())


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROVIDER_SECRETS", raising=False)
    with pytest.raises(ValueError, match="PROVIDER_SECRETS"):
        from_env([FuncProvider("vpc", 1, work)])
    monkeypatch.setenv("PROVIDER_SECRETS", SECRET)
    assert from_env([FuncProvider("vpc", 1, work)])(invoke_event(task("t1")), Ctx())["statusCode"] == 200


@pytest.fixture
def runtime_api() -> Iterator[tuple[str, list[tuple[str, bytes]], list[bytes]]]:
    """A stand-in Runtime API: hands out the queued events, records responses and errors."""
    events: list[bytes] = []
    posted: list[tuple[str, bytes]] = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = events.pop(0)
            self.send_response(200)
            self.send_header("Lambda-Runtime-Aws-Request-Id", "req-1")
            self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 20_000))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            n = int(self.headers["Content-Length"])
            posted.append((self.path, self.rfile.read(n)))
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}", posted, events
    srv.shutdown()
    srv.server_close()


def test_runtime_api_loop(handler: LambdaHandler,
                          runtime_api: tuple[str, list[tuple[str, bytes]], list[bytes]]) -> None:
    api, posted, events = runtime_api
    events.append(json.dumps(invoke_event(task("t1"))).encode())
    run_once(api, handler)
    path, body = posted[0]
    assert path == "/2018-06-01/runtime/invocation/req-1/response"
    assert json.loads(json.loads(body)["body"])["outcome"] == {"status": {"name": "n-t1"}}

    def terminal(event: Any, ctx: Any) -> Any:
        raise TerminalError("bad spec")

    events.append(b"{}")
    run_once(api, terminal)
    path, body = posted[1]
    assert path == "/2018-06-01/runtime/invocation/req-1/error"
    assert json.loads(body)["errorType"] == "Terminal"


def test_sync_invoke_out_of_time_is_a_function_error() -> None:
    release = threading.Event()

    def slow(ctx: Context, req: Request) -> Outcome:
        release.wait(20)
        return Outcome()

    class Short:
        def get_remaining_time_in_millis(self) -> int:
            return 100

    h = LambdaHandler([FuncProvider("vpc", 1, slow)], secrets=[SECRET])
    try:
        with pytest.raises(InvocationError, match="no answer before the invocation ended"):
            h(invoke_event(task("t1")), Short())
    finally:
        release.set()


def test_sync_batch_out_of_time() -> None:
    """A sync invoke's batch waits for its tasks until the invocation's deadline; a task
    unfinished then is a transient error, the others' Results stand."""
    release = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        if req.task_id == "slow":
            release.wait(20)
        return Outcome(status={"id": req.task_id})

    class Short:
        def get_remaining_time_in_millis(self) -> int:
            return 300

    h = LambdaHandler([FuncProvider("vpc", 1, work)], secrets=[SECRET])
    try:
        resp = h(invoke_event({"type": "batch", "tasks": [task("fast"), task("slow")]}), Short())
    finally:
        release.set()
    res = {r["task_id"]: r for r in json.loads(resp["body"])["results"]}
    assert res["fast"]["outcome"] == {"status": {"id": "fast"}}
    assert res["slow"]["error"] == {"message": "no answer: the batch request ended before the task was answered",
                                    "terminal": False}
