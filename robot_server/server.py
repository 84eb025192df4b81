"""The robot server's sockets: observations on PUB, commands on ROUTER.

Threads:
- control loop (``ChunkExecutor``): the only thread that calls the Robot;
- one capture thread per camera (realtime pacing): reads at ``camera_fps``; the thread whose
  frame completes a set (every camera has a fresh frame) publishes the observation at once, so a
  frame waits for no timer. With fast pacing the control loop reads the cameras and publishes at
  the end of each chunk (and each idle tick) instead;
- the command thread: owns the ROUTER socket, answers every request with one ``Reply``; a Reset
  runs on a worker thread and its reply is sent when it finishes, so the socket keeps serving
  (e-stop during a reset works). No request can end it: an unexpected error while handling one
  becomes an ``INTERNAL`` reply (``commands_failed``), and should the loop itself ever fail, the
  arm is held, the loop restarts (``command_loop_restarts``) and ``Health`` reports it for
  ``_LOOP_FAILURE_REPORT_S``;
- the command watchdog: a *stuck* command thread (one request or loop turn taking longer than
  ``command_stall_timeout_s``) gets the chunk dropped and the arm held (``command_loop_stalls``),
  even with the heartbeat watchdog off; while it is stuck nobody answers (clients time out), and
  once it turns again ``Health`` reports the stall for ``_LOOP_FAILURE_REPORT_S``.

Motion commands (``SubmitChunk``, ``Reset``, ``GripperCommand``, ``ReleaseEStop``,
``SetGuidingMode``) are served only
on a connection that completed the ``Hello`` handshake; stopping (``Stop``, ``EStop``) and queries
work from anyone.

The PUB socket has a small send high-water mark: a slow subscriber loses old observations, it never
stalls the robot. Subscribers keep only the newest (``RobotClient.latest_observation``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zmq

from pde_contract.codec import CodecError, packb, packb_into, unpackb
from pde_contract.link import LinkAuthenticator
from pde_contract.messages import (
    MAX_COMMAND_BYTES,
    MAX_FRAME_BYTES,
    OBS_TOPIC,
    PROTOCOL_VERSION,
    Ack,
    ActionSpace,
    CameraFrame,
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
    ReplyPayload,
    Reset,
    RobotFault,
    ServerInfo,
    SetGuidingMode,
    Status,
    Stop,
    SubmitChunk,
)
from robot_server.cameras.base import Camera, CameraError
from robot_server.executor import ChunkExecutor, ExecutorConfig, ExecutorSnapshot
from robot_server.robots.base import Robot
from robot_server.safety import SafetyError, check_reset_pose
from robot_server.settings import RobotServerSettings

log = logging.getLogger(__name__)

_LOOP_FAILURE_REPORT_S = 10.0  # Health stays not ok this long after the command loop failed
_MAX_GREETED_CONNECTIONS = 4096  # handshakes remembered (oldest forgotten first)
# Motion commands: refused from a connection without a completed handshake.
_NEEDS_HELLO = (SubmitChunk, Reset, GripperCommand, ReleaseEStop, SetGuidingMode)
_GUIDING_TIMEOUT_S = 10.0  # a guiding change waits for the arm's motion to stop (FR3: <= 2 s)
# What to send, for the fields a hand-written client gets wrong most (named in MALFORMED replies).
_FIELD_HINTS = {
    "action_space": "a string, one of " + ", ".join(repr(s.value) for s in ActionSpace),
    "actions": "a float array [T, D] as pde_contract.codec.packb encodes numpy arrays (msgpack ext 1)",
    "seed": "an integer >= 0, or nil for a random layout",
    "request_id": "an integer",
    "type": "the message class name, e.g. 'SubmitChunk'",
}
_CAMERA_MAX_AGE_S = 1.0  # a camera whose newest frame is older than this is left out of observations
_REQUEST_TAGS: dict[str, type] = {
    str(cls.__struct_config__.tag): cls
    for cls in (
        Hello,
        Heartbeat,
        SubmitChunk,
        Reset,
        GripperCommand,
        Stop,
        EStop,
        ReleaseEStop,
        SetGuidingMode,
        GetStatus,
        Health,
    )
}


class BindError(RuntimeError):
    """A socket of the server could not be bound; the message names the address and the setting."""


def _bind(socket: zmq.Socket[bytes], host: str, port: int, setting: str) -> None:
    try:
        socket.bind(f"tcp://{host}:{port}")
    except zmq.ZMQError as e:
        hint = (
            f"is another robot server (or another program) using it? `ss -ltnp | grep :{port}` shows who"
            if e.errno == zmq.EADDRINUSE
            else "is the host an address of this machine?"
        )
        raise BindError(f"cannot bind tcp://{host}:{port} ({setting}): {e.strerror}; {hint}") from e


@dataclass
class _CameraSlot:
    camera: Camera
    latest: CameraFrame | None = None
    fresh: bool = False
    last_ok_s: float = 0.0
    errors: int = 0


class RobotServer:
    def __init__(
        self,
        robot: Robot,
        cameras: Sequence[Camera],
        settings: RobotServerSettings,
        context: zmq.Context | None = None,
    ) -> None:
        self.settings = settings
        self.robot = robot
        self._slots = [_CameraSlot(c) for c in cameras]
        # With CURVE keys the sockets get a context of their own: its ZAP handler (one per
        # context) then judges only this server's clients.
        self._curve = settings.link_curve()
        self._own_ctx = zmq.Context() if self._curve is not None else None
        self._ctx = self._own_ctx or context or zmq.Context.instance()
        self._authenticator: LinkAuthenticator | None = None
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pub_lock = threading.Lock()  # guards the PUB socket and the camera slots
        self._obs_seq = 0
        # topic prefix + the latest observation; reused: send() (copy=True) copies it before returning
        self._obs_buf = bytearray(OBS_TOPIC)
        self._deferred: queue.Queue[tuple[bytes, Reply]] = queue.Queue()
        self._started_s = time.monotonic()
        self._camera_epoch_s = self._started_s
        self._pub: zmq.Socket | None = None
        self._router: zmq.Socket | None = None
        self._greeted: dict[bytes, None] = {}  # command thread only: connections that sent Hello
        self._loop_failure = ""  # why the command loop last failed ("" never)
        self._loop_failed_s = -math.inf
        # The command loop's last turn (monotonic s) and the request it is handling ("" between
        # requests): read by the command watchdog thread.
        self._loop_turn_s = time.monotonic()
        self._handling = ""
        self.executor = ChunkExecutor(
            robot,
            ExecutorConfig(
                control_rate_hz=settings.control_rate_hz,
                realtime=settings.pacing == "realtime",
                heartbeat_timeout_s=settings.heartbeat_timeout_s,
                limits=settings.safety_limits(),
                rt_priority=settings.rt_priority or 0,
                estop_state_file=settings.estop_state_file,
            ),
            on_tick=self._publish_from_tick if settings.pacing == "fast" else None,
        )

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        s = self.settings
        if s.estop_state_file is None:
            log.warning(
                "no estop_state_file (nor PDE_DATA_DIR): a latched e-stop will not survive a restart of the "
                "robot server; set PDE_DATA_DIR (the compose stacks do) or [robot] estop_state_file"
            )
        if self._curve is not None:
            self._authenticator = LinkAuthenticator(self._ctx, self._curve.allowed_clients)
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, s.obs_sndhwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        if self._curve is not None:
            self._curve.apply(self._pub)
            self._curve.apply(self._router)
        _bind(self._pub, s.host, s.obs_port, "obs_port")
        # Larger messages make libzmq close the connection unread (no reply; MAX_FRAME_BYTES).
        self._router.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        _bind(self._router, s.host, s.cmd_port, "cmd_port")
        for slot in self._slots:
            slot.camera.connect()
        self.executor.start()
        self._loop_turn_s = time.monotonic()
        self._spawn(self._serve_commands, "commands")
        self._spawn(self._watch_command_thread, "command-watchdog")
        if s.pacing == "realtime":
            if self.settings.capture_threads == "shared" and self._slots:
                self._spawn(lambda: self._capture(self._slots), "cameras")
            else:
                for slot in self._slots:
                    self._spawn(lambda slot=slot: self._capture([slot]), f"camera-{slot.camera.name}")
            if not self._slots:
                self._spawn(self._publish_state_only, "publish-state")

    def close(self) -> None:
        self._closing.set()
        for t in self._threads:
            t.join(5.0)
        self._threads.clear()
        self.executor.close()
        for slot in self._slots:
            try:
                slot.camera.disconnect()
            except Exception as e:
                log.warning("camera %s disconnect failed: %s", slot.camera.name, e)
        for sock in (self._pub, self._router):
            if sock is not None:
                sock.close(linger=0)
        self._pub = self._router = None
        if self._authenticator is not None:
            self._authenticator.stop()
            self._authenticator = None
        if self._own_ctx is not None:
            self._own_ctx.term()
            self._own_ctx = None

    def __enter__(self) -> RobotServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, fn: object, name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads.append(t)

    # --- observations -----------------------------------------------------------------------------

    def _capture(self, slots: list[_CameraSlot]) -> None:
        # Every capture thread reads on the same time grid, so frames of one observation are
        # captured together and the first never waits a whole period for the others. A thread
        # serves one camera (blocking hardware reads) or all of them in turn (sim cameras, which
        # share one renderer anyway: one thread saves a wake-up per frame).
        period = 1.0 / self.settings.camera_fps
        while not self._closing.is_set():
            now = time.monotonic()
            k = math.floor((now - self._camera_epoch_s) / period) + 1
            if self._closing.wait(self._camera_epoch_s + k * period - now):
                break
            for slot in slots:
                try:
                    frame = slot.camera.read(timeout_s=0.5)
                except Exception as e:
                    slot.errors += 1
                    if isinstance(e, CameraError):
                        log.warning("camera %s: %s", slot.camera.name, e)
                    else:
                        log.exception("camera %s failed", slot.camera.name)
                    self._closing.wait(0.1)
                    continue
                with self._pub_lock:
                    lapped = slot.fresh  # its previous frame was never published: another camera lags
                    slot.latest, slot.fresh, slot.last_ok_s = frame, True, time.monotonic()
                    if lapped or all(s.fresh for s in self._slots):
                        self._publish_locked()

    def _publish_from_tick(self, _state: object) -> None:
        """Fast pacing: one observation per control tick. Camera frames are read right after the
        step only on ticks with no chunk executing (what the actor acts on: it waits for the first
        observation after its chunk); ticks inside a chunk publish the state alone, since rendering
        every tick was most of a fast episode's CPU."""
        snap = self.executor.snapshot()
        if snap.executing_chunk_seq != -1:
            with self._pub_lock:
                self._publish_locked(with_frames=False, snap=snap)
            return
        for slot in self._slots:
            try:
                frame = slot.camera.read(timeout_s=0.5)
            except Exception as e:
                slot.errors += 1
                log.warning("camera %s: %s", slot.camera.name, e)
                continue
            slot.latest, slot.fresh, slot.last_ok_s = frame, True, time.monotonic()
        with self._pub_lock:
            self._publish_locked()

    def _publish_state_only(self) -> None:
        period = 1.0 / self.settings.camera_fps
        while not self._closing.wait(period):
            with self._pub_lock:
                self._publish_locked()

    def _publish_locked(self, with_frames: bool = True, snap: ExecutorSnapshot | None = None) -> None:
        # caller holds _pub_lock; ``snap``: the executor's state when the caller already read it
        if self._pub is None:
            return
        snap = snap or self.executor.snapshot()
        if snap.state is None:
            return
        now_s = time.time()
        # A frame read for this set is always included, however long the other cameras took (the
        # first render of a sim camera can take over a second on a loaded machine); only a frame
        # left over from an earlier set, of a camera that has stopped delivering, ages out.
        frames = [
            s.latest
            for s in self._slots
            if with_frames
            and s.latest is not None
            and (s.fresh or now_s - s.latest.capture_time_s < _CAMERA_MAX_AGE_S)
        ]
        if with_frames:
            for s in self._slots:
                s.fresh = False
        obs = Observation(
            seq=self._obs_seq,
            publish_time_s=now_s,
            state=snap.state,
            cameras=frames,
            episode_id=snap.episode_id,
            executing_chunk_seq=snap.executing_chunk_seq,
            estopped=snap.estopped,
            task_success=snap.task_success,
            last_chunk_seq=snap.last_chunk_seq,
            steps_remaining=snap.steps_remaining,
            tick=snap.tick,
        )
        self._obs_seq += 1
        # One frame (topic prefix + msgpack): subscribers conflate to the newest message, which
        # libzmq does for single-frame messages only. PUB drops rather than blocks.
        with contextlib.suppress(zmq.Again):
            self._pub.send(packb_into(self._obs_buf, len(OBS_TOPIC), obs), flags=zmq.NOBLOCK)

    # --- commands ---------------------------------------------------------------------------------

    def _serve_commands(self) -> None:
        """The command thread: runs the loop, and restarts it should it ever fail."""
        while not self._closing.is_set():
            try:
                self._command_loop()
            except Exception as e:
                if self._closing.is_set():
                    break
                log.exception("command loop failed; holding the arm and restarting it")
                self._loop_failure = f"{type(e).__name__}: {e}"
                self._loop_failed_s = time.monotonic()
                self.executor.counters.command_loop_restarts += 1
                self.executor.stop()
                self._closing.wait(0.05)

    def _watch_command_thread(self) -> None:
        """Hold the arm once per stall of the command thread. Detection takes the timeout plus up
        to a quarter of it (the check period); the hold then takes effect at the control thread's
        next wake-up (it is woken at once)."""
        timeout_s = self.settings.command_stall_timeout_s
        stalled = False
        while not self._closing.wait(timeout_s / 4):
            stuck_s = time.monotonic() - self._loop_turn_s
            if stuck_s <= timeout_s:
                stalled = False
                continue
            if stalled:
                continue
            stalled = True
            what = f"handling {self._handling}" if self._handling else "between requests"
            self._loop_failure = (
                f"the command thread was stuck {what} for over {timeout_s:g} s "
                "(command_stall_timeout_s); the chunk was dropped and the arm held"
            )
            self._loop_failed_s = time.monotonic()
            log.error("%s", self._loop_failure)
            self.executor.counters.command_loop_stalls += 1
            self.executor.stop()

    def _command_loop(self) -> None:
        assert self._router is not None
        router = self._router
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        while not self._closing.is_set():
            self._loop_turn_s = time.monotonic()
            self._handling = ""
            while True:
                try:
                    ident, deferred = self._deferred.get_nowait()
                except queue.Empty:
                    break
                self._send(ident, deferred)
            if not poller.poll(10):
                continue
            frames = router.recv_multipart(copy=True)
            self._loop_turn_s = time.monotonic()
            self._handling = "a request"
            t0 = time.perf_counter()
            ident = frames[0]
            self.executor.counters.commands_total += 1
            try:
                reply = self._handle(ident, frames[1:])
            except Exception as e:  # a bug met by this request: answer it and keep serving
                log.exception("request from %r failed", ident)
                self.executor.counters.commands_failed += 1
                reply = self._error(
                    ErrorCode.INTERNAL,
                    f"the server failed on this request ({type(e).__name__}: {e}); it keeps serving. "
                    "Check the request against pde_contract.messages and report it",
                    _request_id_of(frames[-1]),
                )
            if reply is None:
                continue  # answered later (reset)
            reply.handle_time_s = time.perf_counter() - t0
            self._send(ident, reply)

    def _send(self, ident: bytes, reply: Reply) -> None:
        assert self._router is not None
        reply.server_time_s = time.time()
        reply.server_monotonic_s = time.monotonic()
        try:
            self._router.send_multipart([ident, packb(reply)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:  # client gone: nothing to deliver to
            log.debug("reply not delivered: %s", e)

    def _error(self, code: ErrorCode, message: str, request_id: int = 0) -> Reply:
        return Reply(ok=False, code=code, message=message, request_id=request_id)

    def _decode(self, body: bytes) -> Envelope | Reply:
        """The request, or the error reply explaining why it cannot be read."""
        counters = self.executor.counters
        if len(body) > MAX_COMMAND_BYTES:
            counters.commands_too_large += 1
            return self._error(
                ErrorCode.TOO_LARGE,
                f"command is {len(body)} bytes, the limit is {MAX_COMMAND_BYTES}: send shorter chunks",
            )
        try:
            return unpackb(body, Envelope)
        except CodecError as e:
            typed_error = str(e)
        # Diagnose with a loose decode so the reply names the actual problem.
        request_id = 0
        try:
            raw = unpackb(body)
        except CodecError:
            raw = None
        if isinstance(raw, dict):
            request_id = _int_request_id(raw)
            req = raw.get("request")
            tag = req.get("type") if isinstance(req, dict) else None
            if isinstance(tag, str) and tag not in _REQUEST_TAGS:
                counters.commands_unknown += 1
                return self._error(
                    ErrorCode.UNKNOWN_COMMAND,
                    f"unknown command {tag!r}: known commands are {', '.join(sorted(_REQUEST_TAGS))}",
                    request_id,
                )
            chunk = req.get("chunk") if isinstance(req, dict) and tag == "SubmitChunk" else None
            if isinstance(chunk, dict):
                space = chunk.get("action_space")
                # a wrongly typed action space (not a string) is a MALFORMED message, named below
                if isinstance(space, str) and space not in {s.value for s in ActionSpace}:
                    counters.chunks_received += 1
                    counters.chunks_rejected += 1
                    return self._error(
                        ErrorCode.INVALID_ACTION,
                        f"unknown action space {space!r}: use one of "
                        + ", ".join(s.value for s in ActionSpace),
                        request_id,
                    )
        counters.commands_malformed += 1
        return self._error(
            ErrorCode.MALFORMED,
            f"{typed_error}{_field_hint(typed_error)}. Send a msgpack Envelope(request_id, request) "
            "built from pde_contract.messages (RobotClient does this)",
            request_id,
        )

    def _handle(self, ident: bytes, body_frames: list[bytes]) -> Reply | None:
        if len(body_frames) != 1:
            self.executor.counters.commands_malformed += 1
            return self._error(
                ErrorCode.MALFORMED,
                f"expected one message frame after the identity, got {len(body_frames)}: use a DEALER "
                "socket and send one msgpack Envelope per message",
            )
        env = self._decode(body_frames[0])
        if isinstance(env, Reply):
            return env
        self.executor.note_activity(ident)
        req, rid = env.request, env.request_id
        self._handling = type(req).__name__
        expires_s = env.expires_at_server_monotonic_s
        if expires_s and time.monotonic() > expires_s:
            self.executor.counters.commands_expired += 1
            return self._error(
                ErrorCode.EXPIRED,
                f"{type(req).__name__} arrived {time.monotonic() - expires_s:.2f} s after its deadline (the "
                "client had given up on it and reported it failed), so nothing was done: send it again if "
                "it is still wanted",
                rid,
            )
        if isinstance(req, _NEEDS_HELLO) and ident not in self._greeted:
            return self._error(
                ErrorCode.HANDSHAKE_REQUIRED,
                f"{type(req).__name__} refused: this connection has not completed the handshake. Send "
                f"Hello(protocol_version={PROTOCOL_VERSION}, client_name=...) first (RobotClient.connect())",
                rid,
            )
        try:
            payload = self._dispatch(ident, req, rid)
        except SafetyError as e:
            return Reply(ok=False, code=e.code, message=e.message, request_id=rid)
        except Exception as e:
            log.exception("request %s failed", type(req).__name__)
            return Reply(
                ok=False, code=ErrorCode.INTERNAL, message=f"{type(e).__name__}: {e}", request_id=rid
            )
        if payload is _DEFERRED:
            return None
        if isinstance(payload, Reply):
            payload.request_id = rid
            return payload
        return Reply(ok=True, payload=payload, request_id=rid)  # type: ignore[arg-type]

    def _dispatch(self, ident: bytes, req: object, rid: int) -> ReplyPayload | Reply | object:
        ex = self.executor
        match req:
            case Hello(protocol_version=v, client_name=name):
                if v != PROTOCOL_VERSION:
                    self._greeted.pop(ident, None)
                    return self._error(
                        ErrorCode.VERSION_MISMATCH,
                        f"client {name!r} speaks protocol {v}, this server speaks {PROTOCOL_VERSION}: "
                        "install the same pde_contract version on both machines",
                    )
                self._greeted[ident] = None
                if len(self._greeted) > _MAX_GREETED_CONNECTIONS:
                    del self._greeted[next(iter(self._greeted))]
                return self.server_info()
            case Heartbeat():
                return Ack()
            case SubmitChunk(chunk=chunk):
                accepted, notes = ex.submit(chunk, ident)
                msg = ("clipped: " + "; ".join(notes)) if notes else ""
                return Reply(ok=True, payload=accepted, message=msg)
            case Reset(task=task, seed=seed, joint_positions_rad=pose):
                joints = None if pose is None else check_reset_pose(pose, ex.config.limits)
                snap = ex.snapshot()
                if snap.estopped:
                    raise SafetyError(
                        ErrorCode.ESTOPPED, "e-stop is latched: call release_estop() before reset"
                    )
                if snap.resetting:
                    raise SafetyError(ErrorCode.BUSY, "a reset is already in progress")
                timeout_s = self.settings.reset_timeout_s
                self._answer_later(ident, rid, "reset", lambda: ex.reset(task, seed, timeout_s, joints))
                return _DEFERRED
            case GripperCommand(width_m=w):
                ex.gripper(w)
                return Ack()
            case Stop():
                return Ack(tick=ex.stop())
            case EStop(reason=reason):
                # latched and on disk (fsynced) before this acknowledgement
                return Reply(ok=True, payload=Ack(), message=ex.estop(reason or "e-stop requested"))
            case ReleaseEStop():
                ex.release_estop()
                return Ack()
            case SetGuidingMode(enabled=enabled):
                self._answer_later(ident, rid, "guiding", lambda: ex.set_guiding(enabled, _GUIDING_TIMEOUT_S))
                return _DEFERRED
            case GetStatus():
                return self.status()
            case Health():
                return self.health()
        raise SafetyError(ErrorCode.UNKNOWN_COMMAND, f"unhandled command {type(req).__name__}")

    def _answer_later(self, ident: bytes, rid: int, what: str, call: Callable[[], int | None]) -> None:
        """Run a blocking executor call (reset, guiding change) on its own thread, so the socket
        keeps serving; its reply goes out from the command thread when it returns (with the tick
        a reset returns: Ack.tick)."""

        def run() -> None:
            try:
                tick = call()
                reply = Reply(ok=True, payload=Ack(tick=-1 if tick is None else tick), request_id=rid)
            except SafetyError as e:
                reply = Reply(ok=False, code=e.code, message=e.message, request_id=rid)
            except Exception as e:  # still one reply per request
                log.exception("%s failed", what)
                reply = Reply(
                    ok=False, code=ErrorCode.INTERNAL, message=f"{type(e).__name__}: {e}", request_id=rid
                )
            self._deferred.put((ident, reply))

        threading.Thread(target=run, name=what, daemon=True).start()

    # --- introspection ----------------------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        s = self.settings
        return ServerInfo(
            protocol_version=PROTOCOL_VERSION,
            server_name=s.server_name,
            backend=s.backend,
            control_rate_hz=s.control_rate_hz,
            pacing="realtime" if self.executor.config.realtime else "fast",
            action_spaces=list(self.executor.config.action_spaces),
            cameras=[slot.camera.name for slot in self._slots],
            obs_endpoint=s.obs_endpoint,
            heartbeat_timeout_s=s.heartbeat_timeout_s,
        )

    def status(self) -> Status:
        snap = self.executor.snapshot()
        return Status(
            backend=self.settings.backend,
            connected=snap.connected,
            estopped=snap.estopped,
            estop_reason=snap.estop_reason,
            executing_chunk_seq=snap.executing_chunk_seq,
            episode_id=snap.episode_id,
            steps_remaining=snap.steps_remaining,
            holding=snap.executing_chunk_seq < 0,
            counters=snap.counters,
            state=snap.state,
            uptime_s=time.monotonic() - self._started_s,
            last_error=snap.last_error,
            task=snap.task,
            fault=snap.fault.kind if snap.fault else RobotFault.NONE,
            fault_detail=snap.fault.detail if snap.fault else "",
            fault_action=snap.fault.action if snap.fault else "",
            guiding=snap.guiding,
            workspace_min_m=list(self.settings.workspace_min_m),
            workspace_max_m=list(self.settings.workspace_max_m),
            relative_dynamics_factor=self.executor.robot.relative_dynamics_factor,
            tick=snap.tick,
        )

    def health(self) -> HealthInfo:
        snap = self.executor.snapshot()
        now = time.monotonic()
        cams = {
            s.camera.name: s.latest is not None and now - s.last_ok_s < _CAMERA_MAX_AGE_S for s in self._slots
        }
        rate = self.executor.measured_rate_hz()
        problems = []
        if not snap.connected:
            problems.append(f"robot not connected ({snap.last_error})")
        problems += [
            f"camera {n} has no frame in the last {_CAMERA_MAX_AGE_S} s" for n, ok in cams.items() if not ok
        ]
        if now - self._loop_failed_s < _LOOP_FAILURE_REPORT_S:
            problems.append(
                f"the command loop failed {now - self._loop_failed_s:.1f} s ago ({self._loop_failure}); "
                "the arm was held and the loop goes on"
            )
        return HealthInfo(
            ok=not problems,
            backend_connected=snap.connected,
            cameras_ok=cams,
            control_loop_hz=rate,
            detail="; ".join(problems),
        )


def _request_id_of(body: bytes) -> int:
    """The request id of a message, if it can be read at all (0 otherwise)."""
    try:
        raw = unpackb(body)
    except Exception:
        return 0
    return _int_request_id(raw) if isinstance(raw, dict) else 0


def _int_request_id(raw: dict) -> int:
    """``raw["request_id"]`` if it is an int a ``Reply`` can carry (not a bool), else 0."""
    rid = raw.get("request_id")
    return rid if type(rid) is int and -(2**63) <= rid < 2**64 else 0


def _field_hint(error: str) -> str:
    """What to send for the field a msgspec validation error names (``... - at `$.a.b```)."""
    path = error.rpartition("at `")[2].rstrip("`")
    name = path.rpartition(".")[2] if path.startswith("$") else ""
    hint = _FIELD_HINTS.get(name)
    return f" ({name} must be {hint})" if hint else ""


_DEFERRED = object()
