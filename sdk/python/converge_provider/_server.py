"""One-call serving over HTTP(S) with a graceful drain."""

from __future__ import annotations

import http.server
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from types import FrameType

from ._endpoint import MODE_HTTP, Endpoint, Options, Provider, problem
from ._signature import Secret

DRAIN_TIMEOUT_DEFAULT = 30.0


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # The headers and the body are two writes: without this, Nagle's algorithm
        # holds the body until a keep-alive client's delayed ACK of the headers.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self) -> None:
        srv = self.server
        srv.request_started()
        try:
            headers = {k.lower(): v for k, v in self.headers.items()}
            ep = srv.endpoint
            if "chunked" in headers.get("transfer-encoding", "").lower():
                resp = problem(411, "a Content-Length is required")
                self.close_connection = True
            else:
                try:
                    length = int(headers.get("content-length", "0"))
                except ValueError:
                    length = -1
                if length < 0:
                    resp = problem(400, "bad Content-Length")
                    self.close_connection = True
                elif length > ep.options.max_body:
                    resp = problem(413, f"body exceeds {ep.options.max_body} bytes")
                    self.close_connection = True
                else:
                    body = self.rfile.read(length)
                    resp = ep.handle(self.command, headers, body, MODE_HTTP)
            self.send_response(resp.status)
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(resp.body)))
            self.end_headers()
            if resp.body and self.command != "HEAD":
                self.wfile.write(resp.body)
        finally:
            srv.request_finished()

    do_POST = _serve
    do_GET = _serve
    do_PUT = _serve
    do_DELETE = _serve
    do_PATCH = _serve
    do_HEAD = _serve
    do_OPTIONS = _serve

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        self.server.endpoint.log.debug("http: " + format, *args)


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._requests = 0
        self._cond = threading.Condition()
        super().__init__(addr, _Handler)

    def request_started(self) -> None:
        with self._cond:
            self._requests += 1

    def request_finished(self) -> None:
        with self._cond:
            self._requests -= 1
            self._cond.notify_all()

    def wait_requests(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._requests == 0, max(timeout, 0.0))


def _split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {addr!r}: want host:port")
    return host.strip("[]"), int(port)


class Server:
    """Server serves providers over HTTP (HTTPS with certfile and keyfile) on addr.

    ``Server(...)`` listens at once (port 0 picks a free one: read ``address``);
    ``serve_forever()`` serves until ``stop()``, which drains gracefully: the listener
    closes, requests in flight finish, then asynchronous work and its callbacks, all
    within drain_timeout seconds, past which every task's Context is cancelled (Shutdown).
    """

    def __init__(self, providers: Sequence[Provider], *, secrets: Iterable[str | Secret], addr: str,
                 options: Options | None = None, drain_timeout: float = DRAIN_TIMEOUT_DEFAULT,
                 certfile: str | None = None, keyfile: str | None = None) -> None:
        if drain_timeout < 0:
            raise ValueError("drain_timeout: negative")
        self.endpoint = Endpoint(providers, secrets=secrets, options=options)
        self._drain = drain_timeout
        host, port = _split_addr(addr)
        _HTTPServer.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._httpd = _HTTPServer((host, port), self.endpoint)
        if certfile is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(certfile, keyfile)
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._drained = False

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the server listens on."""
        a = self._httpd.server_address
        return str(a[0]), int(a[1])

    def serve_forever(self) -> bool:
        """Serve until stop() (from another thread or a signal handler), then drain.
        Returns whether the drain finished all work in time."""
        t = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        t.start()
        self._stop.wait()
        start = time.monotonic()
        self._httpd.shutdown()
        self._httpd.server_close()
        inline = self._httpd.wait_requests(self._drain)
        left = self._drain - (time.monotonic() - start)
        work = self.endpoint.shutdown(max(left, 0.0))
        self._drained = inline and work
        msg = "provider endpoint stopped" if self._drained else "provider endpoint stopped: drain timed out"
        self.endpoint.log.info(msg)
        self._stopped.set()
        return self._drained

    def stop(self) -> None:
        """Begin the graceful stop; serve_forever returns once it finishes."""
        self._stop.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Wait for serve_forever to finish its drain; return whether it did."""
        return self._stopped.wait(timeout)


def serve(providers: Sequence[Provider], *, secrets: Iterable[str | Secret], addr: str,
          options: Options | None = None, drain_timeout: float = DRAIN_TIMEOUT_DEFAULT,
          certfile: str | None = None, keyfile: str | None = None) -> None:
    """Serve providers on addr ("host:port") until SIGINT or SIGTERM, then stop gracefully.

    A provider process's whole server::

        serve([vpc], secrets=[os.environ["PROVIDER_SECRET"]], addr="0.0.0.0:8443")

    Raises ValueError for invalid providers or options (before listening), OSError if it
    cannot listen, and TimeoutError if the drain did not finish within drain_timeout.
    Call it from the main thread (signal handlers are installed there).
    """
    # The handlers go in before the socket listens: a signal sent as soon as the port
    # answers must drain, not kill, the process.
    signalled = threading.Event()
    servers: list[Server] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signalled.set()
        for srv in servers:
            srv.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        srv = Server(providers, secrets=secrets, addr=addr, options=options, drain_timeout=drain_timeout,
                     certfile=certfile, keyfile=keyfile)
        servers.append(srv)
        if signalled.is_set():
            srv.stop()
        srv.endpoint.log.info("provider endpoint listening on %s:%d", *srv.address)
        if not srv.serve_forever():
            raise TimeoutError(f"drain did not finish within {drain_timeout}s; unfinished tasks are retried")
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
