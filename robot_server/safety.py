"""The safety layer in front of every backend. Pure functions, no I/O: the server checks a chunk
with ``check_chunk`` (reject: no motion at all) and turns it into per-tick absolute targets with
``plan_chunk`` (clip or reject each row against the limits).

Policy for targets outside the limits (``ClipPolicy``):

* ``clip`` (default): every row is clipped so that the step from the previous target stays within
  the per-step translation/rotation/joint limits, the target stays inside the workspace box and the
  joint-limit margins, and the gripper width inside [0, 0.08] m. Clipped rows are counted
  (``steps_clipped`` in the reply and in the server counters). The arm never leaves its limits and
  a policy that pushes against a wall keeps moving along it.
* ``reject``: a chunk with any row that would need clipping is refused with ``UNSAFE`` and nothing
  moves.

Malformed chunks (NaN/inf, wrong shape, unknown action space, wrong control rate, too many rows)
are always refused with ``INVALID_ACTION``, whatever the policy.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np

from pde_contract.messages import ACTION_DIMS, ActionChunk, ActionSpace, ErrorCode
from pde_contract.rotations import (
    Quat,
    quat_from_rotvec_floats,
    quat_multiply_floats,
    quat_normalize_floats,
    quat_z_axis,
    quat_z_axis_floats,
)
from robot_server.robots.base import RobotTarget

# FR3 safe joint limits and velocity limits (shared/FR3.md).
FR3_JOINT_LOWER_RAD = np.array([-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159])
FR3_JOINT_UPPER_RAD = np.array([2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159])
FR3_JOINT_VELOCITY_RAD_S = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])
GRIPPER_MIN_WIDTH_M = 0.0
GRIPPER_MAX_WIDTH_M = 0.08


# FR3 kinematic chain (shared/FR3.md): per joint the origin offset (m) and roll about x (rad)
# before the joint's rotation about its local z; then flange 0.107 m and TCP 0.1034 m along z.
_FR3_CHAIN: tuple[tuple[tuple[float, float, float], float], ...] = (
    ((0.0, 0.0, 0.333), 0.0),
    ((0.0, 0.0, 0.0), -math.pi / 2),
    ((0.0, -0.316, 0.0), math.pi / 2),
    ((0.0825, 0.0, 0.0), math.pi / 2),
    ((-0.0825, 0.384, 0.0), -math.pi / 2),
    ((0.0, 0.0, 0.0), math.pi / 2),
    ((0.088, 0.0, 0.0), math.pi / 2),
)
_FR3_FLANGE_TO_TCP_M = 0.107 + 0.1034


def fr3_tcp_frame(q: np.ndarray | list[float] | tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Forward kinematics of the FR3 + Franka Hand: the TCP position in the base frame and the
    flange's rotation (its z column is the tool axis)."""
    rot = np.eye(3)
    pos = np.zeros(3)
    for ((x, y, z), roll), qi in zip(_FR3_CHAIN, q, strict=True):
        pos = pos + rot @ np.array([x, y, z])
        cr, sr, cq, sq = math.cos(roll), math.sin(roll), math.cos(qi), math.sin(qi)
        # rot @ Rx(roll) @ Rz(qi)
        rot = rot @ np.array([[cq, -sq, 0.0], [cr * sq, cr * cq, -sr], [sr * sq, sr * cq, cr]])
    return pos + rot[:, 2] * _FR3_FLANGE_TO_TCP_M, rot


def fr3_tcp_position_m(q: np.ndarray | list[float] | tuple[float, ...]) -> np.ndarray:
    """Forward kinematics of the FR3 + Franka Hand: TCP position in the base frame."""
    return fr3_tcp_frame(q)[0]


def _box_distance_m(p: np.ndarray, lo: tuple[float, ...], hi: tuple[float, ...]) -> float:
    return float(np.linalg.norm(np.maximum(np.asarray(lo) - p, 0.0) + np.maximum(p - np.asarray(hi), 0.0)))


def _tool_tilt_rad(quat: Quat) -> float:
    """Angle between the tool axis and straight down."""
    return math.acos(min(1.0, max(-1.0, -quat_z_axis_floats(quat)[2])))


