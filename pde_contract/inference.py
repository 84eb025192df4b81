"""Policy serving over ZMQ: ``InferRequest(observation, prompt) -> InferReply(actions, extras)``.

For a policy that runs in another process or on another machine than its caller (the learner
normally runs its policy in-process). Same codec and conventions as the robot commands: one
msgpack message per request on a DEALER socket, a ``request_id`` to drop late replies, errors sent
back as text and raised on the client.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import numpy as np
import zmq

from pde_contract.codec import CodecError, packb, unpackb
from pde_contract.messages import MAX_COMMAND_BYTES, Message, Observation


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


class PolicyServer:
    """Serves ``policy`` on a ROUTER socket from one thread (requests are handled in order)."""

    def __init__(self, policy: PolicyFn, endpoint: str, context: zmq.Context | None = None) -> None:
        self.policy = policy
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        # observations carry camera frames: allow a few MB, refuse absurd sizes at the socket
        self._sock.setsockopt(zmq.MAXMSGSIZE, 64 * MAX_COMMAND_BYTES)
        self._sock.bind(endpoint)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def serve(self) -> None:
        # Blocking receive with a timeout (no separate poll call): fewer system calls per request.
        self._sock.setsockopt(zmq.RCVTIMEO, 50)
        while not self._stop.is_set():
            try:
                frames = self._sock.recv_multipart()
            except zmq.Again:
                continue
            if len(frames) != 2:
                continue  # not a DEALER peer: nothing sensible to answer
            self._sock.send_multipart([frames[0], packb(self._handle(frames[1]))])

    def _handle(self, body: bytes) -> InferReply:
        try:
            req = unpackb(body, InferRequest)
        except CodecError as e:
            return InferReply(ok=False, error=f"{e}: send an InferRequest(observation, prompt)")
        t0 = time.perf_counter()
        try:
            actions, extras = self.policy(req.observation, req.prompt)
        except Exception as e:
            error = f"policy failed: {type(e).__name__}: {e}"
            return InferReply(ok=False, error=error, request_id=req.request_id)
        return InferReply(
            ok=True,
            actions=actions,
            extras=extras,
            request_id=req.request_id,
            infer_time_s=time.perf_counter() - t0,
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve, name="policy-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._sock.close(linger=0)


class PolicyClient:
    def __init__(self, endpoint: str, timeout_s: float = 5.0, context: zmq.Context | None = None) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._rcvtimeo_ms = -2

    def infer(self, observation: Observation, prompt: str, timeout_s: float | None = None) -> InferReply:
        rid = next(self._ids)
        timeout_ms = int(1000 * (self.timeout_s if timeout_s is None else timeout_s))
        if timeout_ms != self._rcvtimeo_ms:
            self._sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
            self._rcvtimeo_ms = timeout_ms
        self._sock.send(packb(InferRequest(observation=observation, prompt=prompt, request_id=rid)))
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                data = self._sock.recv()
            except zmq.Again:
                raise PolicyServerError(
                    f"no reply from the policy server at {self.endpoint} within {timeout_ms} ms: "
                    "is it running?"
                ) from None
            reply: InferReply = unpackb(data, InferReply)
            if reply.request_id == rid or (not reply.ok and reply.request_id == 0):
                break
            if time.monotonic() > deadline:  # only late replies kept arriving
                raise PolicyServerError(f"no reply to request {rid} from {self.endpoint} in time")
        if not reply.ok:
            raise PolicyServerError(reply.error)
        return reply

    def close(self) -> None:
        self._sock.close(linger=0)

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
