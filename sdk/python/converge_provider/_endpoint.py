"""The provider endpoint: verification, dispatch to providers, answers, callbacks, heartbeats."""

from __future__ import annotations

import collections
import functools
import hashlib
import http
import json
import logging
import queue
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, runtime_checkable

from ._context import Cancelled, Context, Finished, Shutdown, Superseded, TerminalError
from ._http import HTTPClient, HTTPRequest, urllib_client
from ._signature import DEFAULT_TOLERANCE, Secret, SignatureError, parse_secrets, verify
from ._wire import (
    MAX_KIND_VERSION,
    Envelope,
    KindVersion,
    MalformedEnvelope,
    Outcome,
    ProviderConfig,
    Request,
    decode_envelope,
    dumps,
    new_request,
    result_body,
)

SYNC_BUDGET_DEFAULT = 2.0
MAX_BODY_DEFAULT = 16 << 20
HEARTBEAT_MIN_DEFAULT = 1.0
HEARTBEAT_NO_DEADLINE = 10.0
RESULT_CACHE_ENTRIES_DEFAULT = 10_000
RESULT_CACHE_TTL_DEFAULT = 600.0
RESULT_CACHE_BYTES_DEFAULT = 64 << 20
CALLBACK_GRACE_DEFAULT = 60.0
CALLBACK_TIMEOUT_DEFAULT = 30.0
BATCH_CONCURRENCY_DEFAULT = 16
CALLBACK_BATCH_WINDOW_DEFAULT = 0.002
CALLBACK_BATCH_MAX_DEFAULT = 64
MAX_CALLBACK_BATCH = 256
RETRY_AFTER_UNREADY = 5
USER_AGENT = "converge-provider-python"


@runtime_checkable
class Provider(Protocol):
    """Provider is the handler code for one (kind, version).

    ``kind`` and ``version`` name the pair it serves (version 1..32767; there is no implicit
    version 1). ``work(ctx, req)`` runs one task and returns its Outcome (None means an empty
    success); raising fails the task, transiently unless the exception is a TerminalError.
    Work must honour ``ctx`` (the deadline, supersession, shutdown) and be idempotent:
    delivery is at least once. Two methods are optional, found with getattr once, at
    construction: ``ready() -> bool`` (health probes report it; without it a provider is
    always ready) and ``on_config(cfg: ProviderConfig) -> None`` (called before work whenever
    the task's effective config differs from the last one the provider saw).
    """

    @property
    def kind(self) -> str: ...

    @property
    def version(self) -> int: ...

    def work(self, ctx: Context, req: Request) -> Outcome | None: ...


WorkFn = Callable[[Context, Request], "Outcome | None"]


class FuncProvider:
    """FuncProvider is a Provider made of a function: the whole of a provider that needs no
    config hook and is always ready."""

    def __init__(self, kind: str, version: int, work: WorkFn) -> None:
        self.kind = kind
        self.version = version
        self._work = work

    def work(self, ctx: Context, req: Request) -> Outcome | None:
        return self._work(ctx, req)


def provider(kind: str, version: int) -> Callable[[WorkFn], FuncProvider]:
    """Decorator making a Provider of a work function: ``@provider("vpc", 1)``."""

    def wrap(fn: WorkFn) -> FuncProvider:
        return FuncProvider(kind, version, fn)

    return wrap