def _within_reach(tcp: list[float], quat: Quat, limits: SafetyLimits) -> tuple[list[float], bool]:
    """Move a TCP target toward the shoulder until its flange is within reach."""
    axis = quat_z_axis_floats(quat)
    offset = [a * _FR3_FLANGE_TO_TCP_M for a in axis]  # flange = tcp - offset
    rel = [t - o - c for t, o, c in zip(tcp, offset, limits.shoulder_m, strict=True)]
    dist = math.sqrt(sum(r * r for r in rel))
    if dist <= limits.max_flange_reach_m:
        return tcp, False
    k = limits.max_flange_reach_m / dist
    return [c + o + r * k for c, o, r in zip(limits.shoulder_m, offset, rel, strict=True)], True


class ClipPolicy(enum.StrEnum):
    CLIP = "clip"
    REJECT = "reject"


class SafetyError(Exception):
    """A chunk or command was refused. ``message`` says what was wrong and what to do."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SafetyLimits:
    # Box for the TCP in the robot base frame (table top at z = 0). The default holds the paper's
    # tabletop as simulated: the scripted expert's ten tasks span x 0.165-0.72, y -0.37-0.44,
    # z 0.019-0.50 m. A lab sets its own box for its own table (PDE_ROBOT_WORKSPACE_MIN_M/_MAX_M).
    workspace_min_m: tuple[float, float, float] = (0.15, -0.5, 0.015)
    workspace_max_m: tuple[float, float, float] = (0.75, 0.5, 0.55)
    # A box has corners the arm cannot reach with the tool pointing down: the flange (TCP minus
    # 0.2104 m along the tool axis) must also stay within this distance of the shoulder (joint 2).
    # FR3's maximum reach is 0.855 m; the margin keeps the IK away from the stretched-out singularity.
    max_flange_reach_m: float = 0.8
    shoulder_m: tuple[float, float, float] = (0.0, 0.0, 0.333)
    max_step_translation_m: float = 0.05  # per control tick: 0.5 m/s at 10 Hz
    max_step_rotation_rad: float = 0.3  # per control tick
    # Orientation envelope: the tool axis stays within this angle of pointing straight down (a
    # rotation that tilts it further is refused; one that tilts it back is always allowed).
    max_tool_tilt_rad: float = 1.0
    # ... and the wrist (joint 7, whose axis is the tool axis) stays this far inside its limits: a
    # rotation about the tool axis turns joint 7 by the same angle, so ee_delta rows are refused
    # the part of a rotation that would wind it further into its last wrist_margin_rad.
    wrist_margin_rad: float = 0.1
    joint_margin_rad: float = 0.05  # joint targets stay this far inside the FR3 safe limits
    # A joint target may move at most this fraction of the FR3 velocity limit per tick.
    joint_velocity_fraction: float = 0.5
    gripper_min_m: float = GRIPPER_MIN_WIDTH_M
    gripper_max_m: float = GRIPPER_MAX_WIDTH_M
    max_chunk_steps: int = 256
    clip_policy: ClipPolicy = ClipPolicy.CLIP
    joint_lower_rad: tuple[float, ...] = field(default=tuple(FR3_JOINT_LOWER_RAD.tolist()))
    joint_upper_rad: tuple[float, ...] = field(default=tuple(FR3_JOINT_UPPER_RAD.tolist()))

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.workspace_min_m), np.asarray(self.workspace_max_m)
        if lo.shape != (3,) or hi.shape != (3,) or np.any(lo >= hi):
            raise ValueError(
                f"workspace box min {self.workspace_min_m} must be below max {self.workspace_max_m}"
            )
        if not 0.0 <= self.gripper_min_m < self.gripper_max_m <= GRIPPER_MAX_WIDTH_M:
            raise ValueError(
                f"gripper range [{self.gripper_min_m}, {self.gripper_max_m}] m must lie within "
                f"[0, {GRIPPER_MAX_WIDTH_M}] m (the FR3 hand's stroke)"
            )
        if self.max_step_translation_m <= 0 or self.max_step_rotation_rad <= 0:
            raise ValueError("per-step translation and rotation limits must be positive")
        if not 0.0 < self.max_tool_tilt_rad <= math.pi:
            raise ValueError(f"max_tool_tilt_rad must be in (0, pi], got {self.max_tool_tilt_rad}")
        if self.joint_margin_rad < 0:
            raise ValueError(f"joint_margin_rad must be >= 0, got {self.joint_margin_rad}")
        if not 0.0 <= self.wrist_margin_rad < 1.0:
            raise ValueError(f"wrist_margin_rad must be in [0, 1) rad, got {self.wrist_margin_rad}")

    @property
    def wrist_min_rad(self) -> float:
        return self.joint_lower_rad[6] + self.wrist_margin_rad

    @property
    def wrist_max_rad(self) -> float:
        return self.joint_upper_rad[6] - self.wrist_margin_rad

    @property
    def joint_min_rad(self) -> np.ndarray:
        return np.asarray(self.joint_lower_rad) + self.joint_margin_rad

    @property
    def joint_max_rad(self) -> np.ndarray:
        return np.asarray(self.joint_upper_rad) - self.joint_margin_rad

    def max_joint_step_rad(self, period_s: float) -> np.ndarray:
        return FR3_JOINT_VELOCITY_RAD_S * self.joint_velocity_fraction * period_s


@dataclass(frozen=True)
class PlanStart:
    """Where a chunk starts from: the last commanded target (not the measured pose), so deltas
    accumulate without drifting with tracking error."""

    ee_position_m: np.ndarray
    ee_quat_xyzw: np.ndarray
    joint_positions_rad: np.ndarray
    gripper_width_m: float


@dataclass
class SafePlan:
    targets: list[RobotTarget]
    steps_clipped: int = 0
    notes: list[str] = field(default_factory=list)  # what was clipped, first rows only


# --- quaternions (x, y, z, w) -------------------------------------------------------------------


# A chunk is planned row by row on 3- and 4-vectors, where numpy's per-call overhead would dominate
# (10 rows: ~0.7 ms with numpy, ~0.1 ms with floats): the rotations are pde_contract.rotations'
# *_floats kernels. Quaternions are [x, y, z, w], as on the wire.
Vec = tuple[float, ...]


def _quat_floats(q: np.ndarray) -> Quat:
    x, y, z, w = (float(v) for v in q)
    return (x, y, z, w)


# --- checks -------------------------------------------------------------------------------------


def check_chunk(
    chunk: ActionChunk,
    control_rate_hz: float,
    action_spaces: list[ActionSpace],
    limits: SafetyLimits,
) -> np.ndarray:
    """Refuse what can never be executed; return the actions as float64[T, D]."""
    spaces = ", ".join(s.value for s in action_spaces)
    if chunk.action_space not in action_spaces:
        raise SafetyError(
            ErrorCode.INVALID_ACTION,
            f"action space {chunk.action_space!r} is not supported by this server: use one of {spaces}",
        )
    if not math.isfinite(chunk.control_rate_hz) or abs(chunk.control_rate_hz - control_rate_hz) > 1e-6:
        raise SafetyError(
            ErrorCode.INVALID_ACTION,
            f"chunk control_rate_hz={chunk.control_rate_hz} but the server runs at {control_rate_hz} Hz: "
            f"resample the chunk to {control_rate_hz} Hz (one row per control tick)",
        )
    actions = chunk.actions
    if not isinstance(actions, np.ndarray) or actions.dtype.kind not in "fiu":
        kind = getattr(actions, "dtype", type(actions).__name__)
        raise SafetyError(ErrorCode.INVALID_ACTION, f"actions must be a float array, got {kind}")
    dim = ACTION_DIMS[chunk.action_space]
    if actions.ndim != 2 or actions.shape[1] != dim or actions.shape[0] == 0:
        raise SafetyError(
            ErrorCode.INVALID_ACTION,
            f"actions have shape {actions.shape} but {chunk.action_space.value} needs [T, {dim}] "
            f"with 1 <= T <= {limits.max_chunk_steps}",
        )
    if actions.shape[0] > limits.max_chunk_steps:
        raise SafetyError(
            ErrorCode.INVALID_ACTION,
            f"chunk has {actions.shape[0]} rows, more than the {limits.max_chunk_steps} allowed: "
            "send shorter chunks (a newer chunk preempts the rest of the older one anyway)",
        )
    out = actions.astype(np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise SafetyError(
            ErrorCode.INVALID_ACTION,
            f"actions contain {int(bad.sum())} NaN/inf values (first at row {row}, column {col}): "
            "nothing was executed; check the policy output",
        )
    return out


def check_gripper_width(width_m: float, limits: SafetyLimits) -> float:
    if not math.isfinite(width_m) or not limits.gripper_min_m <= width_m <= limits.gripper_max_m:
        raise SafetyError(
            ErrorCode.INVALID_ACTION,
            f"gripper width {width_m} m is outside [{limits.gripper_min_m}, {limits.gripper_max_m}] m",
        )
    return float(width_m)


def check_reset_pose(joints_rad: list[float], limits: SafetyLimits) -> tuple[float, ...]:
    """A task's reset pose (q1..q7, rad) as the arm may move to it: inside the joint limits less
    their margin, the TCP inside the workspace box. Refused whole (UNSAFE), never clipped: a
    clipped reset pose would be another pose than the one the lab wrote down."""
    q = np.asarray(joints_rad, dtype=float)
    if q.shape != (7,) or not np.all(np.isfinite(q)):
        raise SafetyError(
            ErrorCode.INVALID_ACTION, f"reset pose must be 7 finite joint positions (rad), got {joints_rad}"
        )
    outside = np.flatnonzero((q < limits.joint_min_rad) | (q > limits.joint_max_rad))
    if outside.size:
        j = int(outside[0])
        raise SafetyError(
            ErrorCode.UNSAFE,
            f"reset pose joint {j + 1} = {q[j]:.4f} rad is outside [{limits.joint_min_rad[j]:.4f}, "
            f"{limits.joint_max_rad[j]:.4f}] rad (the FR3 limits less {limits.joint_margin_rad} rad): "
            "nothing moved; fix reset_joints_rad in the tasks file",
        )
    tcp = fr3_tcp_position_m(q)
    if _box_distance_m(tcp, limits.workspace_min_m, limits.workspace_max_m) > 0.0:
        raise SafetyError(
            ErrorCode.UNSAFE,
            f"reset pose puts the TCP at {np.round(tcp, 3).tolist()} m, outside the workspace box "
            f"{list(limits.workspace_min_m)}..{list(limits.workspace_max_m)} m: nothing moved; fix "
            "reset_joints_rad in the tasks file (or the box, PDE_ROBOT_WORKSPACE_MIN_M/_MAX_M)",
        )
    return tuple(float(v) for v in q)


def _plan_ee_unclipped(
    actions: np.ndarray, start: PlanStart, limits: SafetyLimits
) -> list[RobotTarget] | None:
    """The common case, vectorised: the targets when no row needs clipping, else None (then the
    row-by-row path below clips and explains)."""
    d, r, width = actions[:, :3], actions[:, 3:6], actions[:, 6]
    if (
        np.any(np.linalg.norm(d, axis=1) > limits.max_step_translation_m)
        or np.any(np.linalg.norm(r, axis=1) > limits.max_step_rotation_rad)
        or np.any(width < limits.gripper_min_m)
        or np.any(width > limits.gripper_max_m)
    ):
        return None
    pos = np.asarray(start.ee_position_m, dtype=np.float64) + np.cumsum(d, axis=0)
    if np.any(pos < np.asarray(limits.workspace_min_m)) or np.any(pos > np.asarray(limits.workspace_max_m)):
        return None
    quats = []
    quat = _quat_floats(start.ee_quat_xyzw)
    for rx, ry, rz in r.tolist():
        quat = quat_normalize_floats(quat_multiply_floats(quat_from_rotvec_floats(rx, ry, rz), quat))
        quats.append(quat)
    q = np.array(quats)
    axes = quat_z_axis(q)
    if np.any(-axes[:, 2] < math.cos(limits.max_tool_tilt_rad)):  # outside the orientation envelope
        return None
    # Joint 7 turns by each row's rotation about the tool axis (the axis before the row).
    prev_axes = np.vstack([np.array(quat_z_axis_floats(_quat_floats(start.ee_quat_xyzw)))[None], axes[:-1]])
    q7 = float(start.joint_positions_rad[6]) + np.cumsum(np.sum(prev_axes * r, axis=1))
    if np.any(q7 < limits.wrist_min_rad) or np.any(q7 > limits.wrist_max_rad):
        return None
    previous = np.vstack([np.asarray(start.ee_position_m, dtype=np.float64)[None], pos[:-1]])
    shoulder = np.asarray(limits.shoulder_m)
    for tcp in (pos, previous):  # the new pose, and the rotation applied at the previous position
        if np.any(
            np.linalg.norm(tcp - axes * _FR3_FLANGE_TO_TCP_M - shoulder, axis=1) > limits.max_flange_reach_m
        ):
            return None
    return [
        RobotTarget(gripper_width_m=float(width[i]), ee_position_m=pos[i], ee_quat_xyzw=q[i])
        for i in range(len(actions))
    ]


def plan_chunk(
    actions: np.ndarray,
    action_space: ActionSpace,
    start: PlanStart,
    limits: SafetyLimits,
    period_s: float,
) -> SafePlan:
    """Absolute per-tick targets for checked ``actions`` that respect every limit."""
    if action_space is ActionSpace.EE_DELTA:
        fast = _plan_ee_unclipped(actions, start, limits)
        if fast is not None:
            return SafePlan(targets=fast)
    return _plan_rows(actions, action_space, start, limits, period_s)


@dataclass
class _Pose:
    """Where the plan stands after the rows so far (the next row is a step from here)."""

    pos: Vec
    quat: Quat
    q: Vec
    q7: float  # ee_delta: joint 7 as the rows' rotations about the tool axis turn it


def _plan_rows(
    actions: np.ndarray,
    action_space: ActionSpace,
    start: PlanStart,
    limits: SafetyLimits,
    period_s: float,
) -> SafePlan:
    """Row by row: clip each row against the limits, in order, and say why."""
    plan = SafePlan(targets=[])
    q: Vec = tuple(float(x) for x in start.joint_positions_rad)
    pose = _Pose(tuple(float(x) for x in start.ee_position_m), _quat_floats(start.ee_quat_xyzw), q, q[6])
    q_step = limits.max_joint_step_rad(period_s).tolist()
    for i, row in enumerate(actions.tolist()):
        why: list[str] = []
        width = min(max(row[-1], limits.gripper_min_m), limits.gripper_max_m)
        if width != row[-1]:
            why.append(f"gripper {row[-1]:.4f} m")
        if action_space is ActionSpace.EE_DELTA:
            _ee_delta_row(row, pose, limits, why)
            target = RobotTarget(
                gripper_width_m=width, ee_position_m=np.array(pose.pos), ee_quat_xyzw=np.array(pose.quat)
            )
        elif action_space is ActionSpace.JOINT_ABS:
            _joint_abs_row(row, pose, limits, q_step, why)
            target = RobotTarget(gripper_width_m=width, joint_positions_rad=np.array(pose.q))
        else:  # pragma: no cover - check_chunk refuses unknown spaces
            raise SafetyError(ErrorCode.INVALID_ACTION, f"unknown action space {action_space!r}")
        plan.targets.append(target)
        if why:
            plan.steps_clipped += 1
            if len(plan.notes) < 3:
                plan.notes.append(f"row {i}: " + ", ".join(why))
    if plan.steps_clipped and limits.clip_policy is ClipPolicy.REJECT:
        raise SafetyError(
            ErrorCode.UNSAFE,
            f"{plan.steps_clipped} of {len(actions)} rows exceed the safety limits ("
            + "; ".join(plan.notes)
            + "): nothing was executed; keep targets inside the workspace and per-step limits",
        )
    return plan


def _ee_delta_row(row: list[float], pose: _Pose, limits: SafetyLimits, why: list[str]) -> None:
    """One ee_delta row from ``pose``: rotate (within the step, wrist, reach and tilt limits), then
    translate (into the box and the reach ball, within the step); ``pose`` moves to the target."""
    lo_ws, hi_ws = limits.workspace_min_m, limits.workspace_max_m
    max_tr, max_rot = limits.max_step_translation_m, limits.max_step_rotation_rad
    pos, quat = pose.pos, pose.quat
    raw = [p + d for p, d in zip(pos, row[:3], strict=True)]
    want = [min(max(x, lo), hi) for x, lo, hi in zip(raw, lo_ws, hi_ws, strict=True)]
    if want != raw:
        why.append(f"position {[round(x, 4) for x in raw]} outside the workspace box")
    rx, ry, rz = row[3:6]
    angle = math.sqrt(rx * rx + ry * ry + rz * rz)
    if angle > max_rot:
        why.append(f"rotation step {angle:.3f} rad")
        rx, ry, rz = (r * max_rot / angle for r in (rx, ry, rz))
    ax, ay, az = quat_z_axis_floats(quat)
    twist = rx * ax + ry * ay + rz * az
    q7_new = pose.q7 + twist
    if (q7_new < limits.wrist_min_rad and twist < 0) or (q7_new > limits.wrist_max_rad and twist > 0):
        # keep the rest of the rotation, drop the part about the tool axis
        why.append(
            f"rotation would turn joint 7 to {q7_new:.2f} rad, within {limits.wrist_margin_rad} rad "
            "of its limit"
        )
        rx, ry, rz = rx - twist * ax, ry - twist * ay, rz - twist * az
        twist = 0.0
    new_quat = quat_normalize_floats(quat_multiply_floats(quat_from_rotvec_floats(rx, ry, rz), quat))
    # A rotation swings the flange about the TCP: refuse one that takes it out of reach, so
    # the current position stays valid and (by convexity) so does every step toward want.
    swings_out = _within_reach(list(pos), new_quat, limits)[1]
    tilt = _tool_tilt_rad(new_quat)
    if swings_out and not _within_reach(list(pos), quat, limits)[1]:
        why.append("rotation would put the wrist beyond reach")
    elif tilt > limits.max_tool_tilt_rad and tilt > _tool_tilt_rad(quat):
        why.append(
            f"rotation would tilt the tool {tilt:.2f} rad from pointing down "
            f"(limit {limits.max_tool_tilt_rad} rad)"
        )
    else:
        quat = new_quat
        pose.q7 += twist
    # Alternate projections onto the reach ball and the box (both convex) until a target
    # satisfies both; if none is found, stay where we are.
    projected = False
    for _ in range(10):
        want, beyond = _within_reach(want, quat, limits)
        if not beyond:
            break
        projected = True
        want = [min(max(x, lo), hi) for x, lo, hi in zip(want, lo_ws, hi_ws, strict=True)]
    else:
        want = list(pos)
    if projected:
        why.append("beyond the arm's reach")
    step = [w - p for w, p in zip(want, pos, strict=True)]
    n = math.sqrt(sum(x * x for x in step))
    if n > max_tr:
        why.append(f"translation step {n:.4f} m")
        step = [x * max_tr / n for x in step]
    pose.pos = tuple(p + s for p, s in zip(pos, step, strict=True))
    pose.quat = quat


def _joint_abs_row(
    row: list[float], pose: _Pose, limits: SafetyLimits, q_step: list[float], why: list[str]
) -> None:
    """One joint_abs row from ``pose.q``: within the joint limits and speeds, the TCP within the
    per-tick translation and the box; ``pose.q`` moves to the target (or holds)."""
    lo_ws, hi_ws = limits.workspace_min_m, limits.workspace_max_m
    max_tr = limits.max_step_translation_m
    q = pose.q
    q_lo, q_hi = limits.joint_min_rad.tolist(), limits.joint_max_rad.tolist()
    want = [min(max(x, lo), hi) for x, lo, hi in zip(row[:7], q_lo, q_hi, strict=True)]
    if want != row[:7]:
        j = next(k for k in range(7) if want[k] != row[k])
        why.append(f"joint {j + 1} target {row[j]:.4f} rad beyond its limit minus margin")
    step = [min(max(w - p, -m), m) for w, p, m in zip(want, q, q_step, strict=True)]
    if any(s != w - p for s, w, p in zip(step, want, q, strict=True)):
        why.append("joint step faster than the velocity limit")
    # The TCP moves at most the per-tick translation limit, as for ee_delta: shorten the
    # joint step (the TCP moves about linearly with it over one tick) until it does.
    p_old = fr3_tcp_position_m(q)
    q_new = tuple(p + s for p, s in zip(q, step, strict=True))
    p_new = fr3_tcp_position_m(q_new)
    moved = float(np.linalg.norm(p_new - p_old))
    if moved > max_tr:
        why.append(f"TCP step {moved:.4f} m")
        for _ in range(20):
            step = [x * 0.95 * max_tr / moved for x in step]
            q_new = tuple(p + s for p, s in zip(q, step, strict=True))
            p_new = fr3_tcp_position_m(q_new)
            moved = float(np.linalg.norm(p_new - p_old))
            if moved <= max_tr:
                break
        else:
            q_new, p_new = q, p_old
    # Joint targets must keep the TCP in the workspace box too (or bring it closer to it).
    d_new = _box_distance_m(p_new, lo_ws, hi_ws)
    if d_new > 1e-9 and d_new >= _box_distance_m(p_old, lo_ws, hi_ws):
        why.append("joint target puts the TCP outside the workspace box: holding")
    else:
        pose.q = q_new
