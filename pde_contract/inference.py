"""Policy serving over TCP: ``InferRequest(observation, prompt) -> InferReply(actions, extras)``.

For a policy that runs in another process or on another machine than its caller (the learner
normally runs its policy in-process). Same codec as the robot commands (typed msgspec messages,
numpy over msgpack), a ``request_id`` to match replies, errors sent back as text and raised on the
client.

Why plain TCP and not ZMQ: a request/reply through libzmq passes its I/O thread on both ends, four
thread hand-offs per round trip, which on a loaded 2-core machine cost more than the whole round
trip of openpi's websocket transport. Here the caller's thread writes to and reads from the kernel
socket itself and the server answers from the thread that reads the connection.

Wire format, per message in either direction: an 8-byte header ``b"PDEI"`` + the body length
(uint32 little-endian), then the msgpack body (``InferRequest`` to the server, ``InferReply``
back). A header with another magic or an oversized length gets an error reply and the connection
is closed (the stream cannot be trusted after it); a body that does not decode gets an error reply
and the connection stays open.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import numpy as np

from pde_contract.codec import CodecError, packb_into, unpackb
from pde_contract.messages import MAX_COMMAND_BYTES, Message, Observation

FRAME_MAGIC = b"PDEI"
_HEADER = struct.Struct("<4sI")
# observations carry camera frames: allow a few MB, refuse absurd sizes before allocating
MAX_INFER_MESSAGE_BYTES = 64 * MAX_COMMAND_BYTES


class InferRequest(Message):
    observation: Observation
    prompt: str
    request_id: int = 0


class InferReply(Message):
    ok: bool
    actions: np.ndarray | None = None  # [T, D]
    extras: dict[str, np.ndarray] = {}  # noqa: RUF012 (msgspec copies defaults)  e.g. "log_prob"
    error: str = ""  # what went wrong, when not ok
    request_id: int = 0
    infer_time_s: float = 0.0  # time spent in the policy itself


# (observation, prompt) -> (actions [T, D], extras)
PolicyFn = Callable[[Observation, str], tuple[np.ndarray, dict[str, np.ndarray]]]


class PolicyServerError(RuntimeError):
    pass


class FrameError(ValueError):
    """The byte stream does not carry this protocol's frames; the text says what was received."""


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``tcp://host:port`` -> (host, port); ``tcp://*:port`` (bind on every interface) -> ("", port)."""
    parts = urlsplit(endpoint)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or not parts.hostname or port is None:
        raise ValueError(f"policy endpoint {endpoint!r} is not tcp://HOST:PORT (e.g. tcp://127.0.0.1:5570)")
    return ("" if parts.hostname == "*" else parts.hostname), port


class FrameWriter:
    """Encodes messages into one buffer reused across messages, header and body together, so a
    frame is one send call without per-message allocation or concatenation."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray(_HEADER.size)

    def write(self, msg: object) -> None:
        buf = packb_into(self._buf, _HEADER.size, msg)
        _HEADER.pack_into(buf, 0, FRAME_MAGIC, len(buf) - _HEADER.size)
        self._sock.sendall(buf)


class FrameReader:
    """Reads frames from one connection into a buffer reused across messages (no per-message
    allocation of camera-sized buffers)."""

    def __init__(self, sock: socket.socket, max_bytes: int = MAX_INFER_MESSAGE_BYTES) -> None:
        self._sock = sock
        self._max = max_bytes
        self._buf = bytearray(64 * 1024)
        self._header = bytearray(_HEADER.size)

    def _fill(self, view: memoryview) -> bool:
        """Fill ``view`` completely; False when the peer closed before the first byte."""
        got, n = 0, len(view)
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                if got == 0:
                    return False
                raise ConnectionError(f"connection closed in the middle of a frame ({got} of {n} bytes)")
            got += k
        return True

    def read(self) -> memoryview | None:
        """The next frame's body (valid until the next read), or None when the peer closed."""
        if not self._fill(memoryview(self._header)):
            return None
        magic, n = _HEADER.unpack(self._header)
        if magic != FRAME_MAGIC:
            raise FrameError(
                f"expected a frame starting with {FRAME_MAGIC!r}, got {bytes(self._header)!r}: "
                "this port speaks pde_contract.inference (use PolicyClient)"
            )
        if n > self._max:
            raise FrameError(f"frame of {n} bytes exceeds the limit of {self._max}: send smaller images")
        if n > len(self._buf):
            self._buf = bytearray(n)
        body = memoryview(self._buf)[:n]
        if n and not self._fill(body):
            raise ConnectionError("connection closed between a frame's header and its body")
        return body


