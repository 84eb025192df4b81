"""Limits below HTTP for the page's server: uvicorn's h11 protocol with a read deadline per request,
a cap on the bytes one request may send, and a cap on open connections (in all and per client
address). Uvicorn alone has none of them: a connection that never finishes its headers, or that
promises a 1 GB body and trickles it, stays open for ever, and enough of them exhaust the file
limit, so `/healthz` and the E-STOP stop answering.

Each request (headers and body) must arrive within ``read_timeout_s`` of its first byte, or of the
connection's opening; then the connection is closed. An idle keep-alive connection is uvicorn's
own ``timeout_keep_alive``.

Over a cap, the connection shed is the one that has waited longest without a request in hand (an
idle keep-alive one, or one still sending its headers or body: a slow or silent client), not the
newcomer: an operator's E-STOP or /healthz arriving during a flood gets in, and one that is being
answered is never shed. Only when every other connection is answering a request is the newcomer
closed. Over the per-address cap the shed one is from that address, so a flood from one address
(the operator's own, or everyone's behind one NAT or reverse proxy) sheds its own oldest idle
connections and never locks the address out; ``max_connections_per_client`` 0 turns that cap off."""

from __future__ import annotations

import asyncio
import resource
import socket
from typing import Any

import h11
import uvicorn
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
            self._idle_since = 0.0  # loop time since it has had no request in hand

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._idle_since = self.loop.time()
            host = _host(self)
            over_all = len(self.connections) > max_connections
            over_host = max_connections_per_client > 0 and (
                sum(1 for c in self.connections if _host(c) == host) > max_connections_per_client
            )
            if (over_all and not self._shed_one(None)) or (over_host and not self._shed_one(host)):
                self._drop()  # every other one is answering a request: the newcomer waits its turn
                return
            self._arm()

        def _answering(self) -> bool:
            """Its whole request is in and its reply is not finished (an E-STOP being sent to the
            robot, a /healthz, a video download): never shed."""
            return (
                self.conn.their_state is h11.DONE
                and self.cycle is not None
                and not self.cycle.response_complete
            )

        def _shed_one(self, host: str | None) -> bool:
            """Close the connection (from ``host``, if given) that has waited longest without a
            request in hand; False when there is none."""
            idle = [
                c
                for c in self.connections
                if c is not self
                and isinstance(c, BoundedH11Protocol)
                and not c._answering()
                and (host is None or _host(c) == host)
            ]
            if not idle:
                return False
            min(idle, key=lambda c: c._idle_since)._drop()
            return True

        def _drop(self) -> None:
            # Out of the count now, not when asyncio reports the loss (a burst of accepts would
            # otherwise count the dropped ones too).
            self.connections.discard(self)
            self._disarm()
            self.transport.abort()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._idle_since = self.loop.time()  # waiting for its next request from now

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


def accept_burst(max_connections: int, max_connections_per_client: int) -> int:
    """uvicorn's ``backlog``: asyncio accepts up to this many connections per wake-up, so it bounds
    the files one burst opens before any is shed. A quarter of the smaller cap: a connection
    accepted in one burst has its request read within the next two or three wake-ups, before the
    bursts after it could make it the oldest idle one, so a flood cannot shed an operator's request
    before it is read. (With bursts of twice the cap, or of the whole per-address cap, 2-5 of ~40
    probes per attack were shed unread; bench/bench_http_flood.py.)"""
    caps = [c for c in (max_connections, max_connections_per_client) if c > 0]
    return max(4, min(caps) // 4)


LISTEN_QUEUE = 256
"""The kernel's queue of connections not yet accepted (capped by net.core.somaxconn). Deeper than
one accept burst: a full queue drops the SYN of the next client, an operator's E-STOP included,
which retries only after 1 s."""


class DeepQueueServer(uvicorn.Server):
    """uvicorn's server with its listening sockets' kernel queue at LISTEN_QUEUE after start-up
    (asyncio gives listen() the same number it accepts per wake-up: ``accept_burst``)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        for server in getattr(self, "servers", []):
            for ts in server.sockets:
                # A duplicate of the listening socket: listen() on it deepens the shared queue.
                with socket.socket(fileno=socket.dup(ts.fileno())) as listening:
                    listening.listen(LISTEN_QUEUE)