@dataclass
class Options:
    """Options configure an Endpoint; every field has the Go SDK's default.

    sync_budget: seconds a task request waits for work before answering 202.
    tolerance: seconds webhook-timestamp may be off the clock either way.
    max_body: request body cap in bytes (413 beyond).
    http_client: the client for callbacks, heartbeats and payload fetches (default urllib).
    now: the clock signature timestamps are checked against (Unix seconds); deadlines and
    timers always use the real clock.
    heartbeat_every: the heartbeat interval (default a third of the time left to the
    deadline when the task went asynchronous, at least 1 s; 10 s without a deadline).
    result_cache_*: the finished-result cache that answers repeated webhook-ids.
    callback_retry_initial/max, callback_grace: the callback's exponential backoff and how
    long past the deadline it is retried.
    callback_batch_window/max: how asynchronous Results share a batched callback (§8.1);
    max 1 sends each on its own.
    batch_concurrency: how many tasks of one batched delivery are served at once.
    """

    sync_budget: float = SYNC_BUDGET_DEFAULT
    tolerance: float = DEFAULT_TOLERANCE
    max_body: int = MAX_BODY_DEFAULT
    http_client: HTTPClient | None = None
    now: Callable[[], float] | None = None
    logger: logging.Logger | None = None
    heartbeat_every: float | None = None
    result_cache_entries: int = RESULT_CACHE_ENTRIES_DEFAULT
    result_cache_ttl: float = RESULT_CACHE_TTL_DEFAULT
    result_cache_bytes: int = RESULT_CACHE_BYTES_DEFAULT
    callback_retry_initial: float = 0.5
    callback_retry_max: float = 30.0
    callback_grace: float = CALLBACK_GRACE_DEFAULT
    callback_timeout: float = CALLBACK_TIMEOUT_DEFAULT
    callback_batch_window: float = CALLBACK_BATCH_WINDOW_DEFAULT
    callback_batch_max: int = CALLBACK_BATCH_MAX_DEFAULT
    batch_concurrency: int = BATCH_CONCURRENCY_DEFAULT

    def check(self) -> None:
        """Raise ValueError for an invalid value."""
        if self.sync_budget < 0:
            raise ValueError("sync_budget: negative")
        if self.tolerance < 1:
            raise ValueError("tolerance: must be at least 1s")
        if self.max_body <= 0:
            raise ValueError("max_body: must be positive")
        if self.heartbeat_every is not None and self.heartbeat_every <= 0:
            raise ValueError("heartbeat_every: must be positive")
        if self.result_cache_entries <= 0 or self.result_cache_ttl <= 0:
            raise ValueError("result cache: entries and ttl must be positive")
        if not 0 < self.callback_retry_initial <= self.callback_retry_max or self.callback_grace < 0:
            raise ValueError("callback retry: need 0 < initial <= max and grace >= 0")
        if self.callback_batch_window < 0 or not 1 <= self.callback_batch_max <= MAX_CALLBACK_BATCH:
            raise ValueError(f"callback batch: need window >= 0 and 1 <= max <= {MAX_CALLBACK_BATCH}")
        if self.callback_timeout <= 0:
            raise ValueError("callback_timeout: must be positive")
        if self.batch_concurrency < 1:
            raise ValueError("batch_concurrency: must be positive")


