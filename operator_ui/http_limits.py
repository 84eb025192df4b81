"""Limits below HTTP for the page's server: uvicorn's h11 protocol with a read deadline per request,
a cap on the bytes one request may send, and a cap on open connections (in all and per client
address). Uvicorn alone has none of them: a connection that never finishes its headers, or that
promises a 1 GB body and trickles it, stays open for ever, and enough of them exhaust the file
limit, so `/healthz` and the E-STOP stop answering.

Each request (headers and body) must arrive within ``read_timeout_s`` of its first byte, or of the
connection's opening; then the connection is closed. An idle keep-alive connection is uvicorn's
own ``timeout_keep_alive``. A connection over a cap is closed as soon as it is accepted, before it
costs more than its socket."""

from __future__ import annotations

import asyncio
import resource
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def _host(protocol: object) -> str | None:
    client = getattr(protocol, "client", None)  # (host, port), or None for a unix socket
    return client[0] if client else None


def bounded_h11(
    read_timeout_s: float, max_request_bytes: int, max_connections: int, max_connections_per_client: int
) -> type[asyncio.Protocol]:
    """An H11Protocol class with these limits (uvicorn's ``http=`` takes a protocol class)."""

    class BoundedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._read_deadline: asyncio.TimerHandle | None = None
            self._request_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            host = self.client[0] if self.client else None
            from_host = sum(1 for c in self.connections if _host(c) == host)
            if len(self.connections) > max_connections or from_host > max_connections_per_client:
                # Closed at once, no request read; out of the count now, not when asyncio reports
                # the loss (a burst of accepts would otherwise count the refused ones too).
                self.connections.discard(self)
                transport.abort()
                return
            self._arm()

        def _arm(self) -> None:
            if self._read_deadline is None:
                self._read_deadline = self.loop.call_later(read_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._read_deadline is not None:
                self._read_deadline.cancel()
                self._read_deadline = None

        def _too_slow(self) -> None:
            self._read_deadline = None
            if not self.transport.is_closing():
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            self._request_bytes += len(data)
            if self._request_bytes > max_request_bytes:
                self._disarm()
                self.transport.abort()  # before the rest is read (the E-STOP's body is ~60 bytes)
                return
            self._arm()  # a request has begun (a keep-alive connection's next one, too)
            super().data_received(data)
            if self.conn.their_state is h11.DONE:  # the whole request is in: the reply may take long
                self._disarm()
                self._request_bytes = 0

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return BoundedH11Protocol


def raise_file_limit() -> int:
    """Lift this process's soft limit on open files to its hard limit; returns the new soft limit.
    asyncio accepts a whole burst of queued connections before any is closed again, and each
    holds a file meanwhile: at the common 1024 a burst of idle sockets makes accept() fail (and
    log a traceback per try) until the burst is gone, and the page answers nobody."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)


def accept_backlog(max_connections: int) -> int:
    """The listen backlog: also the most connections one accept burst opens at once, so the files
    a burst can hold stay near the connection cap (uvicorn's default is 2048)."""
    return 2 * max_connections
