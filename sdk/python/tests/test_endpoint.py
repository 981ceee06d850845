"""The endpoint over real HTTP: answers, async callbacks, heartbeats, supersession, dedup,
batches, thin payloads, config, health and the HTTP refusals."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from typing import Any

import pytest

from converge_provider import (
    Child,
    Condition,
    Context,
    FuncProvider,
    Outcome,
    ProviderConfig,
    Request,
    Superseded,
    TerminalError,
    heartbeat_url,
    provider,
)

from .conftest import ControlPlane, ServeFn, task


def status_of(req: Request) -> Outcome:
    return Outcome(status={"cidr": req.resource.spec["cidr"], "name": req.resource.name})


def test_inline_result(serve: ServeFn) -> None:
    s = serve([FuncProvider("vpc", 1, lambda ctx, req: Outcome(
        status={"vpc_id": "vpc-1"}, conditions=[Condition("Ready", "True", "Created")]))])
    code, headers, body = s.post(task("t1"))
    assert code == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"task_id": "t1", "claim_epoch": 7, "outcome": {
        "status": {"vpc_id": "vpc-1"}, "conditions": [{"type": "Ready", "status": "True", "reason": "Created"}]}}


def test_request_fields(serve: ServeFn) -> None:
    seen: list[Request] = []

    def work(ctx: Context, req: Request) -> None:
        seen.append(req)

    s = serve([FuncProvider("vpc", 1, work)])
    env = task("t1", config={"endpoint": "x", "big": 9007199254740993}, bundle="UEsFBg==",
               deadline="2030-01-01T00:05:00Z", operation={"verb": "rotate", "input": {"n": 1}},
               observed=[{"id": "c1", "kind": "subnet", "kind_version": 1, "name": "c", "labels": {},
                          "spec": {}, "generation": 1, "phase": "Ready"}])
    code, _, body = s.post(env)
    assert code == 200 and json.loads(body)["outcome"] == {}
    req = seen[0]
    assert (req.task_id, req.claim_epoch, req.attempt, req.reaction, req.generation) == ("t1", 7, 1, "work", 3)
    assert req.config == {"endpoint": "x", "big": 9007199254740993}
    assert req.bundle == b"PK\x05\x06"
    assert req.deadline == dt.datetime(2030, 1, 1, 0, 5, tzinfo=dt.timezone.utc)
    assert req.operation is not None and req.operation.verb == "rotate" and req.operation.input == {"n": 1}
    assert req.observed[0].name == "c" and req.resource.spec == {"cidr": "10.0.0.0/16"}


def test_errors(serve: ServeFn) -> None:
    def work(ctx: Context, req: Request) -> Outcome:
        if req.resource.name == "n-term":
            raise TerminalError("cidr overlaps")
        if req.resource.name == "n-bad":
            return Outcome(children=[Child("subnet", 0, "x")])
        raise RuntimeError("cloud is down")

    s = serve([FuncProvider("vpc", 1, work)])
    assert json.loads(s.post(task("term"), msg_id="a")[2])["error"] == {"message": "cidr overlaps", "terminal": True}
    assert json.loads(s.post(task("x"), msg_id="b")[2])["error"] == {"message": "cloud is down", "terminal": False}
    bad = json.loads(s.post(task("bad"), msg_id="c")[2])["error"]
    assert not bad["terminal"] and "kind_version 0 outside 1..32767" in bad["message"]


def test_refusals(serve: ServeFn) -> None:
    s = serve([FuncProvider("vpc", 1, lambda ctx, req: None)], max_body=4096)
    assert s.post(task(), secret="whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n")[0] == 401
    assert s.post(task(), ts=int(time.time()) - 600)[0] == 401
    code, headers, body = s.post(task(), method="GET")
    assert code == 405 and headers["allow"] == "POST"
    assert s.post(task(), headers={"Content-Type": "text/plain"})[0] == 415
    assert s.post(task(spec="x" * 5000))[0] == 413
    assert s.post(b"not json")[0] == 400
    assert s.post(task(kind_version=0))[0] == 400
    assert s.post(task(claim_epoch="7"))[0] == 400
    code, headers, body = s.post(task(kind="subnet"))
    assert code == 404 and headers["content-type"] == "application/problem+json"
    assert json.loads(body)["detail"] == "no provider for subnet/v1 at this endpoint"


class Flaky:
    kind = "vpc"
    version = 1

    def __init__(self) -> None:
        self.up = True
        self.configs: list[ProviderConfig] = []

    def ready(self) -> bool:
        return self.up

    def on_config(self, cfg: ProviderConfig) -> None:
        self.configs.append(cfg)

    def work(self, ctx: Context, req: Request) -> Outcome:
        return Outcome(status={"config": req.config})


def test_health_readiness_and_config(serve: ServeFn) -> None:
    p = Flaky()
    s = serve([p, FuncProvider("subnet", 2, lambda ctx, req: None)])
    code, headers, body = s.post({"type": "health"}, msg_id="probe")
    assert code == 200 and headers["cache-control"] == "no-store"
    assert json.loads(body) == {"kinds": [{"kind": "vpc", "kind_version": 1, "ready": True},
                                          {"kind": "subnet", "kind_version": 2, "ready": True}]}
    assert s.post(task("a", config={"x": 1}), msg_id="a")[0] == 200
    assert s.post(task("b", config={"x": 1}), msg_id="b")[0] == 200
    assert s.post(task("c", config={"x": 2}, bundle="AQI="), msg_id="c")[0] == 200
    assert [(c.spec, c.data) for c in p.configs] == [({"x": 1}, b""), ({"x": 2}, b"\x01\x02")]
    p.up = False
    assert json.loads(s.post({"type": "health"}, msg_id="probe2")[2])["kinds"][0]["ready"] is False
    code, headers, _ = s.post(task("d"), msg_id="d")
    assert code == 503 and headers["retry-after"] == "5"


def test_async_callback_and_heartbeats(serve: ServeFn, control_plane: ControlPlane) -> None:
    release = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        release.wait(20)
        return status_of(req)

    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.05, heartbeat_every=0.05)
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    code, _, _ = s.post(task("t1", callback=control_plane.callback("t1")), headers={"traceparent": tp})
    assert code == 202
    beats = control_plane.wait_for(lambda r: r.path == "/v1/tasks/t1/heartbeat", n=2)
    assert beats[0].headers["authorization"] == "Bearer cbt_t1"
    assert beats[0].json() == {"task_id": "t1", "claim_epoch": 7}
    assert beats[0].headers["traceparent"] == tp
    release.set()
    (cb,) = control_plane.wait_for(lambda r: r.path == "/v1/tasks/t1/outcome")
    assert cb.headers["authorization"] == "Bearer cbt_t1" and cb.headers["content-type"] == "application/json"
    assert cb.headers["traceparent"] == tp
    assert cb.json() == {"task_id": "t1", "claim_epoch": 7, "outcome": {"status": {"cidr": "10.0.0.0/16", "name": "n-t1"}}}


def test_superseded_cancels_work(serve: ServeFn, control_plane: ControlPlane) -> None:
    causes: list[BaseException | None] = []
    stopped = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        ctx.wait(20)
        causes.append(ctx.cause())
        stopped.set()
        return Outcome(status={"late": True})

    control_plane.script = lambda r: (409, {}, b"") if r.path.endswith("/heartbeat") else None
    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.0, heartbeat_every=0.05)
    assert s.post(task("t1", callback=control_plane.callback("t1")))[0] == 202
    assert stopped.wait(20)
    assert isinstance(causes[0], Superseded)
    # Its Result is dropped: give a delivery every chance to show up, then check.
    s.server.stop()
    assert s.server.wait_stopped(20)
    assert control_plane.outcomes() == []


def slow_empty(ctx: Context, req: Request) -> Outcome:
    ctx.wait(0.2)
    return Outcome()


def test_callback_retried_until_accepted(serve: ServeFn, control_plane: ControlPlane) -> None:
    script: list[tuple[int, dict[str, str], bytes]] = [(503, {"Retry-After": "0"}, b""), (500, {}, b"")]
    answers = iter(script)
    control_plane.script = lambda r: next(answers, None) if r.path.endswith("/outcome") else None
    s = serve([FuncProvider("vpc", 1, slow_empty)],
              sync_budget=0.0, callback_retry_initial=0.01, callback_retry_max=0.05)
    assert s.post(task("t1", callback=control_plane.callback("t1"), deadline="2099-01-01T00:00:00Z"))[0] == 202
    control_plane.wait_for(lambda r: r.path.endswith("/outcome"), n=3)


def test_callback_rejected_not_retried(serve: ServeFn, control_plane: ControlPlane) -> None:
    control_plane.script = lambda r: (400, {}, b"") if r.path.endswith("/outcome") else None
    s = serve([FuncProvider("vpc", 1, slow_empty)],
              sync_budget=0.0, callback_retry_initial=0.01)
    assert s.post(task("t1", callback=control_plane.callback("t1")))[0] == 202
    control_plane.wait_for(lambda r: r.path.endswith("/outcome"))
    s.server.stop()
    assert s.server.wait_stopped(20)
    assert len(control_plane.outcomes()) == 1


def test_dedup_on_webhook_id(serve: ServeFn, control_plane: ControlPlane) -> None:
    calls: list[str] = []
    release = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        calls.append(req.task_id)
        release.wait(20)
        return Outcome(status={"n": len(calls)})

    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.05)
    env = task("t1", callback=control_plane.callback("t1"))
    assert s.post(env, msg_id="m1")[0] == 202
    assert s.post(env, msg_id="m1")[0] == 202  # still running: not run twice
    release.set()
    (cb,) = control_plane.wait_for(lambda r: r.path.endswith("/outcome"))
    code, _, body = s.post(env, msg_id="m1")
    assert code == 200 and body == cb.body  # finished: the same Result body
    assert s.post(env, msg_id="m2")[0] == 200  # a new claim's id runs again
    assert calls == ["t1", "t1"]


def test_batch(serve: ServeFn, control_plane: ControlPlane) -> None:
    def work(ctx: Context, req: Request) -> Outcome:
        if req.resource.name == "n-slow":
            time.sleep(0.5)
        return status_of(req)

    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.2)
    batch = {"type": "batch", "tasks": [
        task("fast", callback=control_plane.callback("fast")),
        task("slow", callback=control_plane.callback("slow")),
        task("other", kind="subnet", callback=control_plane.callback("other")),
    ]}
    code, _, body = s.post(batch)
    assert code == 200
    doc = json.loads(body)
    assert doc["type"] == "batch"
    res = {r["task_id"]: r for r in doc["results"]}
    assert res["fast"]["outcome"]["status"]["name"] == "n-fast"
    assert res["slow"] == {"task_id": "slow", "claim_epoch": 7, "accepted": True}
    assert res["other"]["error"] == {"message": "404 Not Found: no provider for subnet/v1 at this endpoint",
                                     "terminal": False}
    (cb,) = control_plane.wait_for(lambda r: r.path == "/v1/tasks/slow/outcome")
    assert cb.json()["outcome"]["status"]["name"] == "n-slow"
    assert s.post({"type": "batch", "tasks": []}, msg_id="empty")[0] == 400


def test_batched_callbacks(serve: ServeFn, control_plane: ControlPlane) -> None:
    go = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        go.wait(20)
        return status_of(req)

    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.0, callback_batch_window=0.5)
    batch = {"type": "batch", "tasks": [task(f"t{i}", callback=control_plane.callback(f"t{i}", batch=True))
                                        for i in range(3)]}
    code, _, body = s.post(batch)
    assert code == 200 and all(r["accepted"] for r in json.loads(body)["results"])
    go.set()
    (req,) = control_plane.wait_for(lambda r: r.path == "/v1/tasks/outcomes")
    items = req.json()["outcomes"]
    assert sorted(i["token"] for i in items) == ["cbt_t0", "cbt_t1", "cbt_t2"]
    assert "authorization" not in req.headers
    assert control_plane.outcomes() == []


def test_thin_payload(serve: ServeFn, control_plane: ControlPlane) -> None:
    full = task("t1", config={"k": "v"})
    control_plane.payloads["/v1/tasks/t1"] = full
    control_plane.script = lambda r: (409, {}, b"") if r.path == "/v1/tasks/gone" else (
        (410, {}, b"resource gone") if r.path == "/v1/tasks/t410" else None)
    s = serve([FuncProvider("vpc", 1, lambda ctx, req: Outcome(status={"cfg": req.config, "n": req.resource.name}))])

    def thin(tid: str, path: str) -> dict[str, Any]:
        e = task(tid, callback=control_plane.callback(tid), payload_url=control_plane.url + path)
        del e["resource"]
        return e

    code, _, body = s.post(thin("t1", "/v1/tasks/t1"), msg_id="a")
    assert code == 200 and json.loads(body)["outcome"]["status"] == {"cfg": {"k": "v"}, "n": "n-t1"}
    (get,) = control_plane.matching(lambda r: r.method == "GET")
    assert get.headers["authorization"] == "Bearer cbt_t1"
    err = json.loads(s.post(thin("t410", "/v1/tasks/t410"), msg_id="b")[2])["error"]
    assert not err["terminal"] and "410" in err["message"]
    err = json.loads(s.post(thin("gone", "/v1/tasks/gone"), msg_id="c")[2])["error"]
    assert "superseded" in err["message"]
    no_cb = task("x", payload_url=control_plane.url + "/v1/tasks/x")
    assert s.post(no_cb, msg_id="d")[0] == 400


def test_drain_finishes_async_work(serve: ServeFn, control_plane: ControlPlane) -> None:
    started = threading.Event()

    @provider("vpc", 1)
    def slow(ctx: Context, req: Request) -> Outcome:
        started.set()
        time.sleep(0.3)
        return Outcome(status={"done": True})

    s = serve([slow], sync_budget=0.0)
    assert s.post(task("t1", callback=control_plane.callback("t1")))[0] == 202
    assert started.wait(10)
    s.server.stop()
    assert s.server.wait_stopped(20)
    assert [r.json()["outcome"] for r in control_plane.outcomes()] == [{"status": {"done": True}}]


def test_drain_timeout_cancels_work(serve: ServeFn, control_plane: ControlPlane) -> None:
    causes: list[BaseException | None] = []
    done = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        ctx.wait(30)
        causes.append(ctx.cause())
        done.set()
        return Outcome()

    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.0, drain_timeout=0.2)
    assert s.post(task("t1", callback=control_plane.callback("t1")))[0] == 202
    s.server.stop()
    assert s.server.wait_stopped(20)
    assert done.wait(10)
    assert type(causes[0]).__name__ == "Shutdown"


def test_heartbeat_url() -> None:
    assert heartbeat_url("https://d:8080/v1/tasks/a/outcome") == "https://d:8080/v1/tasks/a/heartbeat"
    assert heartbeat_url("https://d/v1/tasks/a/outcome?x=1") == "https://d/v1/tasks/a/heartbeat?x=1"
    assert heartbeat_url("https://d/cb") == "https://d/cb/heartbeat"
    assert heartbeat_url("https://d/v1/tasks/a/outcome/") == "https://d/v1/tasks/a/heartbeat"


def test_invalid_providers() -> None:
    from converge_provider import Endpoint

    with pytest.raises(ValueError, match="outside"):
        Endpoint([FuncProvider("vpc", 0, lambda c, r: None)], secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
    with pytest.raises(ValueError, match="two providers"):
        Endpoint([FuncProvider("vpc", 1, lambda c, r: None)] * 2, secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
    with pytest.raises(ValueError, match="no signing secrets"):
        Endpoint([FuncProvider("vpc", 1, lambda c, r: None)], secrets=[])




@pytest.mark.parametrize("opts", [
    {"sync_budget": -1}, {"tolerance": 0.5}, {"max_body": 0}, {"heartbeat_every": 0},
    {"result_cache_entries": 0}, {"callback_retry_initial": 2, "callback_retry_max": 1},
    {"callback_batch_max": 257}, {"batch_concurrency": 0}, {"callback_timeout": 0},
])
def test_invalid_options(opts: dict[str, Any]) -> None:
    from converge_provider import Endpoint, Options

    with pytest.raises(ValueError):
        Endpoint([FuncProvider("vpc", 1, lambda c, r: None)], secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
                 options=Options(**opts))


def test_merge_config_and_unit_testing_work() -> None:
    from converge_provider import Resource, merge_config

    assert merge_config({"a": {"x": 1, "y": [1]}, "b": 2}, {"a": {"y": [2]}, "c": 3}) == \
        {"a": {"x": 1, "y": [2]}, "b": 2, "c": 3}
    assert merge_config({"a": 1}, None) == {"a": 1}
    assert merge_config(None, {"a": 1}) == {"a": 1}
    with pytest.raises(ValueError, match="override"):
        merge_config({"a": 1}, [1])
    # A Request needs only what the reaction reads: work is unit-tested without a server.
    out = status_of(Request(resource=Resource(name="n", spec={"cidr": "10.1.0.0/16"})))
    assert out.status == {"cidr": "10.1.0.0/16", "name": "n"}


def test_batch_past_its_budget(serve: ServeFn, control_plane: ControlPlane) -> None:
    """More slow tasks than batch_concurrency: the answer comes at the budget, every task
    accepted (those not yet started too), and every Result reaches its own callback."""
    release = threading.Event()

    def work(ctx: Context, req: Request) -> Outcome:
        release.wait(20)
        return status_of(req)

    s = serve([FuncProvider("vpc", 1, work)], sync_budget=0.2, batch_concurrency=2)
    ids = [f"t{i}" for i in range(5)]
    # The work waits for release, set only once the answer came: outcomes in the answer
    # would mean it waited for the work.
    code, _, body = s.post({"type": "batch", "tasks": [task(i, callback=control_plane.callback(i)) for i in ids]})
    release.set()
    assert code == 200
    assert [r for r in json.loads(body)["results"]] == [
        {"task_id": i, "claim_epoch": 7, "accepted": True} for i in ids]
    got = control_plane.wait_for(lambda r: r.path.endswith("/outcome"), n=5)
    assert sorted(r.json()["task_id"] for r in got) == ids
    assert all(r.json()["outcome"]["status"]["name"] == "n-" + r.json()["task_id"] for r in got)
