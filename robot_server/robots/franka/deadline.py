"""Run a blocking call (libfranka's handshake) in a thread with a deadline.

A peer that accepts the TCP connection and never answers hangs libfranka's constructor forever,
and nothing can interrupt it. The call runs in a daemon thread (franky releases the GIL); past the
deadline the caller gets an error, and whatever the abandoned call returns later is dropped so
its connection closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    pass


class PendingCall(Generic[T]):
    """One call running in its own thread. ``wait`` may be called repeatedly."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._fn = fn
        self._done = threading.Event()
        self._abandoned = False
        self._lock = threading.Lock()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            value = self._fn()
        except BaseException as e:
            self._error = e
        else:
            with self._lock:
                if not self._abandoned:
                    self._value = value
            # An abandoned result goes out of scope here: a franky Robot closes its connection.
            del value
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float) -> T:
        """The call's result; raises its exception, or DeadlineExceeded if still running."""
        if not self._done.wait(timeout_s):
            raise DeadlineExceeded(f"no answer within {timeout_s:.1f} s")
        if self._error is not None:
            raise self._error
        value, self._value = self._value, None
        return value  # type: ignore[return-value]  # None only when T admits None

    def abandon(self) -> None:
        """Drop the result if it ever arrives."""
        with self._lock:
            self._abandoned = True
            self._value = None


def call_with_deadline(fn: Callable[[], T], timeout_s: float, name: str = "deadline-call") -> T:
    pending = PendingCall(fn, name)
    try:
        return pending.wait(timeout_s)
    except DeadlineExceeded:
        pending.abandon()
        raise
