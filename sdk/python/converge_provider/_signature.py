"""Standard Webhooks signatures (docs/protocol.md §3), with hmac and hashlib only."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _secrets
from collections.abc import Iterable, Mapping

SECRET_PREFIX = "whsec_"
SECRET_MIN_BYTES = 24
SECRET_MAX_BYTES = 64
DEFAULT_TOLERANCE = 300.0
_TIMESTAMP = re.compile(r"0|[1-9][0-9]*", re.ASCII)


class SignatureError(Exception):
    """SignatureError is why a request's signature did not verify (answered 401)."""


class MissingHeaders(SignatureError):
    """MissingHeaders: webhook-id, webhook-timestamp or webhook-signature is absent or empty."""


class InvalidTimestamp(SignatureError):
    """InvalidTimestamp: webhook-timestamp is not decimal digits."""


class TimestampOutOfTolerance(SignatureError):
    """TimestampOutOfTolerance: webhook-timestamp is too far from the clock."""


class NoMatchingSignature(SignatureError):
    """NoMatchingSignature: no v1 signature matches any secret."""


class Secret:
    """Secret is a parsed signing secret: the key bytes of ``whsec_<base64>``.

    Its repr never shows the key.
    """

    __slots__ = ("_key",)

    def __init__(self, text: str) -> None:
        if not text.startswith(SECRET_PREFIX):
            raise ValueError(f"parse secret: missing {SECRET_PREFIX!r} prefix")
        try:
            key = base64.b64decode(text[len(SECRET_PREFIX):], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"parse secret: invalid base64: {exc}") from None
        if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
            raise ValueError(
                f"parse secret: key is {len(key)} bytes, want {SECRET_MIN_BYTES}..{SECRET_MAX_BYTES}"
            )
        self._key = key

    def __repr__(self) -> str:
        return "Secret(whsec_[redacted])"

    def signature(self, msg_id: str, timestamp: str, body: bytes) -> str:
        """Return the signature's base64 (without ``v1,``) of body under msg_id and timestamp."""
        mac = hmac.new(self._key, f"{msg_id}.{timestamp}.".encode(), hashlib.sha256)
        mac.update(body)
        return base64.b64encode(mac.digest()).decode("ascii")


def parse_secrets(secrets: Iterable[str | Secret]) -> list[Secret]:
    """Parse each secret (``whsec_<base64>`` of 24..64 bytes); ValueError names the bad one."""
    out: list[Secret] = []
    for i, s in enumerate(secrets):
        if isinstance(s, Secret):
            out.append(s)
            continue
        try:
            out.append(Secret(s))
        except ValueError as exc:
            raise ValueError(f"secret {i}: {exc}") from None
    if not out:
        raise ValueError("no signing secrets")
    return out


def generate_secret() -> str:
    """Return a fresh random secret, ``whsec_`` and the base64 of 32 bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(32)).decode("ascii")


def sign(secrets: Iterable[str | Secret], msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the webhook-signature header value: one ``v1,`` signature per secret."""
    ts = str(timestamp)
    return " ".join("v1," + s.signature(msg_id, ts, body) for s in parse_secrets(secrets))


def signed_headers(secrets: Iterable[str | Secret], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Return the three Standard Webhooks headers signing body (the dispatcher's side; for tests)."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secrets, msg_id, timestamp, body),
    }


def verify(
    secrets: Iterable[Secret],
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Verify a request as docs/protocol.md §3.3 says, raising a SignatureError if it fails.

    headers are keyed by lower-case names. now is the clock in Unix seconds.
    """
    msg_id = headers.get("webhook-id", "")
    ts_text = headers.get("webhook-timestamp", "")
    sig_header = headers.get("webhook-signature", "")
    if not msg_id or not ts_text or not sig_header:
        raise MissingHeaders("missing webhook signature headers")
    # The one form it is signed in (docs/protocol.md §3.2): decimal digits, no sign, no
    # leading zero. A lenient parse would check the signature over the number re-formatted
    # rather than the text received.
    if _TIMESTAMP.fullmatch(ts_text) is None:
        raise InvalidTimestamp("invalid webhook-timestamp")
    ts = int(ts_text)
    if ts >= 2**63:
        raise InvalidTimestamp("invalid webhook-timestamp")
    if tolerance <= 0:
        tolerance = DEFAULT_TOLERANCE
    n, tol = int(now), int(tolerance)
    if ts < n - tol or ts > n + tol:
        raise TimestampOutOfTolerance(
            f"webhook-timestamp outside tolerance: timestamp {ts}, now {n}, tolerance {tol}s"
        )
    entries = [e[3:].encode("ascii", "replace") for e in sig_header.split(" ") if e.startswith("v1,")]
    for secret in secrets:
        want = secret.signature(msg_id, ts_text, body).encode("ascii")
        found = False
        for entry in entries:
            found |= hmac.compare_digest(entry, want)
        if found:
            return
    raise NoMatchingSignature("no matching webhook signature")
