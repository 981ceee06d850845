"""Test helpers: a scripted control plane and a served endpoint, both over real HTTP on 127.0.0.1."""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from converge_provider import Options, Provider, Server, signed_headers

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Answer = tuple[int, dict[str, str], bytes]


@dataclass
class ControlPlane:
    """A stand-in for the dispatcher's callback listener: records every request and answers
    with script(path, request) or, by default, 200 {"result":"applied"} / a lease."""

    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    script: Callable[[Recorded], Answer | None] | None = None
    payloads: dict[str, Any] = field(default_factory=dict)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def answer(self, r: Recorded) -> Answer:
        if self.script is not None:
            a = self.script(r)
            if a is not None:
                return a
        if r.method == "GET":
            doc = self.payloads.get(r.path)
            if doc is None:
                return 404, {}, b""
            return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()
        if r.path.endswith("/heartbeat"):
            return 200, {"Content-Type": "application/json"}, b'{"lease_until":"2030-01-01T00:00:00Z"}'
        if r.path.endswith("/outcomes"):
            items = r.json()["outcomes"]
            res = [{"task_id": i["result"]["task_id"], "status": 200, "result": "applied"} for i in items]
            return 200, {"Content-Type": "application/json"}, json.dumps({"results": res}).encode()
        return 200, {"Content-Type": "application/json"}, b'{"result":"applied"}'

    def callback(self, task_id: str, batch: bool = False) -> dict[str, str]:
        cb = {"url": f"{self.url}/v1/tasks/{task_id}/outcome", "token": f"cbt_{task_id}"}
        if batch:
            cb["batch_url"] = f"{self.url}/v1/tasks/outcomes"
        return cb

    def matching(self, pred: Callable[[Recorded], bool]) -> list[Recorded]:
        with self.cond:
            return [r for r in self.requests if pred(r)]

    def wait_for(self, pred: Callable[[Recorded], bool], n: int = 1, timeout: float = 20.0) -> list[Recorded]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = [r for r in self.requests if pred(r)]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"waited for {n} matching requests, got {len(got)}: {self.requests}")
                self.cond.wait(left)

    def outcomes(self) -> list[Recorded]:
        return self.matching(lambda r: r.path.endswith("/outcome"))


@pytest.fixture
def control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            rec = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                           self.rfile.read(n))
            with cp.cond:
                cp.requests.append(rec)
                cp.cond.notify_all()
            status, headers, body = cp.answer(rec)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = handle_one
        do_POST = handle_one

        def log_message(self, format: str, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    cp.url = f"http://127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield cp
    srv.shutdown()
    srv.server_close()


@dataclass
class Served:
    server: Server
    url: str
    host: str
    port: int

    def post(self, body: bytes | dict[str, Any], *, msg_id: str = "msg_1", secret: str = SECRET,
             ts: int | None = None, headers: dict[str, str] | None = None,
             method: str = "POST") -> tuple[int, dict[str, str], bytes]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(signed_headers([secret], msg_id, int(time.time()) if ts is None else ts, raw))
        h.update(headers or {})
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            c.request(method, "/converge", body=raw, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()


ServeFn = Callable[..., Served]


@pytest.fixture
def serve() -> Iterator[ServeFn]:
    """serve(providers, **options) starts a Server on 127.0.0.1:0 in a thread."""
    started: list[tuple[Server, threading.Thread]] = []

    def start(providers: Sequence[Provider], drain_timeout: float = 10.0, **opts: Any) -> Served:
        srv = Server(providers, secrets=[SECRET], addr="127.0.0.1:0", options=Options(**opts),
                     drain_timeout=drain_timeout)
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        started.append((srv, t))
        host, port = srv.address
        return Served(srv, f"http://{host}:{port}/converge", host, port)

    yield start
    for srv, t in started:
        srv.stop()
        t.join(30)


def task(task_id: str = "t1", kind: str = "vpc", version: int = 1, **extra: Any) -> dict[str, Any]:
    """A task envelope of kind/version for task_id, claim_epoch 7, with extra fields."""
    env: dict[str, Any] = {
        "type": "task", "task_id": task_id, "claim_epoch": 7, "attempt": 1, "task_type": "reconcile",
        "reaction": "work", "trigger": "specChange", "kind": kind, "kind_version": version,
        "resource": {"id": "r-" + task_id, "kind": kind, "kind_version": version, "name": "n-" + task_id,
                     "labels": {}, "spec": {"cidr": "10.0.0.0/16"}, "generation": 3, "phase": "Reconciling"},
    }
    env.update(extra)
    return env
