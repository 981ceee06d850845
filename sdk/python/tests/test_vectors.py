"""The conformance vectors (protocol/vectors, format in its README) run against this SDK.

Each case gets its own Endpoint (HTTP cases through Endpoint.handle, Lambda cases through
LambdaHandler), a clock reading setup.now, and an injected HTTP client that plays the
control plane from the case's ``outgoing`` list; nothing touches the network.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from converge_provider import (
    Child,
    Condition,
    Config,
    Context,
    Edge,
    Endpoint,
    HTTPRequest,
    HTTPResponse,
    Options,
    Outcome,
    Ref,
    Request,
    Response,
    TerminalError,
    ValueFlow,
)
from converge_provider.lambda_handler import InvocationError, LambdaHandler

VECTORS = Path(__file__).resolve().parents[3] / "protocol" / "vectors"
CASES = sorted(VECTORS.glob("*.json"))
#: The optional protocol features this SDK implements (protocol/vectors/README.md).
FEATURES = {"callback_batch"}


def test_vectors_found() -> None:
    assert len(CASES) >= 50, f"no conformance vectors under {VECTORS}"


def strip_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: strip_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [strip_nulls(x) for x in v]
    return v


def normalise(v: Any) -> Any:
    """Nulls removed, and a batch answer's results sorted by task_id."""
    v = strip_nulls(v)
    if isinstance(v, dict) and v.get("type") == "batch" and isinstance(v.get("results"), list):
        v["results"] = sorted(v["results"], key=lambda r: str(r.get("task_id", "")))
    return v


def _pointer(doc: Any, ptr: str) -> tuple[Any, str | int]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]]
    for p in parts[:-1]:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    last = parts[-1]
    return doc, int(last) if isinstance(doc, list) else last


def compare_json(got: Any, want: Any, ignore: list[str], where: str) -> list[str]:
    got, want = normalise(got), normalise(want)
    for ptr in ignore:
        try:
            parent, key = _pointer(got, ptr)
            parent[key] = "(ignored)"
            wparent, wkey = _pointer(want, ptr)
            wparent[wkey] = "(ignored)"
        except (KeyError, IndexError, TypeError, ValueError):
            return [f"{where}: {ptr} is absent from {json.dumps(got)}"]
    if got != want:
        return [f"{where}: got {json.dumps(got, sort_keys=True)}\n   want {json.dumps(want, sort_keys=True)}"]
    return []


