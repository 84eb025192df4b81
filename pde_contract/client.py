"""``RobotClient``: what the learner, the operator page and the tests use to talk to the robot
server. Commands go over one DEALER socket (request id in every envelope, so a late reply to a
timed-out request is recognised and dropped); observations come from a conflating SUB socket read
in the caller's thread, so the caller always gets the newest one.

The client is thread-safe: requests are serialised by a lock, so the heartbeat thread and the
caller share one socket (and one identity: the server's watchdog sees them as one client).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from typing import TypeVar
from urllib.parse import urlsplit

import zmq

from pde_contract.codec import CodecError, packb, unpackb
from pde_contract.link import ClientCurve
from pde_contract.messages import (
    MAX_COMMAND_BYTES,
    OBS_TOPIC,
    PROTOCOL_VERSION,
    Ack,
    ActionChunk,
    ChunkAccepted,
    Envelope,
    ErrorCode,
    EStop,
    GetStatus,
    GripperCommand,
    Health,
    HealthInfo,
    Heartbeat,
    Hello,
    Observation,
    ReleaseEStop,
    Reply,
    Request,
    Reset,
    ServerInfo,
    SetGuidingMode,
    Status,
    Stop,
    SubmitChunk,
)

P = TypeVar("P")


class ServerClock:
    """The offset between this process's ``time.monotonic()`` and the server's, from replies that
    carry ``server_monotonic_s``: the sample with the shortest round trip wins (its error is at most
    half that round trip), and a newer one replaces it once it is ``max_age_s`` old, so drift and a
    rebooted server are followed. Monotonic clocks on both sides: wall-clock steps cannot move it."""

    def __init__(self, max_age_s: float = 30.0) -> None:
        self.max_age_s = max_age_s
        self.offset_s: float | None = None  # server monotonic - client monotonic
        self.rtt_s = float("inf")
        self._taken_at_s = 0.0

    def observe(self, sent_s: float, received_s: float, server_s: float) -> None:
        if server_s <= 0.0 or received_s < sent_s:
            return  # a server that does not report its clock
        rtt_s = received_s - sent_s
        if rtt_s <= self.rtt_s or received_s - self._taken_at_s > self.max_age_s:
            self.offset_s = server_s - (sent_s + received_s) / 2
            self.rtt_s = rtt_s
            self._taken_at_s = received_s

    def server_deadline_s(self, budget_s: float, now_s: float | None = None) -> float:
        """The server-clock time ``budget_s`` from now (within half the best round trip); 0 (no
        deadline) while no offset is known."""
        if self.offset_s is None:
            return 0.0
        now = time.monotonic() if now_s is None else now_s
        return now + self.offset_s + budget_s


class RobotServerError(RuntimeError):
    """The server refused a request, or did not answer. ``code`` says which (``TIMEOUT`` when no
    reply came), ``message`` what was wrong and what to do."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"[{code.value}] {message}")
        self.code = code
        self.message = message


class ProtocolVersionError(RobotServerError):
    """Client and server speak different protocol versions."""


