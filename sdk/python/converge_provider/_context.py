"""Cancellation a handler can observe: the task deadline, supersession and shutdown."""

from __future__ import annotations

import threading
import time


class TerminalError(Exception):
    """TerminalError fails a task for good: its Result carries ``"terminal": true``.

    Raise it for failures a retry cannot fix (a malformed spec, a permanent permission
    denial); the resource pins Failed until its spec changes. Any other exception is
    transient and retried with backoff.
    """


class Cancelled(Exception):
    """Cancelled is the base of the reasons a task's Context is cancelled."""


class Superseded(Cancelled):
    """Superseded: a heartbeat (or the payload fetch) was answered 409; a newer claim owns the task."""


class Shutdown(Cancelled):
    """Shutdown: the endpoint stopped before the work finished."""


class DeadlineExceeded(Cancelled):
    """DeadlineExceeded: the task's deadline passed."""


class Finished(Cancelled):
    """Finished: the work returned; its context ends with it."""


class Context:
    """Context is a task's cancellation, passed to ``work`` as its first argument.

    It is cancelled when the task's deadline passes, when a heartbeat learns that a newer
    claim superseded this one (``Superseded``), or when the endpoint shuts down past its
    drain timeout (``Shutdown``). Work checks ``cancelled()``, sleeps with ``wait(t)``
    (which returns early, True, on cancellation) or calls ``raise_if_cancelled()``.
    """

    def __init__(self, deadline: float | None = None) -> None:
        self._deadline = deadline  # time.time() seconds, or None
        self._event = threading.Event()
        self._cause: Cancelled | None = None
        self._lock = threading.Lock()

    @property
    def deadline(self) -> float | None:
        """The task deadline in Unix seconds, or None when the task has none."""
        return self._deadline

    def cancel(self, cause: Cancelled) -> None:
        """Cancel the context with cause; the first cause wins."""
        with self._lock:
            if self._cause is None:
                self._cause = cause
        self._event.set()

    def cause(self) -> Cancelled | None:
        """Return why the context is cancelled, or None while it is not."""
        if self._cause is None and self._deadline is not None and time.time() >= self._deadline:
            return DeadlineExceeded("task deadline exceeded")
        return self._cause

    def cancelled(self) -> bool:
        """Report whether the context is cancelled (the deadline passed included)."""
        return self.cause() is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to timeout seconds (None: forever) for cancellation; return whether it came."""
        if self._deadline is not None:
            left = max(self._deadline - time.time(), 0.0)
            timeout = left if timeout is None else min(timeout, left)
        self._event.wait(timeout)
        return self.cancelled()

    def raise_if_cancelled(self) -> None:
        """Raise the cancellation's cause if the context is cancelled."""
        cause = self.cause()
        if cause is not None:
            raise cause