class PolicyServer:
    """Serves ``policy`` on a TCP port. Each connection has a reader thread; policy calls are
    serialised by a lock, so requests are handled one at a time in arrival order."""

    def __init__(self, policy: PolicyFn, endpoint: str) -> None:
        self.policy = policy
        host, port = parse_endpoint(endpoint)
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.settimeout(0.05)  # accept() wakes to notice close()
        self._policy_lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def serve(self) -> None:
        """Accept connections until ``close()`` (blocks the calling thread)."""
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break  # listener closed
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._conns_lock:
                if self._stop.is_set():
                    conn.close()
                    break
                self._conns.add(conn)
            threading.Thread(
                target=self._serve_connection, args=(conn,), name="policy-conn", daemon=True
            ).start()

    def _serve_connection(self, conn: socket.socket) -> None:
        reader, writer = FrameReader(conn), FrameWriter(conn)
        try:
            while True:
                try:
                    body = reader.read()
                except FrameError as e:
                    writer.write(InferReply(ok=False, error=str(e)))
                    return  # the stream is out of step: drop the connection
                if body is None:
                    return
                reply = self._handle(body)
                try:
                    writer.write(reply)
                except CodecError as e:
                    error = f"the policy's reply cannot be sent: {e}"
                    writer.write(InferReply(ok=False, error=error, request_id=reply.request_id))
        except OSError:
            return  # peer gone or server closing
        finally:
            with self._conns_lock:
                self._conns.discard(conn)
            conn.close()

    def _handle(self, body: memoryview) -> InferReply:
        try:
            req = unpackb(body, InferRequest)
        except CodecError as e:
            return InferReply(ok=False, error=f"{e}: send an InferRequest(observation, prompt)")
        with self._policy_lock:
            t0 = time.perf_counter()
            try:
                actions, extras = self.policy(req.observation, req.prompt)
            except Exception as e:
                error = f"policy failed: {type(e).__name__}: {e}"
                return InferReply(ok=False, error=error, request_id=req.request_id)
            infer_time_s = time.perf_counter() - t0
        return InferReply(
            ok=True, actions=actions, extras=extras, request_id=req.request_id, infer_time_s=infer_time_s
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve, name="policy-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._listener.close()
        with self._conns_lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)  # wakes its reader thread


class PolicyClient:
    """Connects on the first ``infer``; after a timeout or a broken connection the next call
    reconnects (a late reply can never be mistaken for a newer one)."""

    def __init__(self, endpoint: str, timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._addr = parse_endpoint(endpoint)
        self._sock: socket.socket | None = None
        self._reader: FrameReader | None = None
        self._writer: FrameWriter | None = None
        self._sock_timeout_s: float | None = None
        self._ids = itertools.count(1)

    def _connect(self, timeout_s: float) -> socket.socket:
        try:
            sock = socket.create_connection(self._addr, timeout=timeout_s)
        except OSError as e:
            raise PolicyServerError(
                f"cannot connect to the policy server at {self.endpoint} ({e}): is it running?"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._sock_timeout_s = sock, timeout_s
        self._reader, self._writer = FrameReader(sock), FrameWriter(sock)
        return sock

    def infer(self, observation: Observation, prompt: str, timeout_s: float | None = None) -> InferReply:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        sock = self._sock or self._connect(timeout)
        if timeout != self._sock_timeout_s:
            sock.settimeout(timeout)
            self._sock_timeout_s = timeout
        rid = next(self._ids)
        assert self._reader is not None and self._writer is not None
        try:
            self._writer.write(InferRequest(observation=observation, prompt=prompt, request_id=rid))
            body = self._reader.read()
            if body is None:
                raise ConnectionError("the server closed the connection")
            reply: InferReply = unpackb(body, InferReply)
        except TimeoutError:
            self.close()
            raise PolicyServerError(
                f"no reply from the policy server at {self.endpoint} within {timeout} s: is it running?"
            ) from None
        except (OSError, FrameError, CodecError) as e:
            self.close()
            raise PolicyServerError(f"policy server at {self.endpoint}: {e}") from e
        if not reply.ok:
            raise PolicyServerError(reply.error)
        if reply.request_id != rid:
            self.close()
            raise PolicyServerError(f"reply to request {reply.request_id} received for request {rid}")
        return reply

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._reader = self._writer = None
        self._sock_timeout_s = None

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
