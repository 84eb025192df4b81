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
from robot_server.robots.base import RobotTarget

# FR3 safe joint limits and velocity limits (shared/FR3.md).
FR3_JOINT_LOWER_RAD = np.array([-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159])
FR3_JOINT_UPPER_RAD = np.array([2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159])
FR3_JOINT_VELOCITY_RAD_S = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])
GRIPPER_MIN_WIDTH_M = 0.0
GRIPPER_MAX_WIDTH_M = 0.08


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
    # Box for the TCP in the robot base frame (table top at z = 0).
    workspace_min_m: tuple[float, float, float] = (0.15, -0.6, 0.01)
    workspace_max_m: tuple[float, float, float] = (0.85, 0.6, 0.85)
    max_step_translation_m: float = 0.05  # per control tick: 0.5 m/s at 10 Hz
    max_step_rotation_rad: float = 0.3  # per control tick
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
        if self.joint_margin_rad < 0:
            raise ValueError(f"joint_margin_rad must be >= 0, got {self.joint_margin_rad}")

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


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    )


def rotvec_to_quat(rv: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(rv))
    if angle < 1e-12:
        return np.array([0.5 * rv[0], 0.5 * rv[1], 0.5 * rv[2], 1.0]) / math.sqrt(1 + 0.25 * angle**2)
    axis = rv / angle
    s = math.sin(angle / 2)
    return np.array([axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2)])


def quat_angle_rad(a: np.ndarray, b: np.ndarray) -> float:
    """Angle of the rotation taking a to b."""
    d = abs(float(np.dot(a / np.linalg.norm(a), b / np.linalg.norm(b))))
    return 2.0 * math.acos(min(1.0, d))


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


def _limit_norm(v: np.ndarray, max_norm: float) -> tuple[np.ndarray, bool]:
    n = float(np.linalg.norm(v))
    if n > max_norm:
        return v * (max_norm / n), True
    return v, False


def plan_chunk(
    actions: np.ndarray,
    action_space: ActionSpace,
    start: PlanStart,
    limits: SafetyLimits,
    period_s: float,
) -> SafePlan:
    """Absolute per-tick targets for checked ``actions`` that respect every limit."""
    plan = SafePlan(targets=[])
    lo_ws, hi_ws = np.asarray(limits.workspace_min_m), np.asarray(limits.workspace_max_m)
    pos = np.asarray(start.ee_position_m, dtype=np.float64).copy()
    quat = np.asarray(start.ee_quat_xyzw, dtype=np.float64).copy()
    q = np.asarray(start.joint_positions_rad, dtype=np.float64).copy()
    for i, row in enumerate(actions):
        why: list[str] = []
        width = float(np.clip(row[-1], limits.gripper_min_m, limits.gripper_max_m))
        if width != row[-1]:
            why.append(f"gripper {row[-1]:.4f} m")
        if action_space is ActionSpace.EE_DELTA:
            want = np.clip(pos + row[:3], lo_ws, hi_ws)
            if np.any(want != pos + row[:3]):
                why.append(f"position {np.round(pos + row[:3], 4).tolist()} outside the workspace box")
            step, limited = _limit_norm(want - pos, limits.max_step_translation_m)
            if limited:
                why.append(f"translation step {np.linalg.norm(want - pos):.4f} m")
            rv, rlimited = _limit_norm(row[3:6], limits.max_step_rotation_rad)
            if rlimited:
                why.append(f"rotation step {np.linalg.norm(row[3:6]):.3f} rad")
            pos = pos + step
            quat = quat_multiply(rotvec_to_quat(rv), quat)
            quat /= np.linalg.norm(quat)
            plan.targets.append(
                RobotTarget(gripper_width_m=width, ee_position_m=pos.copy(), ee_quat_xyzw=quat.copy())
            )
        elif action_space is ActionSpace.JOINT_ABS:
            want = np.clip(row[:7], limits.joint_min_rad, limits.joint_max_rad)
            if np.any(want != row[:7]):
                j = int(np.argmax(want != row[:7]))
                why.append(f"joint {j + 1} target {row[j]:.4f} rad beyond its limit minus margin")
            max_step = limits.max_joint_step_rad(period_s)
            step = np.clip(want - q, -max_step, max_step)
            if np.any(step != want - q):
                why.append("joint step faster than the velocity limit")
            q = q + step
            plan.targets.append(RobotTarget(gripper_width_m=width, joint_positions_rad=q.copy()))
        else:  # pragma: no cover - check_chunk refuses unknown spaces
            raise SafetyError(ErrorCode.INVALID_ACTION, f"unknown action space {action_space!r}")
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