def outcome_of(o: dict[str, Any]) -> Outcome:
    return Outcome(
        status=o.get("status"),
        conditions=[Condition(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
                    for c in o.get("conditions") or []],
        children=[Child(c["kind"], c["kind_version"], c["name"], c.get("labels"), c.get("spec"))
                  for c in o.get("children") or []],
        edges=[Edge(Ref(**e["dependent"]), Ref(**e["dependency"]),
                    [ValueFlow(**v) for v in e.get("values") or []]) for e in o.get("edges") or []],
        configs=[Config(c["name"], c["kind"], c["kind_version"], c.get("is_default", False), c.get("spec"),
                        base64.b64decode(c["data"]) if c.get("data") else b"") for c in o.get("configs") or []],
        operation_output=o.get("operation_output"),
        side_effect_done=bool(o.get("side_effect_done")),
    )


def sees_of(req: Request) -> dict[str, Any]:
    """The request under the envelope's field names, as the vectors' ``sees`` names them."""
    r = req.resource
    return {
        "task_id": req.task_id, "claim_epoch": req.claim_epoch, "attempt": req.attempt,
        "kind_version": req.kind_version, "reaction": req.reaction, "trigger": req.trigger,
        "task_type": req.task_type, "transition": req.transition, "dedup_token": req.dedup_token,
        "config": req.config,
        "operation": None if req.operation is None else {"verb": req.operation.verb, "input": req.operation.input},
        "resource": {"id": r.id, "kind": r.kind, "kind_version": r.kind_version, "name": r.name,
                     "labels": r.labels, "spec": r.spec, "status": r.status, "generation": r.generation,
                     "phase": r.phase},
    }


class Case:
    """One vector's run: its handlers, its scripted control plane and what went wrong."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.cancelled: set[str] = set()
        self.answered = threading.Event()
        self.outgoing: list[dict[str, Any]] = list(case.get("outgoing") or [])
        self.made = 0

    def fail(self, msg: str) -> None:
        with self.lock:
            self.failures.append(msg)

    def work(self, ctx: Context, req: Request) -> Outcome:
        h = (self.case.get("handlers") or {}).get(req.task_id)
        with self.lock:
            self.calls[req.task_id] = self.calls.get(req.task_id, 0) + 1
        if h is None:
            self.fail(f"handler called for task {req.task_id}, which the case lists no handler for")
            raise RuntimeError("unexpected task")
        seen = sees_of(req)
        for name, want in (h.get("sees") or {}).items():
            self.failures.extend(compare_json(seen.get(name), want, [], f"handler of {req.task_id} sees {name}"))
        wait = h.get("wait")
        if wait == "answered":
            self.answered.wait(30)
        elif wait == "cancelled":
            if not ctx.wait(30):
                self.fail(f"handler of {req.task_id} was never cancelled")
            else:
                with self.lock:
                    self.cancelled.add(req.task_id)
            raise RuntimeError("cancelled")
        if h.get("error") is not None:
            e = h["error"]
            if e.get("terminal"):
                raise TerminalError(e["message"])
            raise RuntimeError(e["message"])
        return outcome_of(h.get("outcome") or {})

    def client(self, req: HTTPRequest) -> HTTPResponse:
        with self.lock:
            i = self.made
            self.made += 1
        if i >= len(self.outgoing):
            self.fail(f"unexpected outgoing call {i}: {req.method} {req.url} {req.body!r}")
            return HTTPResponse(500)
        want = self.outgoing[i]
        where = f"outgoing[{i}]"
        if (req.method, req.url) != (want["method"], want["url"]):
            self.fail(f"{where}: got {req.method} {req.url}, want {want['method']} {want['url']}")
        headers = {k.lower(): v for k, v in req.headers.items()}
        for k, v in (want.get("headers") or {}).items():
            if headers.get(k.lower()) != v:
                self.fail(f"{where}: header {k} = {headers.get(k.lower())!r}, want {v!r}")
        if "authorization" not in {k.lower() for k in want.get("headers") or {}} and "authorization" in headers:
            if "outcomes" in want["url"]:
                self.fail(f"{where}: a batched callback carries no authorization")
        if "body" in want:
            try:
                got = json.loads(req.body or b"")
            except ValueError:
                got = (req.body or b"").decode("utf-8", "replace")
            self.failures.extend(compare_json(got, want["body"], want.get("ignore") or [], where + " body"))
        a = want["answer"]
        return HTTPResponse(a["status"], {k.lower(): v for k, v in (a.get("headers") or {}).items()},
                            (a.get("body") or "").encode())


class VectorProvider:
    def __init__(self, kind: str, version: int, ready: bool, work: Callable[[Context, Request], Outcome]) -> None:
        self.kind, self.version, self._ready, self._work = kind, version, ready, work

    def ready(self) -> bool:
        return self._ready

    def work(self, ctx: Context, req: Request) -> Outcome:
        return self._work(ctx, req)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_vector(path: Path) -> None:
    case = json.loads(path.read_text())
    missing = set(case.get("features") or []) - FEATURES
    if missing:
        pytest.skip(f"{case['name']}: needs {sorted(missing)}, which this SDK does not implement")
    setup = case["setup"]
    run = Case(case)
    opts = Options(
        now=lambda: float(setup["now"]), tolerance=float(setup["tolerance_seconds"]),
        sync_budget=setup["sync_budget_ms"] / 1000, heartbeat_every=setup["heartbeat_every_ms"] / 1000,
        callback_batch_max=64 if setup["callback_batch"] else 1,
        callback_retry_initial=0.001, callback_retry_max=0.01, http_client=run.client,
    )
    providers = [VectorProvider(p["kind"], p["kind_version"], p["ready"], run.work) for p in setup["providers"]]
    expect = case["expect"]
    req = case["request"]
    if setup["transport"] == "lambda":
        lh = LambdaHandler(providers, secrets=setup["secrets"], options=opts)
        endpoint: Endpoint = lh.endpoint
        try:
            ans = lh(req["event"])
            raised = None
        except InvocationError as exc:
            ans, raised = {}, exc
        run.answered.set()
        if expect.get("function_error"):
            assert raised is not None, f"the adapter answered {ans} instead of failing the invocation"
        else:
            assert raised is None, f"the adapter failed the invocation: {raised}"
            status, headers, body = ans["statusCode"], dict(ans.get("headers") or {}), ans.get("body", "").encode()
    else:
        endpoint = Endpoint(providers, secrets=setup["secrets"], options=opts)
        resp = endpoint.handle(req["method"], req.get("headers") or {}, (req.get("body") or "").encode())
        run.answered.set()
        status, headers, body = resp.status, resp.headers, resp.body
    assert endpoint.shutdown(30), "the SDK did not drain within 30 s"

    errs = list(run.failures)
    if not expect.get("function_error"):
        lower = {k.lower(): v for k, v in headers.items()}
        if status != expect["status"]:
            errs.append(f"status {status}, want {expect['status']}: {body!r}")
        for k, v in (expect.get("headers") or {}).items():
            if lower.get(k.lower()) != v:
                errs.append(f"header {k} = {lower.get(k.lower())!r}, want {v!r}")
        for k in expect.get("headers_present") or []:
            if k.lower() not in lower:
                errs.append(f"header {k} absent")
        if expect.get("problem"):
            if lower.get("content-type") != "application/problem+json":
                errs.append(f"content-type {lower.get('content-type')!r}, want a problem")
            elif json.loads(body).get("status") != expect["status"]:
                errs.append(f"problem body {body!r} names another status")
        if "body" in expect:
            errs.extend(compare_json(json.loads(body), expect["body"], expect.get("ignore") or [], "answer body"))
    if run.made != len(run.outgoing):
        errs.append(f"{run.made} outgoing calls made, want {len(run.outgoing)}")
    for tid, h in (case.get("handlers") or {}).items():
        if run.calls.get(tid, 0) != 1:
            errs.append(f"handler of {tid} called {run.calls.get(tid, 0)} times, want once")
        if h.get("wait") == "cancelled" and tid not in run.cancelled:
            errs.append(f"handler of {tid} not cancelled")
    assert not errs, f"{case['name']} ({case['section']}): {case['description']}\n" + "\n".join(errs)


def test_runner_fails_a_broken_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner is not vacuous: a vector fails when the SDK gets the answer wrong."""
    monkeypatch.setattr(Endpoint, "_health", lambda self: Response(200, {}, b"{}"))
    with pytest.raises(AssertionError):
        test_vector(VECTORS / "health-probe.json")


