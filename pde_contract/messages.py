"""Typed messages between the robot server and its clients (learner actor, operator page, tests).

Conventions: SI units with the unit in the name (``_m``, ``_rad``, ``_s``, ``_hz``); poses are in the
robot base frame as position ``[x, y, z]`` metres + quaternion ``[x, y, z, w]``; times are host
wall-clock seconds (``time.time()``) unless the name says ``robot_time``.

Sockets (see ``robot_server``): observations on a PUB socket (latest-only for subscribers), commands
on a ROUTER socket where every ``Request`` gets exactly one ``Reply``. An observation travels as one
ZMQ frame, ``OBS_TOPIC`` followed by the msgpack ``Observation`` (single frames let subscribers
conflate to the newest message).
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal

import msgspec
import numpy as np

# 2: observations in one frame (topic prefix + msgpack), was two. 3: Reset carries a task's reset
# pose (a protocol 2 server would ignore it and move home instead). 4: the server counts control
# ticks (Observation.tick) and a chunk says the tick its row 0 was meant for
# (ActionChunk.first_row_tick): rows for ticks already run are skipped (a protocol 3 server would
# replay them as if no time had passed).
PROTOCOL_VERSION = 4
OBS_TOPIC = b"obs"
# Commands larger than this are refused before decoding with a TOO_LARGE reply (a 64x8 float64
# chunk is ~4 KiB). RobotClient refuses to send them at all.
MAX_COMMAND_BYTES = 1 << 20
# Largest message the server reads at all: up to here every message gets a reply (TOO_LARGE above
# MAX_COMMAND_BYTES); beyond it libzmq closes the sender's connection without reading the message,
# so no reply comes (the sender times out; the server and its other clients carry on).
MAX_FRAME_BYTES = 16 * MAX_COMMAND_BYTES


NonNegInt = Annotated[int, msgspec.Meta(ge=0)]


class ActionSpace(enum.StrEnum):
    """What the columns of an action chunk mean."""

    # [dx, dy, dz (m), drx, dry, drz (rotation vector, rad, base frame), gripper_width_m]:
    # each row is applied to the previous commanded target, not the measured pose.
    EE_DELTA = "ee_delta"
    # [q1..q7 (rad), gripper_width_m]: absolute joint targets.
    JOINT_ABS = "joint_abs"


ACTION_DIMS: dict[ActionSpace, int] = {ActionSpace.EE_DELTA: 7, ActionSpace.JOINT_ABS: 8}


class ErrorCode(enum.StrEnum):
    OK = "ok"
    MALFORMED = "malformed"  # could not decode, wrong field types
    TOO_LARGE = "too_large"
    UNKNOWN_COMMAND = "unknown_command"
    VERSION_MISMATCH = "version_mismatch"
    # A motion command (SubmitChunk, Reset, GripperCommand, ReleaseEStop) from a connection that has
    # not completed the Hello handshake (or was answered VERSION_MISMATCH). RobotClient sends Hello
    # and retries once by itself.
    HANDSHAKE_REQUIRED = "handshake_required"
    INVALID_ACTION = "invalid_action"  # NaN/inf, wrong shape, unknown action space
    UNSAFE = "unsafe"  # target outside the workspace or limits and clipping is not allowed
    STALE = "stale"  # chunk sequence number older than the executing one
    ESTOPPED = "estopped"  # motion refused while the e-stop is latched
    BUSY = "busy"
    BACKEND_ERROR = "backend_error"  # the robot or simulator failed; see message
    TIMEOUT = "timeout"  # client side: no reply in time
    # The request reached the command thread after its Envelope.expires_at_server_monotonic_s: the
    # client had already reported it failed, so the server did nothing.
    EXPIRED = "expired"
    INTERNAL = "internal"


class RobotFault(enum.StrEnum):
    """Why the arm is stopped or was interrupted, as ``Status.fault`` reports it (the fault table:
    docs/robot-safety.md)."""

    NONE = "none"
    # Latched until an operator acts (Status.fault_action says what) and then sends Reset:
    USER_STOP = "user_stop"  # the FR3's stop button: release it, then Reset
    REFLEX = "reflex"  # collision/limit reflex: arm stopped where it was; check the cell, then Reset
    RECOVERY_FAILED = "recovery_failed"  # automatic recovery refused or over its budget
    # Cleared by the server itself:
    COMMUNICATION = "communication"  # a communication_constraints_violation, recovered (counted)
    CONNECTION_LOST = "connection_lost"  # no FCI connection: reconnecting, arm stopped meanwhile
    COMMAND_REJECTED = "command_rejected"  # the controller refused a target: held, next chunk goes on


class Message(msgspec.Struct, kw_only=True, omit_defaults=False, tag_field="type", tag=True):
    """Base of every message: encoded as a msgpack map with a ``type`` tag."""


# --- observations -----------------------------------------------------------------------------


class CameraIntrinsics(Message):
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: list[float] = []  # Brown-Conrady k1 k2 p1 p2 k3 (empty: none)


class CameraFrame(Message):
    name: str  # "wrist" / "external"
    jpeg: bytes
    width: int
    height: int
    capture_time_s: float  # host clock at exposure (or render) time
    frame_index: int  # per-camera counter; gaps mean dropped frames
    intrinsics: CameraIntrinsics | None = None


class RobotState(Message):
    joint_positions_rad: np.ndarray  # float64[7]
    joint_velocities_rad_s: np.ndarray  # float64[7]
    ee_position_m: np.ndarray  # float64[3], TCP in base frame
    ee_quat_xyzw: np.ndarray  # float64[4]
    gripper_width_m: float
    robot_time_s: float  # the robot's (or simulator's) own clock
    # The last grasp closed on something (its width within the grasp tolerances, fingers not shut);
    # None where the backend cannot tell.
    object_held: bool | None = None


# The robot state as one flat float32 vector, in this order: what the policy reads and what the
# LeRobotDataset export writes as observation.state.
STATE_VECTOR_NAMES: tuple[str, ...] = (
    "ee_x_m",
    "ee_y_m",
    "ee_z_m",
    "ee_qx",
    "ee_qy",
    "ee_qz",
    "ee_qw",
    "gripper_width_m",
    *(f"joint_{i}_rad" for i in range(1, 8)),
)


def state_vector(state: RobotState) -> np.ndarray:
    """``state`` as float32[len(STATE_VECTOR_NAMES)]: ee position, ee quaternion xyzw, gripper
    width, joint positions."""
    return np.concatenate(
        [
            np.asarray(state.ee_position_m, dtype=np.float32).reshape(3),
            np.asarray(state.ee_quat_xyzw, dtype=np.float32).reshape(4),
            np.asarray([state.gripper_width_m], dtype=np.float32),
            np.asarray(state.joint_positions_rad, dtype=np.float32).reshape(7),
        ]
    )


class Observation(Message):
    seq: int  # publisher counter
    publish_time_s: float
    state: RobotState
    cameras: list[CameraFrame]
    episode_id: str = ""  # episode of the chunk executing now ("" when idle)
    executing_chunk_seq: int = -1
    estopped: bool = False
    # Seq of the most recently accepted chunk and rows of it still to run: a client knows its
    # chunk has finished when last_chunk_seq == its seq and steps_remaining == 0.
    last_chunk_seq: int = -1
    steps_remaining: int = 0
    # Simulator only: does the scene satisfy the current task's success check? None on hardware.
    task_success: bool | None = None
    # Control ticks the server had run when ``state`` was read: the index of the next tick, the one
    # a chunk computed from this observation would start at with no inference delay.
    tick: int = -1


# --- commands ---------------------------------------------------------------------------------


class ActionChunk(Message):
    seq: int  # strictly increasing per client; an older seq than the executing one is dropped
    episode_id: str
    action_space: ActionSpace
    actions: np.ndarray  # [T, D] float32/float64, D = ACTION_DIMS[action_space]
    control_rate_hz: float  # must match the server's rate
    sent_time_s: float = 0.0
    # The server tick row 0 is meant for (Observation.tick of the observation the chunk was computed
    # from). The chunk preempts at the next tick with the row meant for that tick: rows for ticks
    # already run are skipped (ChunkAccepted.rows_skipped), none is replayed late. -1: row 0 runs
    # at the next tick, whenever that is (a chunk computed while the arm held still).
    first_row_tick: int = -1


class Hello(Message):
    protocol_version: int
    client_name: str


class Heartbeat(Message):
    pass


class SubmitChunk(Message):
    chunk: ActionChunk


class Reset(Message):
    """Move to home, or to ``joint_positions_rad`` (a task's own reset pose from the tasks file,
    q1..q7 rad; the server refuses one outside its joint limits or workspace box with UNSAFE). In
    sim, also re-lay the scene for ``task`` from ``seed``; on hardware the operator resets the
    scene and ``task``/``seed`` are recorded only."""

    task: str = ""
    seed: NonNegInt | None = None
    joint_positions_rad: list[float] | None = None


class GripperCommand(Message):
    width_m: float
    speed_m_s: float = 0.1
    force_n: float = 20.0


class Stop(Message):
    """Drop any chunk and hold the current pose (not latched)."""


class EStop(Message):
    """Stop and latch: motion is refused until ``ReleaseEStop``."""

    reason: str = ""


class ReleaseEStop(Message):
    pass


class SetGuidingMode(Message):
    """``enabled``: drop any chunk and stop commanding the arm, so an operator can move it by hand
    (FR3: press the pilot's guiding button; sim: the arm goes compliant). Motion, gripper and reset
    commands are refused until ``enabled=False``; the arm then holds where it was left."""

    enabled: bool


class GetStatus(Message):
    pass


class Health(Message):
    pass


Request = (
    Hello
    | Heartbeat
    | SubmitChunk
    | Reset
    | GripperCommand
    | Stop
    | EStop
    | ReleaseEStop
    | SetGuidingMode
    | GetStatus
    | Health
)


# --- replies ----------------------------------------------------------------------------------


class ServerInfo(Message):
    protocol_version: int
    server_name: str
    backend: str  # "sim" / "franka"
    control_rate_hz: float
    action_spaces: list[ActionSpace]
    cameras: list[str]
    obs_endpoint: str
    heartbeat_timeout_s: float
    # "realtime": one tick per period. "fast" (sim): a chunk's rows run back to back, so its rows
    # outpace any inference and observations inside a chunk carry no camera frames.
    pacing: Literal["realtime", "fast"] = "realtime"


class Counters(Message):
    chunks_received: int = 0
    chunks_executed: int = 0  # ran to completion or were preempted after starting
    chunks_rejected: int = 0
    chunks_stale: int = 0
    chunks_preempted: int = 0
    steps_executed: int = 0
    steps_clipped: int = 0
    watchdog_trips: int = 0
    estops: int = 0
    backend_errors: int = 0
    backend_recoveries: int = 0
    commands_malformed: int = 0
    commands_too_large: int = 0
    commands_unknown: int = 0
    commands_total: int = 0
    commands_failed: int = 0  # requests whose handling raised an unexpected error (INTERNAL reply)
    command_loop_restarts: int = 0  # the command thread's loop died and was restarted
    command_loop_stalls: int = 0  # the command thread was stuck past command_stall_timeout_s
    commands_expired: int = 0  # arrived after their deadline (EXPIRED): not acted on
    tick_overruns: int = 0  # control ticks that started more than one period late


class Status(Message):
    backend: str
    connected: bool
    estopped: bool
    estop_reason: str
    executing_chunk_seq: int
    episode_id: str
    steps_remaining: int
    holding: bool
    counters: Counters
    state: RobotState | None = None
    uptime_s: float = 0.0
    last_error: str = ""
    task: str = ""
    fault: RobotFault = RobotFault.NONE
    fault_detail: str = ""  # what happened, in the backend's words
    # What an operator must do before motion resumes ("" when the server recovers by itself).
    fault_action: str = ""
    guiding: bool = False  # SetGuidingMode(enabled=True) is in force
    # The limits in force (the robot configuration file), for the operator to check against the
    # cell: the TCP's workspace box in the base frame, and the factor on the FR3's velocity,
    # acceleration and jerk limits (None: the backend has none, e.g. the sim).
    workspace_min_m: list[float] = []
    workspace_max_m: list[float] = []
    relative_dynamics_factor: float | None = None
    # Control ticks the server had run when ``state`` was read (as Observation.tick); -1 from a
    # server that does not say. A chunk's row k runs at tick start_tick + k (ChunkAccepted).
    tick: int = -1


class HealthInfo(Message):
    ok: bool
    backend_connected: bool
    cameras_ok: dict[str, bool]
    control_loop_hz: float
    detail: str = ""


class Ack(Message):
    # Reset: the control tick at which the reset took effect. Observations with a greater ``tick``
    # show the new scene; a subscriber may still hold one from before it. Stop: the tick at which the
    # chunk it dropped stopped (it ran its rows for the ticks before, as ChunkAccepted.start_tick says
    # of a preempted chunk). -1: another request, or a server that does not say.
    tick: int = -1


class ChunkAccepted(Message):
    seq: int
    steps: int  # rows that will run (the chunk's rows less rows_skipped)
    steps_clipped: int = 0  # rows that the safety layer clipped (see the server's clip policy)
    rows_skipped: int = 0  # leading rows meant for ticks already run (ActionChunk.first_row_tick)
    start_tick: int = -1  # the tick its first row runs at; the chunk it preempts ran until then
    # Rows the previous chunk of the same episode ran in all (it ended, this one preempted it, or
    # the watchdog or a stop dropped it); -1: none before this one (or a server that does not say).
    previous_rows_run: int = -1


ReplyPayload = ServerInfo | Status | HealthInfo | Ack | ChunkAccepted


class Reply(Message):
    ok: bool
    code: ErrorCode = ErrorCode.OK
    message: str = ""  # what was wrong and what to do, when not ok
    payload: ReplyPayload | None = None
    request_id: int = 0
    server_time_s: float = 0.0
    handle_time_s: float = 0.0  # how long the server spent on this request
    # The server's time.monotonic() when it sent the reply: clients estimate the offset between
    # their monotonic clock and the server's from it (immune to wall-clock steps), for deadlines.
    server_monotonic_s: float = 0.0


class Envelope(Message):
    """What actually travels on the command socket: a request id so replies can be matched and
    late replies of timed-out requests discarded."""

    request_id: int
    request: Request
    # 0: no deadline. Otherwise the server's time.monotonic() after which it must not act on the
    # request (it answers EXPIRED): set by clients that report a timed-out request as failed, so
    # that a request queued behind a stuck command thread can never run later.
    expires_at_server_monotonic_s: float = 0.0


Backend = Literal["sim", "franka"]