@dataclass
class Response:
    """Response is an endpoint's answer: status, headers and body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def problem(status: int, detail: str, headers: Mapping[str, str] | None = None) -> Response:
    """Return an RFC 9457 problem answer."""
    body = {"type": "about:blank", "title": _status_text(status), "status": status}
    if detail:
        body["detail"] = detail
    h = {"Content-Type": "application/problem+json"}
    h.update(headers or {})
    return Response(status, h, dumps(body))


def _status_text(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _json_response(status: int, body: bytes) -> Response:
    return Response(status, {"Content-Type": "application/json"}, body)


class _ResultCache:
    """Finished Result bodies by delivery key, bounded by entries, bytes and age."""

    def __init__(self, entries: int, max_bytes: int, ttl: float) -> None:
        self._entries, self._max_bytes, self._ttl = entries, max_bytes, ttl
        self._bytes = 0
        self._items: collections.OrderedDict[str, tuple[bytes, float]] = collections.OrderedDict()

    def get(self, key: str, now: float) -> bytes | None:
        item = self._items.get(key)
        if item is None:
            return None
        if now >= item[1]:
            self._remove(key)
            return None
        return item[0]

    def put(self, key: str, body: bytes, now: float) -> None:
        if key in self._items:
            self._remove(key)
        if len(body) > self._max_bytes:
            return
        self._items[key] = (body, now + self._ttl)
        self._bytes += len(body)
        while self._items:
            oldest, (obody, expires) = next(iter(self._items.items()))
            if len(self._items) <= self._entries and self._bytes <= self._max_bytes and now < expires:
                break
            self._remove(oldest)

    def _remove(self, key: str) -> None:
        body, _ = self._items.pop(key)
        self._bytes -= len(body)


class _Slot:
    """One registered provider, its optional hooks and the last config its on_config saw."""

    def __init__(self, kv: KindVersion, p: Provider) -> None:
        self.kv = kv
        self.p = p
        self.on_config: Callable[[ProviderConfig], None] | None = getattr(p, "on_config", None)
        self.ready: Callable[[], bool] | None = getattr(p, "ready", None)
        self.lock = threading.Lock()
        self.seen = False
        self.sum = b""

    def configure(self, req: Request) -> None:
        if self.on_config is None:
            return
        with self.lock:
            h = hashlib.sha256(json.dumps(req.config, sort_keys=True, separators=(",", ":")).encode())
            h.update(b"\x00")
            h.update(req.bundle)
            s = h.digest()
            if self.seen and s == self.sum:
                return
            self.on_config(ProviderConfig(spec=req.config, data=req.bundle))
            self.seen, self.sum = True, s


class _Workers:
    """Threads reused across tasks: go(fn) runs fn on an idle thread, or a new one when none
    is idle (never queued behind running work, which may run for minutes). A thread idle
    for a minute exits. Starting a thread per task was a visible share of a batch's cost."""

    IDLE_EXIT = 60.0

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._q: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def go(self, fn: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._q.put(fn)
        if spawn:
            threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                fn = self._q.get(timeout=self.IDLE_EXIT)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue  # go() counted on this thread: its function is queued
            try:
                fn()
            except Exception:
                self._log.exception("converge_provider: a background task raised")
            with self._lock:
                self._idle += 1


class _Run:
    """One execution of work for one delivery."""

    def __init__(self, key: str, webhook_id: str, traceparent: str, env: Envelope, slot: _Slot) -> None:
        self.key = key
        self.webhook_id = webhook_id
        self.traceparent = traceparent
        self.env = env
        self.slot = slot
        deadline = env.deadline.timestamp() if env.deadline is not None else None
        self.ctx = Context(deadline)
        self.done = threading.Event()
        self.body = b""
        self.async_ = False  # guarded by Endpoint._lock
        self.finished = False  # guarded by Endpoint._lock
        self._live = 0
        self._live_cond = threading.Condition()

    def live_add(self) -> None:
        with self._live_cond:
            self._live += 1

    def live_done(self) -> None:
        with self._live_cond:
            self._live -= 1
            self._live_cond.notify_all()

    def wait_settled(self, timeout: float | None) -> bool:
        with self._live_cond:
            return self._live_cond.wait_for(lambda: self._live == 0, timeout)


class _CallbackBatch:
    def __init__(self, traceparent: str) -> None:
        self.items: list[dict[str, Any]] = []
        self.traceparent = traceparent
        self.full = threading.Event()
        self.done = threading.Event()
        self.answers: list[dict[str, Any]] = []
        self.err: str | None = None


def traceparent_of(headers: Mapping[str, str]) -> str:
    """Return the request's W3C traceparent when well formed (§17), else ""."""
    v = headers.get("traceparent", "")
    if len(v) != 55 or v[2] != "-" or v[35] != "-" or v[52] != "-" or v[:2] == "ff":
        return ""
    hexpart = v[:2] + v[3:35] + v[36:52] + v[53:]
    if any(c not in "0123456789abcdef" for c in hexpart):
        return ""
    if v[3:35].strip("0") == "" or v[36:52].strip("0") == "":
        return ""
    return v


def heartbeat_url(callback_url: str) -> str:
    """The heartbeat URL of a callback URL: its final /outcome replaced by /heartbeat, or
    /heartbeat appended; the query kept (docs/protocol.md §9)."""
    u = urllib.parse.urlsplit(callback_url)
    path = u.path[:-1] if u.path.endswith("/") else u.path
    if path.endswith("/outcome"):
        path = path[: -len("/outcome")]
    return urllib.parse.urlunsplit((u.scheme, u.netloc, path + "/heartbeat", u.query, u.fragment))


def _retry_after(v: str) -> float:
    if not v:
        return 0.0
    if v.isdigit():
        return float(int(v))
    try:
        when = parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return 0.0
    return max(when.timestamp() - time.time(), 0.0)


def _retryable(status: int) -> bool:
    return status in (408, 425, 429) or status >= 500


MODE_HTTP = "http"
MODE_SYNC = "sync"
MODE_EVENT = "event"


def _batch_response(results: Sequence[bytes]) -> Response:
    return _json_response(200, b'{"type":"batch","results":[' + b",".join(results) + b"]}")


class _Batch:
    """One batched delivery served over HTTP or a sync invoke (§16): at most
    batch_concurrency helper threads take the tasks in turn and run each new task's work
    themselves (no thread of its own); the request's thread collects the answers. Over
    HTTP, when the sync budget ends it stops the helpers taking tasks, answers each
    unfinished task accepted (its Result then goes to its callback) and serves the tasks
    not yet taken itself, as a single delivery past its budget is served. Under a sync
    invoke it waits for every task, until the invocation's deadline."""

    def __init__(self, ep: Endpoint, headers: Mapping[str, str], envs: list[Envelope], mode: str,
                 until: float, inv_deadline: float | None) -> None:
        self.ep, self.headers, self.envs, self.mode = ep, headers, envs, mode
        self.until, self.inv_deadline = until, inv_deadline
        self.results: list[bytes | None] = [None] * len(envs)
        self.runs: list[_Run | None] = [None] * len(envs)
        self.cond = threading.Condition()
        self.next = 0
        self.closed = False  # past the budget: helpers take no more tasks

    def serve(self) -> Response:
        n = len(self.envs)
        for _ in range(min(self.ep.options.batch_concurrency, n)):
            self.ep._workers.go(self._helper)
        with self.cond:
            if self.mode == MODE_HTTP:
                timeout: float | None = max(self.until - time.monotonic(), 0.0)
            else:
                timeout = None if self.inv_deadline is None else max(self.inv_deadline - time.time(), 0.0)
            self.cond.wait_for(lambda: all(r is not None for r in self.results), timeout)
            self.closed = True
            untaken = list(range(self.next, n))
            self.next = n
        for i in untaken:
            if self.mode == MODE_HTTP:
                r = self.ep._serve_task(self.headers, self.envs[i], self.mode, self.until, self.inv_deadline)
            else:
                r = Response(0)  # the invocation ended first: nothing started for it
            self._set(i, self.ep._batch_result(r, self.envs[i]))
        with self.cond:
            for i, rn in enumerate(self.runs):
                if self.results[i] is None and rn is not None and self.mode == MODE_HTTP and self.ep._go_async(rn):
                    self.results[i] = self.ep._batch_result(Response(202), self.envs[i])
            if self.mode == MODE_SYNC and self.inv_deadline is not None:
                for i, got in enumerate(self.results):
                    if got is None:
                        self.results[i] = self.ep._batch_result(Response(0), self.envs[i])
            # What is left finished, or is a helper's answer that needs no work of its
            # own (a duplicate, a refusal): it comes at once.
            self.cond.wait_for(lambda: all(r is not None for r in self.results))
            return _batch_response([r for r in self.results if r is not None])

    def _set(self, i: int, body: bytes) -> None:
        with self.cond:
            if self.results[i] is None:
                self.results[i] = body
                self.cond.notify_all()

    def _helper(self) -> None:
        while True:
            with self.cond:
                if self.closed or self.next >= len(self.envs):
                    return
                i = self.next
                self.next += 1
            r = self.ep._serve_task(self.headers, self.envs[i], self.mode, self.until, self.inv_deadline,
                                    functools.partial(self._started, i))
            self._set(i, self.ep._batch_result(r, self.envs[i]))

    def _started(self, i: int, rn: _Run) -> None:
        """A helper is about to run task i's work: a run the collector can promise to its
        callback, and one it promises at once if the budget already ended."""
        with self.cond:
            self.runs[i] = rn
            if self.closed and self.mode == MODE_HTTP and self.ep._go_async(rn):
                self.results[i] = self.ep._batch_result(Response(202), self.envs[i])
                self.cond.notify_all()


class Endpoint:
    """Endpoint serves task deliveries and health probes for a set of providers.

    It is transport-free: ``handle`` takes a request's method, headers and body and returns
    the answer, as the Go SDK's Endpoint.ServeHTTP answers. ``serve`` (HTTP) and
    ``LambdaHandler`` (AWS Lambda) are its hosts.
    """

    def __init__(self, providers: Sequence[Provider], *, secrets: Iterable[str | Secret],
                 options: Options | None = None) -> None:
        self._opts = options or Options()
        self._opts.check()
        self._secrets = parse_secrets(secrets)
        if not providers:
            raise ValueError("no providers")
        self._client: HTTPClient = self._opts.http_client or urllib_client
        self._now = self._opts.now or time.time
        self.log = self._opts.logger or logging.getLogger("converge_provider")
        self._slots: list[_Slot] = []
        self._by_kind: dict[KindVersion, _Slot] = {}
        for i, p in enumerate(providers):
            if p is None:
                raise ValueError(f"provider {i} is None")
            kv = KindVersion(p.kind, p.version)
            try:
                kv.validate()
            except ValueError as exc:
                raise ValueError(f"provider {i}: {exc}") from None
            if kv in self._by_kind:
                raise ValueError(f"two providers for {kv}")
            slot = _Slot(kv, p)
            self._slots.append(slot)
            self._by_kind[kv] = slot
        self._lock = threading.Lock()
        self._closing = False
        self._stopped = threading.Event()  # set once shutdown gave up waiting
        self._inflight: dict[str, _Run] = {}
        self._results = _ResultCache(self._opts.result_cache_entries, self._opts.result_cache_bytes,
                                     self._opts.result_cache_ttl)
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._workers = _Workers(self.log)
        self._batches: dict[str, _CallbackBatch] = {}
        self._batch_lock = threading.Lock()

    @property
    def options(self) -> Options:
        """The endpoint's options."""
        return self._opts

    # Serving

    def handle(self, method: str, headers: Mapping[str, str], body: bytes, mode: str = MODE_HTTP,
               invocation_deadline: float | None = None) -> Response:
        """Answer one delivery. headers are keyed by lower-case names.

        mode MODE_HTTP answers inline within the sync budget, else 202. MODE_SYNC (a
        Lambda RequestResponse invoke or Function URL request) waits for the work however
        long it takes, until invocation_deadline (time.time() seconds). MODE_EVENT (a
        Lambda Event invoke) delivers the Result to the callback before answering 202.
        """
        if method != "POST":
            return problem(405, "only POST is served", {"Allow": "POST"})
        ct = headers.get("content-type", "")
        if ct and ct.split(";", 1)[0].strip().lower() != "application/json":
            return problem(415, "content type must be application/json")
        if len(body) > self._opts.max_body:
            return problem(413, f"body exceeds {self._opts.max_body} bytes")
        try:
            verify(self._secrets, headers, body, self._now(), self._opts.tolerance)
        except SignatureError as exc:
            return problem(401, f"signature verification failed: {exc}")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return problem(400, f"malformed envelope: {exc}")
        if not isinstance(doc, dict):
            return problem(400, "malformed envelope: not a JSON object")
        typ = doc.get("type")
        until = time.monotonic() + self._opts.sync_budget
        try:
            if typ == "health":
                return self._health()
            if typ == "task":
                env = decode_envelope(doc)
                return self._serve_task(headers, env, mode, until, invocation_deadline)
            if typ == "batch":
                tasks = doc.get("tasks")
                if tasks is not None and not isinstance(tasks, list):
                    raise MalformedEnvelope("tasks: want an array")
                envs = [decode_envelope(t) for t in tasks or []]
                return self._serve_batch(headers, envs, mode, until, invocation_deadline)
        except MalformedEnvelope as exc:
            return problem(400, f"malformed envelope: {exc}")
        return problem(400, f"malformed envelope: unknown type {json.dumps(typ)}")

    def health(self) -> dict[str, Any]:
        """Return the health answer: every provider's readiness (none ready while closing)."""
        with self._lock:
            closing = self._closing
        return {"kinds": [{"kind": s.kv.kind, "kind_version": s.kv.version,
                           "ready": not closing and self._ready(s)} for s in self._slots]}

    def _health(self) -> Response:
        r = _json_response(200, dumps(self.health()))
        r.headers["Cache-Control"] = "no-store"
        return r

    def _ready(self, s: _Slot) -> bool:
        if s.ready is None:
            return True
        try:
            return bool(s.ready())
        except Exception:
            self.log.exception("provider ready() raised", extra={"kind": s.kv.kind})
            return False

    def _serve_batch(self, headers: Mapping[str, str], envs: list[Envelope], mode: str, until: float,
                     inv_deadline: float | None) -> Response:
        if not envs:
            return problem(400, "malformed batch: no tasks")
        self.log.debug("serving a batch of %d tasks", len(envs))
        if mode == MODE_EVENT:
            return self._serve_event_batch(headers, envs, inv_deadline)
        return _Batch(self, headers, envs, mode, until, inv_deadline).serve()

    def _serve_event_batch(self, headers: Mapping[str, str], envs: list[Envelope],
                           inv_deadline: float | None) -> Response:
        """An Event invoke's batch: every task to its callback before the answer (202 each)."""
        results: list[bytes] = [b""] * len(envs)
        nxt = iter(range(len(envs)))
        nxt_lock = threading.Lock()

        def worker() -> None:
            while True:
                with nxt_lock:
                    i = next(nxt, -1)
                if i < 0:
                    return
                r = self._serve_task(headers, envs[i], MODE_EVENT, 0.0, inv_deadline)
                results[i] = self._batch_result(r, envs[i])

        n = min(self._opts.batch_concurrency, len(envs))
        done = threading.Semaphore(0)

        def helper() -> None:
            try:
                worker()
            finally:
                done.release()

        for _ in range(n - 1):
            self._workers.go(helper)
        worker()
        for _ in range(n - 1):
            done.acquire()
        return _batch_response(results)

    @staticmethod
    def _batch_result(r: Response, env: Envelope) -> bytes:
        if r.status == 200:
            return r.body
        res: dict[str, Any] = {"task_id": env.task_id, "claim_epoch": env.claim_epoch}
        if r.status == 202:
            res["accepted"] = True
        elif r.status == 0:
            res["error"] = {"message": "no answer: the batch request ended before the task was answered",
                            "terminal": False}
        else:
            detail = ""
            try:
                detail = str(json.loads(r.body).get("detail", ""))
            except (ValueError, AttributeError):
                pass
            msg = f"{r.status} {_status_text(r.status)}"
            res["error"] = {"message": f"{msg}: {detail}" if detail else msg, "terminal": False}
        return dumps(res)

    def _serve_task(self, headers: Mapping[str, str], env: Envelope, mode: str, until: float,
                    inv_deadline: float | None, inline: Callable[[_Run], None] | None = None) -> Response:
        """Serve one task envelope; until is when its sync budget ends. With inline (a
        batch's helper thread), a new run's work runs in this thread, inline(run) called
        first: the batch answers it accepted if the budget ends before it finishes."""
        if not env.task_id:
            return problem(400, "malformed envelope: task_id is required")
        if not env.kind:
            return problem(400, "malformed envelope: kind is required")
        if not 1 <= env.kind_version <= MAX_KIND_VERSION:
            return problem(400, f"malformed envelope: kind_version {env.kind_version} outside 1..{MAX_KIND_VERSION}")
        if env.callback is not None and not env.callback.url:
            return problem(400, "malformed envelope: callback.url is empty")
        if env.callback is None and mode == MODE_EVENT:
            return problem(400, "malformed envelope: an event invocation needs a callback")
        if env.payload_url and env.callback is None:
            return problem(400, "malformed envelope: payload_url without a callback token to fetch it with")
        kv = KindVersion(env.kind, env.kind_version)
        slot = self._by_kind.get(kv)
        if slot is None:
            return problem(404, f"no provider for {kv} at this endpoint")
        webhook_id = headers.get("webhook-id", "")
        key = f"{webhook_id}\x00{env.task_id}\x00{env.claim_epoch}"
        ready = self._ready(slot)
        tp = traceparent_of(headers)

        fresh = promised = False
        with self._lock:
            cached = self._results.get(key, time.time())
            if cached is not None:
                if mode != MODE_EVENT:
                    return _json_response(200, cached)
                rn = _Run(key, webhook_id, tp, env, slot)
            elif key in self._inflight:
                rn = self._inflight[key]
                if rn.env.callback is not None and mode != MODE_SYNC:
                    # The promise of a callback is what a 202 means, even if the first
                    # request still waits inline: the run's Result also goes to it.
                    self._mark_async_locked(rn)
                    promised = True
            elif self._closing:
                return problem(503, "endpoint is shutting down", {"Retry-After": str(RETRY_AFTER_UNREADY)})
            elif not ready:
                return problem(503, f"provider {kv} is not ready", {"Retry-After": str(RETRY_AFTER_UNREADY)})
            else:
                rn = _Run(key, webhook_id, tp, env, slot)
                fresh = True
                self._inflight[key] = rn
                self._active += 1
                rn.live_add()
                if mode == MODE_EVENT:
                    self._mark_async_locked(rn)
                if inline is None:
                    self._workers.go(functools.partial(self._execute, rn))
        if cached is not None:
            # Nobody reads an event invocation's answer: the cached Result reaches the
            # dispatcher only through the callback (a duplicate is a no-op there).
            self._deliver(rn, cached)
            return Response(202)
        if not fresh:
            if promised:
                return Response(202) if mode == MODE_HTTP else self._settle(rn, inv_deadline)
            return self._await_inline(rn, inv_deadline)
        if inline is not None:
            inline(rn)
            self._execute(rn)
            with self._lock:
                promised = rn.async_
            return Response(202) if promised else _json_response(200, rn.body)
        if mode == MODE_SYNC:
            return self._await_inline(rn, inv_deadline)
        if mode == MODE_EVENT:
            return self._settle(rn, inv_deadline)
        return self._await(rn, until)

    def _await(self, rn: _Run, until: float) -> Response:
        if rn.env.callback is None:
            return self._await_inline(rn, None)
        if rn.done.wait(max(until - time.monotonic(), 0.0)):
            return _json_response(200, rn.body)
        if self._go_async(rn):
            return Response(202)
        return _json_response(200, rn.body)

    def _go_async(self, rn: _Run) -> bool:
        """Promise rn's Result to its callback, unless it has a callback no more to promise
        (none) or already finished; return whether it did."""
        with self._lock:
            if rn.finished or rn.env.callback is None:
                return False
            self._mark_async_locked(rn)
            return True

    def _await_inline(self, rn: _Run, inv_deadline: float | None) -> Response:
        timeout = None if inv_deadline is None else max(inv_deadline - time.time(), 0.0)
        if rn.done.wait(timeout):
            return _json_response(200, rn.body)
        return Response(0)  # the caller ran out of time; the Result stays cached for a retry

    def _settle(self, rn: _Run, inv_deadline: float | None) -> Response:
        timeout = None if inv_deadline is None else max(inv_deadline - time.time(), 0.0)
        if rn.wait_settled(timeout):
            return Response(202)
        return Response(0)

    def _mark_async_locked(self, rn: _Run) -> None:
        if not rn.async_:
            rn.async_ = True
            self._active += 1
            rn.live_add()
            self._workers.go(functools.partial(self._heartbeat, rn))

    def _release(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._idle.notify_all()

    # Work

    def _execute(self, rn: _Run) -> None:
        try:
            body = self._work(rn)
            superseded = isinstance(rn.ctx.cause(), Superseded)
            rn.ctx.cancel(Finished("work finished"))
            with self._lock:
                rn.body = body
                rn.finished = True
                self._inflight.pop(rn.key, None)
                self._results.put(rn.key, body, time.time())
                is_async = rn.async_
            rn.done.set()
            if is_async:
                if superseded:
                    self.log.info("task superseded; result dropped", extra=self._extra(rn))
                else:
                    self._deliver(rn, body)
        finally:
            rn.live_done()
            self._release()

    def _work(self, rn: _Run) -> bytes:
        env = rn.env
        if env.payload_url:
            try:
                env = self._fetch_payload(rn)
            except Exception as exc:  # any failure of the fetch is a transient error Result
                if isinstance(exc, Superseded):
                    rn.ctx.cancel(exc)
                self.log.warning("cannot fetch the task payload: %s", exc, extra=self._extra(rn))
                return result_body(env.task_id, env.claim_epoch, error=str(exc))
        try:
            req = new_request(env)
            rn.slot.configure(req)
            out = rn.slot.p.work(rn.ctx, req)
            if out is None:
                out = Outcome()
            if not isinstance(out, Outcome):
                raise TypeError(f"work returned {type(out).__name__}, want an Outcome or None")
        except TerminalError as exc:
            self.log.info("task failed terminally: %s", exc, extra=self._extra(rn))
            return result_body(env.task_id, env.claim_epoch, error=str(exc) or "unspecified error", terminal=True)
        except Exception as exc:
            self.log.info("task failed: %s", exc, extra=self._extra(rn), exc_info=not isinstance(exc, Cancelled))
            return result_body(env.task_id, env.claim_epoch, error=str(exc) or type(exc).__name__)
        try:
            out.validate()
            return result_body(env.task_id, env.claim_epoch, outcome=out)
        except (ValueError, TypeError) as exc:
            self.log.error("provider returned an invalid outcome: %s", exc, extra=self._extra(rn))
            return result_body(env.task_id, env.claim_epoch, error=str(exc))

    @staticmethod
    def _extra(rn: _Run) -> dict[str, Any]:
        return {"task_id": rn.env.task_id, "claim_epoch": rn.env.claim_epoch, "kind": rn.env.kind,
                "kind_version": rn.env.kind_version, "webhook_id": rn.webhook_id}

    def _fetch_payload(self, rn: _Run) -> Envelope:
        env = rn.env
        assert env.callback is not None
        headers = {"Authorization": "Bearer " + env.callback.token, "Accept": "application/json",
                   "User-Agent": USER_AGENT}
        if rn.traceparent:
            headers["traceparent"] = rn.traceparent
        try:
            resp = self._client(HTTPRequest("GET", env.payload_url, headers, None, self._opts.callback_timeout))
        except OSError as exc:
            raise OSError(f"fetch task payload: {exc}") from None
        if resp.status == 409:
            raise Superseded("fetch task payload: task superseded by a newer claim")
        if resp.status != 200:
            snippet = resp.body[:512].decode("utf-8", "replace")
            raise OSError(f"fetch task payload: {env.payload_url} answered {resp.status}: {snippet}")
        if len(resp.body) > self._opts.max_body:
            raise OSError(f"fetch task payload: over {self._opts.max_body} bytes (max_body)")
        try:
            full = decode_envelope(json.loads(resp.body))
        except (ValueError, UnicodeDecodeError) as exc:
            raise OSError(f"fetch task payload: malformed: {exc}") from None
        if full.task_id != env.task_id or full.claim_epoch != env.claim_epoch:
            raise OSError(f"fetch task payload: got task {full.task_id} claim_epoch {full.claim_epoch}, "
                          f"want {env.task_id} claim_epoch {env.claim_epoch}")
        raw = dict(env.raw)
        for k in ("resource", "status", "observed", "descendants", "operation", "config", "bundle"):
            raw.pop(k, None)
            if k in full.raw:
                raw[k] = full.raw[k]
        return decode_envelope(raw)

    # Callbacks and heartbeats

    def _post(self, url: str, token: str, traceparent: str, body: bytes,
              timeout: float) -> tuple[int, float]:
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = "Bearer " + token
        if traceparent:
            headers["traceparent"] = traceparent
        resp = self._client(HTTPRequest("POST", url, headers, body, timeout))
        return resp.status, _retry_after(resp.headers.get("retry-after", ""))

    def _deliver(self, rn: _Run, body: bytes) -> None:
        """POST body to rn's callback until accepted, refused for good, or the deadline plus grace."""
        cb = rn.env.callback
        assert cb is not None
        now = time.time()
        stop_at = rn.env.deadline.timestamp() if rn.env.deadline is not None else now
        stop_at = max(stop_at, now) + self._opts.callback_grace
        interval = self._opts.callback_retry_initial
        attempt = 0
        while True:
            attempt += 1
            status, retry_after, err = 0, 0.0, ""
            batched = False
            if attempt == 1 and cb.batch_url and self._opts.callback_batch_max > 1:
                status, batched = self._send_batched(cb.batch_url, cb.token, rn.traceparent, body, stop_at)
            if not batched:
                try:
                    timeout = max(min(self._opts.callback_timeout, stop_at - time.time()), 0.001)
                    status, retry_after = self._post(cb.url, cb.token, rn.traceparent, body, timeout)
                except OSError as exc:
                    err = str(exc)
            if err:
                self.log.warning("callback attempt %d failed: %s", attempt, err, extra=self._extra(rn))
            elif status in (200, 204):
                self.log.debug("callback delivered (attempt %d, %d)", attempt, status, extra=self._extra(rn))
                return
            elif status == 409:
                self.log.info("callback refused: task superseded by a newer claim; result dropped",
                              extra=self._extra(rn))
                return
            elif _retryable(status):
                self.log.warning("callback attempt %d failed: %d", attempt, status, extra=self._extra(rn))
            else:
                self.log.error("callback rejected (%d); result dropped", status, extra=self._extra(rn))
                return
            wait = max(interval * (1 + random.uniform(-0.5, 0.5)), retry_after)
            interval = min(interval * 1.5, self._opts.callback_retry_max)
            if stop_at - time.time() < wait:
                self.log.error("callback not delivered before the task deadline; result dropped",
                               extra=self._extra(rn))
                return
            if self._stopped.wait(wait):
                self.log.error("callback abandoned: endpoint shut down", extra=self._extra(rn))
                return

    def _send_batched(self, url: str, token: str, traceparent: str, result: bytes,
                      stop_at: float) -> tuple[int, bool]:
        """Send one Result in a batched callback (§8.1); (status, False) if the batch failed whole."""
        item = {"token": token, "result": json.loads(result)}
        with self._batch_lock:
            cb = self._batches.get(url)
            leader = cb is None
            if cb is None:
                cb = _CallbackBatch(traceparent)
                self._batches[url] = cb
            i = len(cb.items)
            cb.items.append(item)
            if len(cb.items) >= self._opts.callback_batch_max:
                del self._batches[url]
                cb.full.set()
        if leader:
            cb.full.wait(self._opts.callback_batch_window)
            with self._batch_lock:
                if self._batches.get(url) is cb:
                    del self._batches[url]
            try:
                status, _ = 0, 0.0
                resp = self._client(HTTPRequest(
                    "POST", url,
                    {"Content-Type": "application/json", "User-Agent": USER_AGENT,
                     **({"traceparent": cb.traceparent} if cb.traceparent else {})},
                    dumps({"outcomes": cb.items}), self._opts.callback_timeout))
                if resp.status != 200:
                    cb.err = f"batched callback answered {resp.status}"
                else:
                    answers = json.loads(resp.body).get("results")
                    if not isinstance(answers, list) or len(answers) != len(cb.items):
                        cb.err = "batched callback answered the wrong number of results"
                    else:
                        cb.answers = answers
            except (OSError, ValueError, AttributeError) as exc:
                cb.err = str(exc)
            cb.done.set()
        if not cb.done.wait(max(stop_at - time.time(), 0.0)):
            return 0, False
        if cb.err is not None:
            self.log.warning("batched callback failed; sending the result on its own: %s", cb.err)
            return 0, False
        st = cb.answers[i].get("status") if isinstance(cb.answers[i], dict) else None
        if not isinstance(st, int):
            return 0, False
        return st, True

    def _heartbeat(self, rn: _Run) -> None:
        try:
            interval = self._opts.heartbeat_every
            if interval is None:
                interval = HEARTBEAT_NO_DEADLINE
                if rn.env.deadline is not None:
                    interval = max((rn.env.deadline.timestamp() - time.time()) / 3, HEARTBEAT_MIN_DEFAULT)
            cb = rn.env.callback
            assert cb is not None
            url = heartbeat_url(cb.url)
            body = dumps({"task_id": rn.env.task_id, "claim_epoch": rn.env.claim_epoch})
            while not rn.ctx.wait(interval):
                try:
                    status, _ = self._post(url, cb.token, rn.traceparent, body, self._opts.callback_timeout)
                except OSError as exc:
                    if not rn.ctx.cancelled():
                        self.log.warning("heartbeat failed: %s", exc, extra=self._extra(rn))
                    continue
                if status == 409:
                    self.log.info("heartbeat refused: task superseded; cancelling work", extra=self._extra(rn))
                    rn.ctx.cancel(Superseded("task superseded by a newer claim"))
                    return
                if status >= 300:
                    self.log.warning("heartbeat refused: %d", status, extra=self._extra(rn))
        finally:
            rn.live_done()
            self._release()

    # Stopping

    def shutdown(self, timeout: float | None = None) -> bool:
        """Stop accepting tasks (503; health reports every kind unready) and wait up to timeout
        seconds (None: forever) for in-flight work, heartbeats and callbacks. Past it, every
        task's Context is cancelled (Shutdown) and pending callbacks are abandoned. Returns
        whether everything finished in time. Safe to call more than once."""
        with self._lock:
            self._closing = True
            drained = self._idle.wait_for(lambda: self._active == 0, timeout)
            runs = list(self._inflight.values())
        self._stopped.set()
        for rn in runs:
            rn.ctx.cancel(Shutdown("endpoint shut down"))
        return drained

