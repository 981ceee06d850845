"""The outgoing HTTP client (callbacks, heartbeats, payload fetches), injectable."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class HTTPRequest:
    """HTTPRequest is one outgoing request the SDK makes."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    timeout: float


@dataclass
class HTTPResponse:
    """HTTPResponse is its answer; headers are keyed by lower-case names."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


#: HTTPClient sends a request and returns the answer (any status), raising OSError for a
#: network failure. It must not follow redirects. Inject one (``Options.http_client``) to
#: script the control plane in tests.
HTTPClient = Callable[[HTTPRequest], HTTPResponse]

MAX_RESPONSE_READ = 16 << 20


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def urllib_client(req: HTTPRequest) -> HTTPResponse:
    """The default HTTPClient: urllib, never following redirects."""
    r = urllib.request.Request(req.url, data=req.body, headers=req.headers, method=req.method)
    try:
        with _opener.open(r, timeout=req.timeout) as resp:
            body = resp.read(MAX_RESPONSE_READ + 1)
            return HTTPResponse(resp.status, {k.lower(): v for k, v in resp.headers.items()}, body)
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_RESPONSE_READ + 1) if exc.fp is not None else b""
        return HTTPResponse(exc.code, {k.lower(): v for k, v in exc.headers.items()}, body)
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise OSError(f"{req.method} {req.url}: {reason}") from None