class RobotClient:
    def __init__(
        self,
        cmd_endpoint: str = "tcp://127.0.0.1:5556",
        name: str = "client",
        timeout_s: float = 1.0,
        obs_endpoint: str | None = None,
        context: zmq.Context | None = None,
        curve: ClientCurve | None = None,
        expire_unanswered: bool = False,
    ) -> None:
        """``curve``: the robot link's keys (``pde_contract.link.client_curve_from_env()``); None
        for a plain link, which a server with keys never answers. ``expire_unanswered``: every
        request carries a deadline (half its reply timeout, on the server's clock, once a reply has
        shown the clock), so a request this client reports as timed out is never acted on later,
        even by a server whose command thread was stuck (for the operator page's buttons)."""
        self.cmd_endpoint = cmd_endpoint
        self.name = name
        self.timeout_s = timeout_s
        self.info: ServerInfo | None = None
        self.last_reply: Reply | None = None
        self._obs_endpoint = obs_endpoint
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self.expire_unanswered = expire_unanswered
        self.server_clock = ServerClock()
        self._lock = threading.Lock()
        self._dealer = self._ctx.socket(zmq.DEALER)
        self._dealer.setsockopt(zmq.LINGER, 0)
        self._curve = curve
        if curve is not None:
            curve.apply(self._dealer)
        self._dealer.connect(cmd_endpoint)
        self._sub: _LatestOnlySubscriber | None = None
        self._hb_thread: threading.Thread | None = None
        self._hb_stop = threading.Event()
        self.heartbeat_failures = 0
        self._closed = False
        # The server's tick at this client's last reset (Ack.tick): an observation of no later tick
        # shows the scene the reset replaced, and latest_observation() never hands one over.
        self._reset_tick = -1

    # --- requests ---------------------------------------------------------------------------------

    def request(self, request: Request, timeout_s: float | None = None) -> Reply:
        """Send one request and wait for its reply; raises RobotServerError when it is not ok.
        A motion command refused for want of a handshake (the server restarted, or ``connect()``
        was never called) is retried once after a ``Hello``."""
        reply = self._exchange(request, timeout_s)
        if reply.code is ErrorCode.HANDSHAKE_REQUIRED and not isinstance(request, Hello):
            self.connect()
            reply = self._exchange(request, timeout_s)
        self.last_reply = reply
        if not reply.ok:
            cls = ProtocolVersionError if reply.code is ErrorCode.VERSION_MISMATCH else RobotServerError
            raise cls(reply.code, reply.message)
        return reply

    def _exchange(self, request: Request, timeout_s: float | None) -> Reply:
        """Send one request and return its reply, ok or not."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        rid = next(self._ids)  # atomic: ids stay unique across threads without the lock
        data = packb(Envelope(request_id=rid, request=request))
        if len(data) > MAX_COMMAND_BYTES:
            raise RobotServerError(
                ErrorCode.TOO_LARGE,
                f"{type(request).__name__} is {len(data)} bytes, the server's limit is "
                f"{MAX_COMMAND_BYTES}: not sent; send shorter chunks",
            )
        with self._lock:
            if self._closed:
                raise RobotServerError(ErrorCode.INTERNAL, "client is closed: create a new RobotClient")
            deadline = time.monotonic() + timeout
            if self.expire_unanswered:
                # The server may act during the first half of our wait only, so that its reply has
                # the other half to reach us: what we report as failed it has not done.
                expires_s = self.server_clock.server_deadline_s(timeout / 2)
                data = packb(
                    Envelope(request_id=rid, request=request, expires_at_server_monotonic_s=expires_s)
                )
            no_reply = RobotServerError(
                ErrorCode.TIMEOUT,
                f"no reply to {type(request).__name__} from {self.cmd_endpoint} within {timeout} s: "
                f"is `pde robot-server` running and reachable{self._keys_hint()}?",
            )
            sent_s = time.monotonic()
            try:
                self._dealer.send(data, flags=zmq.NOBLOCK)
            except zmq.Again:
                # No pipe to send on: a server that refused our CURVE handshake drops it until the
                # next reconnect, and a blocking send would then wait for ever.
                if not self._dealer.poll(int(timeout * 1000), zmq.POLLOUT):
                    raise no_reply from None
                self._dealer.send(data, flags=zmq.NOBLOCK)
            while True:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0 or not self._dealer.poll(left_ms):
                    raise no_reply
                data = self._dealer.recv()
                try:
                    reply = unpackb(data, Reply)
                except CodecError as e:
                    raise ProtocolVersionError(
                        ErrorCode.MALFORMED, f"cannot read the server's reply ({e}): versions differ?"
                    ) from e
                if reply.request_id == rid:
                    self.server_clock.observe(sent_s, time.monotonic(), reply.server_monotonic_s)
                    return reply
                # a late reply to an earlier, timed-out request: drop it

    def _payload(self, request: Request, kind: type[P], timeout_s: float | None = None) -> P:
        reply = self.request(request, timeout_s)
        if not isinstance(reply.payload, kind):
            raise RobotServerError(
                ErrorCode.INTERNAL,
                f"expected a {kind.__name__} reply to {type(request).__name__}, "
                f"got {type(reply.payload).__name__}",
            )
        return reply.payload

    def connect(self) -> ServerInfo:
        """Protocol handshake. Raises ProtocolVersionError when the versions differ."""
        self.info = self._payload(Hello(protocol_version=PROTOCOL_VERSION, client_name=self.name), ServerInfo)
        self._reset_tick = -1  # a restarted server counts its ticks from 0 again
        return self.info

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted:
        return self._payload(SubmitChunk(chunk=chunk), ChunkAccepted)

    def reset(
        self,
        task: str = "",
        seed: int | None = None,
        timeout_s: float = 60.0,
        *,
        reset_joints_rad: Sequence[float] | None = None,
    ) -> int:
        """Home (or ``reset_joints_rad``, the task's own reset pose) and, in sim, lay out ``task``.
        Returns the server's tick at the reset (``Ack.tick``; -1 from a server that does not say):
        from now on ``latest_observation`` hands over observations of later ticks only."""
        joints = None if reset_joints_rad is None else [float(q) for q in reset_joints_rad]
        ack = self._payload(Reset(task=task, seed=seed, joint_positions_rad=joints), Ack, timeout_s)
        self._reset_tick = ack.tick
        return ack.tick

    def gripper(self, width_m: float) -> None:
        self._payload(GripperCommand(width_m=width_m), Ack)

    def stop(self) -> int:
        """Drop the running chunk and hold; the tick it stopped at (-1: a server that does not say)."""
        return self._payload(Stop(), Ack).tick

    def estop(self, reason: str = "") -> None:
        self._payload(EStop(reason=reason), Ack)

    def release_estop(self) -> None:
        self._payload(ReleaseEStop(), Ack)

    def set_guiding_mode(self, enabled: bool, timeout_s: float = 15.0) -> None:
        """Hand the arm to an operator (``enabled``) or take it back; waits for the motion to stop."""
        self._payload(SetGuidingMode(enabled=enabled), Ack, timeout_s)

    def status(self) -> Status:
        return self._payload(GetStatus(), Status)

    def health(self) -> HealthInfo:
        return self._payload(Health(), HealthInfo)

    def heartbeat(self) -> None:
        self._payload(Heartbeat(), Ack)

    # --- heartbeat --------------------------------------------------------------------------------

    def start_heartbeat(self, period_s: float = 0.05) -> None:
        """Keep the server's watchdog fed from a background thread while a chunk runs."""
        if self._hb_thread is not None:
            return
        self._hb_stop.clear()

        def beat() -> None:
            while not self._hb_stop.wait(period_s):
                try:
                    self.request(Heartbeat(), timeout_s=max(period_s * 4, 0.2))
                except RobotServerError:
                    self.heartbeat_failures += 1

        self._hb_thread = threading.Thread(target=beat, name=f"{self.name}-heartbeat", daemon=True)
        self._hb_thread.start()

    def stop_heartbeat(self) -> None:
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join(2.0)
            self._hb_thread = None

    # --- observations -----------------------------------------------------------------------------

    @property
    def obs_endpoint(self) -> str:
        if self._obs_endpoint is None:
            info = self.info or self.connect()
            # The server may advertise a wildcard bind address: reach it on the command host.
            obs = urlsplit(info.obs_endpoint)
            cmd = urlsplit(self.cmd_endpoint)
            host = cmd.hostname if obs.hostname in (None, "*", "0.0.0.0") else obs.hostname
            self._obs_endpoint = f"tcp://{host}:{obs.port}"
        return self._obs_endpoint

    def _ensure_subscriber(self) -> _LatestOnlySubscriber:
        if self._sub is None:
            self._sub = _LatestOnlySubscriber(self._ctx, self.obs_endpoint, self._curve)
        return self._sub

    def latest_observation(self, timeout_s: float = 1.0) -> Observation:
        """The newest observation that arrived since the previous call (waiting up to ``timeout_s``
        for one); older ones are discarded without decoding. After this client's ``reset()``, one
        from before the reset (its tick not past ``Ack.tick``: the subscriber may hold the last one
        published before it, e.g. the previous episode's end) is skipped, and the next awaited."""
        deadline = time.monotonic() + timeout_s
        while True:
            data = self.latest_observation_bytes(max(0.0, deadline - time.monotonic()))
            try:
                obs = unpackb(data, Observation)
            except CodecError as e:
                raise RobotServerError(ErrorCode.MALFORMED, f"unreadable observation: {e}") from e
            # -1: no reset yet, or a server that does not count ticks (nothing to skip by)
            if self._reset_tick < 0 or obs.tick > self._reset_tick:
                return obs

    def latest_observation_bytes(self, timeout_s: float = 1.0) -> memoryview:
        """The newest observation's msgpack bytes, undecoded (what ``latest_observation`` decodes)."""
        data = self._ensure_subscriber().newest(timeout_s)
        if data is None:
            raise RobotServerError(
                ErrorCode.TIMEOUT,
                f"no observation from {self.obs_endpoint} within {timeout_s} s: is the server "
                f"running{self._keys_hint()}, and does it speak protocol {PROTOCOL_VERSION} "
                "(one frame per observation)?",
            )
        if len(data) == len(OBS_TOPIC):
            # Protocol 1 sent the topic and the body as two frames; conflation may hand over the bare
            # topic frame (or nothing at all, which ends in the timeout above).
            raise RobotServerError(
                ErrorCode.VERSION_MISMATCH,
                f"observation from {self.obs_endpoint} holds only its topic: the server sends two "
                f"frames per observation (protocol 1), this client needs protocol {PROTOCOL_VERSION} "
                "(one frame per observation); update the robot server",
            )
        # the subscription matched the topic prefix; the msgpack body follows it in the same frame
        return memoryview(data)[len(OBS_TOPIC) :]

    def _keys_hint(self) -> str:
        # A refused CURVE handshake looks exactly like a server that is down: say both causes.
        if self._curve is None:
            return (
                " (a server with link keys never answers a client without: set "
                "PDE_ROBOT_LINK_SERVER_KEY and PDE_ROBOT_LINK_CLIENT_KEY)"
            )
        return (
            " (with link keys: does the robot server list this client's public key "
            f"{self._curve.keys.public.decode()}, and is PDE_ROBOT_LINK_SERVER_KEY its server.key?)"
        )

    # --- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        self.stop_heartbeat()
        with self._lock:
            self._closed = True
            self._dealer.close(linger=0)
            if self._sub is not None:
                self._sub.close()
                self._sub = None

    def __enter__(self) -> RobotClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LatestOnlySubscriber:
    """A SUB socket that always yields the newest observation, read in the caller's thread.

    ZMQ_CONFLATE makes libzmq keep one message per subscriber: its I/O thread keeps reading the
    stream and replaces the held message with each newer one, so a reader that was away gets the
    newest, never a queued stale one, and no drain thread or hand-off is needed. Conflation keeps
    single-frame messages only, hence the observation wire format (``OBS_TOPIC`` + msgpack in one
    frame, see ``pde_contract.messages``). A multi-frame message on a conflating socket can abort
    libzmq itself (seen: a protocol 1 server's two-frame observation killed the test process), so
    a server of another protocol must be refused at Hello, before this socket connects.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, curve: ClientCurve | None = None) -> None:
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(sock)
        sock.setsockopt(zmq.CONFLATE, 1)  # before connect: it configures the pipe
        sock.setsockopt(zmq.SUBSCRIBE, OBS_TOPIC)
        sock.connect(endpoint)
        self._sock = sock
        self._lock = threading.Lock()
        self._rcvtimeo_ms = -2  # RCVTIMEO currently set; changed only when the timeout changes

    def newest(self, timeout_s: float) -> bytes | None:
        """The newest message not returned before, waiting up to ``timeout_s`` for one."""
        timeout_ms = max(0, int(timeout_s * 1000))
        with self._lock:
            if timeout_ms != self._rcvtimeo_ms:
                self._sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
                self._rcvtimeo_ms = timeout_ms
            try:
                data: bytes = self._sock.recv()  # blocking with a timeout: one call, no poll
            except zmq.Again:
                return None
            while self._sock.getsockopt(zmq.RCVMORE):  # a multi-frame sender: drop the rest
                self._sock.recv()
            return data

    def close(self) -> None:
        with self._lock:
            self._sock.close(linger=0)
