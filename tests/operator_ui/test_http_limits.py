"""Below HTTP: `pde ui` (a real process on 127.0.0.1) drops clients that never finish their headers
or their body within PDE_UI_REQUEST_READ_TIMEOUT_S, closes a request larger than
PDE_UI_MAX_REQUEST_BYTES before reading it, refuses connections over PDE_UI_MAX_CONNECTIONS, and
answers /healthz meanwhile. Every wait is bounded; on uvicorn's defaults the slow clients stay open
and the first assertion fails."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from tests.helpers import free_port
from tests.operator_ui.browser import ui_server
from tests.operator_ui.conftest import TOKEN

READ_TIMEOUT_S = 1.0
BOUND_S = 10.0  # generous for a loaded machine: the server promises READ_TIMEOUT_S


def _open(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=BOUND_S)


def _closed_by_server(s: socket.socket) -> bool:
    """True when the server closed the connection (EOF or reset) within BOUND_S."""
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _trickle(s: socket.socket) -> None:
    """One more byte of a body: a trickle must not extend the deadline."""
    with suppress(OSError):  # already closed by the server
        s.sendall(b" ")


def _healthz_s(base: str) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(base + "/healthz", timeout=BOUND_S) as r:
        assert r.status == 200
    return time.monotonic() - t0


@contextmanager
def _limited_ui(tmp_path: Path, **settings: str) -> Iterator[str]:
    with ui_server(
        f"sqlite:///{tmp_path}/pde.db",
        tmp_path,
        TOKEN,
        f"tcp://127.0.0.1:{free_port()}",
        PDE_UI_REQUEST_READ_TIMEOUT_S=str(READ_TIMEOUT_S),
        **settings,
    ) as (base, _):
        yield base


def test_slow_clients_are_dropped_and_healthz_answers_meanwhile(tmp_path: Path) -> None:
    with _limited_ui(tmp_path) as base, ExitStack() as stack:
        silent = [stack.enter_context(_open(base)) for _ in range(3)]  # never send a byte
        slow_headers = [stack.enter_context(_open(base)) for _ in range(3)]
        for s in slow_headers:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # ... and never the end
        slow_body = stack.enter_context(_open(base))
        slow_body.sendall(
            b"POST /api/robot/estop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n{"
        )
        opened = time.monotonic()
        print(f"/healthz with 7 slow clients open: {_healthz_s(base) * 1000:.0f} ms")
        for s in [*silent, *slow_headers]:
            _trickle(slow_body)
            assert _closed_by_server(s)
        assert _closed_by_server(slow_body)
        print(f"all 7 slow clients dropped {time.monotonic() - opened:.2f} s after they opened")
        assert time.monotonic() - opened < BOUND_S


def test_oversized_request_is_closed_unread_and_the_connection_cap_holds(tmp_path: Path) -> None:
    with _limited_ui(tmp_path, PDE_UI_MAX_CONNECTIONS="4", PDE_UI_MAX_REQUEST_BYTES="4096") as base:
        with _open(base) as big:
            big.sendall(
                b"POST /api/robot/estop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 300000000\r\n\r\n"
                + b"x" * 8192
            )
            assert _closed_by_server(big)
        with ExitStack() as stack:
            held = [stack.enter_context(_open(base)) for _ in range(4)]
            over = stack.enter_context(_open(base))
            assert _closed_by_server(over)  # refused at once: the cap is full
            for s in held:
                assert _closed_by_server(s)  # then these time out ...
        assert _healthz_s(base) < BOUND_S  # ... and the page answers again
