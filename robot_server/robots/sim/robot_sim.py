"""SimRobot: the Robot ABC on a SimWorld. ``command()`` solves differential IK toward the absolute
TCP target (or takes joint targets), ramps the joint servos' setpoints over the first half of the
period and advances physics by ``period_s``.

Like a real arm's controller, the sim never jumps: per tick no joint setpoint moves faster than the
FR3's velocity limit, and the setpoint's TCP moves at most ``max_tcp_step_m`` and stays within
``tcp_tube_m`` of the straight line from where it was to the target and inside the workspace box
(``workspace_m``; once outside, it may only come back toward it). The setpoint is planned for the
servos' lag, so that the MEASURED TCP keeps the limits too: it ends at most the step (less the
overshoot seen) from the measured TCP, and keeps the profile's tracking margin inside the box.
Where IK cannot get there within those bounds (an unreachable orientation, a singularity), the arm
goes only as far as it can along that line, or holds. The safety layer keeps targets in the
workspace box and their steps within the per-tick limit.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence

import mujoco
import numpy as np

from pde_contract.messages import RobotState
from robot_server.robots.base import Robot, RobotError, RobotNotConnectedError, RobotTarget
from robot_server.sim import fr3
from robot_server.sim.ik import DifferentialIK, norm, quat_xyzw_of_mujoco_matrix, slice_or_index
from robot_server.sim.tasks.base import Task
from robot_server.sim.world import SimWorld

# Physics time that the scene gets to settle after a reset (objects resting, fingers open).
SETTLE_S = 0.2
# The setpoint's ramp may be cut to these shares of its step (the furthest that keeps the bounds).
# The measured TCP ends up to this far past a setpoint it was sent toward at the full step (seen:
# 56.2 mm for a 50 mm setpoint step under fuzzing, and 49.8 mm with 7 mm kept back): the setpoint
# stays this much closer to the measured TCP than the limit.
STEP_OVERSHOOT_M = 0.010
# ... and for joint targets this much more, on the box and on the step from the measured TCP.
JOINT_TRACKING_M = 0.008
# A setpoint move turning a joint further than this counts as a sweep (JOINT_TRACKING_M applies).
SWEEP_RAD = 0.05
# A setpoint ending this close to a wall eases in (the measured overshoot of a half-tick ramp).
_NEAR_WALL_M = 0.01
_RAMP_SCALES = (1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125)


def _repeats(target: RobotTarget, nxt: RobotTarget) -> bool:
    """``nxt`` is the same target (the stream stops: rows clipped at a wall)."""
    for a, b in (
        (target.joint_positions_rad, nxt.joint_positions_rad),
        (target.ee_position_m, nxt.ee_position_m),
        (target.ee_quat_xyzw, nxt.ee_quat_xyzw),
    ):
        if a is None or b is None:
            if a is not b:
                return False
        elif not same_within(a, b, 1e-9):
            return False
    return True


def same_within(a: np.ndarray, b: np.ndarray, atol: float) -> bool:
    """``np.allclose(a, b, rtol=0.0, atol=atol)`` for finite arrays (a target's are), without its
    ~50 us of Python per call (run every control tick)."""
    return bool((np.abs(np.subtract(a, b)) <= atol).all())


def clip_scalar(x: float, lower: float, upper: float) -> float:
    """``float(np.clip(x, lower, upper))`` for floats (max, then min), run every physics substep."""
    return min(max(x, lower), upper)


class SimRobot(Robot):
    name = "sim"

    def __init__(
        self,
        world: SimWorld,
        max_tcp_step_m: float = 0.05,
        tcp_tube_m: float = 0.005,
        workspace_m: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
        tracking_margin_m: float | None = None,
    ) -> None:
        self.world = world
        self.max_tcp_step_m = max_tcp_step_m
        self.tcp_tube_m = tcp_tube_m
        # (min, max) corners of the box the setpoint's TCP may not leave (or, once outside, only
        # come back toward); None: no box (tests of the bare arm)
        # (shrunk by tracking_margin_m, by default the profile's: the box for the setpoint, so that
        # the measured TCP stays in the real one)
        if tracking_margin_m is None:
            tracking_margin_m = world.config.profile.tracking_margin_m
        self._box = (
            None
            if workspace_m is None
            else (
                np.asarray(workspace_m[0]) + tracking_margin_m,
                np.asarray(workspace_m[1]) - tracking_margin_m,
            )
        )
        profile = world.config.profile
        self.ik = DifferentialIK(
            world.model,
            world.tcp_site_id,
            world.arm_qpos_adr,
            world.arm_dof_adr,
            max_iterations=profile.ik_max_iterations,
            tolerance=profile.ik_tolerance,
        )
        self._arm_ctrl = slice_or_index(world.arm_actuator_ids)  # where the arm's setpoints go in ctrl
        self._connected = False
        self._q_cmd = fr3.HOME_Q_RAD.copy()  # the servos' current setpoint
        self._streaming = False  # the last target named the next one
        self._gripper_ctrl = fr3.GRIPPER_MAX_WIDTH_M / 2  # current per-finger setpoint
        self.task_name = ""
        self.seed: int | None = None
        self._task: Task | None = None
        self._reset_lock = threading.Lock()
        # Guiding: the arm servos' gains while they are switched off (None: servos on)
        self._servo_params: tuple[np.ndarray, np.ndarray] | None = None
        # What moves the limp arm while guiding, called before every physics step with the world
        # locked (robot_server/sim/hand.py: ScriptedHand); None: only the scene pushes it.
        self.guiding_hand: Callable[[SimWorld], None] | None = None
        home_pos, home_quat = self.ik.forward(fr3.HOME_Q_RAD)
        self._home_pos, self._home_quat_xyzw = home_pos, home_quat
        self.home()

    # --- lifecycle -------------------------------------------------------------------------------

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    def _require_connected(self) -> None:
        if not self._connected:
            raise RobotNotConnectedError("SimRobot is not connected: call connect() first")

    # --- state -----------------------------------------------------------------------------------

    def read_state(self) -> RobotState:
        w = self.world
        with w.lock:
            q = w.data.qpos[w.arm_qpos_adr].copy()
            dq = w.data.qvel[w.arm_dof_adr].copy()
            pos, mat = w.tcp_pose()
            width = w.gripper_width_m()
            t = float(w.data.time)
            # As the real gripper reports it: closed on something (not shut, not wide open).
            held = fr3.GRIPPER_EMPTY_WIDTH_M < width < fr3.GRIPPER_MAX_WIDTH_M - 0.005 and w.fingers_touch(
                w.prop_geom_ids
            )
        return RobotState(
            joint_positions_rad=q,
            joint_velocities_rad_s=dq,
            ee_position_m=pos,
            ee_quat_xyzw=quat_xyzw_of_mujoco_matrix(mat),
            gripper_width_m=width,
            robot_time_s=t,
            object_held=held,
        )

    @property
    def commanded_joint_positions_rad(self) -> np.ndarray:
        return self._q_cmd.copy()

    # --- motion ----------------------------------------------------------------------------------

    def command(self, target: RobotTarget, period_s: float) -> None:
        self._require_connected()
        w = self.world
        n_steps = max(1, round(period_s / w.timestep_s))
        with w.lock:
            max_step_rad = fr3.JOINT_VELOCITY_LIMIT_RAD_S * period_s
            pos_goal: np.ndarray | None = None
            if target.joint_positions_rad is not None:
                if np.shape(target.joint_positions_rad) != (7,):
                    raise RobotError(
                        f"joint_positions_rad has shape {np.shape(target.joint_positions_rad)}; "
                        "the FR3 needs (7,)"
                    )
                q_goal = np.clip(
                    np.asarray(target.joint_positions_rad, dtype=np.float64),
                    np.maximum(fr3.JOINT_LOWER_RAD, self._q_cmd - max_step_rad),
                    np.minimum(fr3.JOINT_UPPER_RAD, self._q_cmd + max_step_rad),
                )
            elif target.ee_position_m is not None and target.ee_quat_xyzw is not None:
                quat = np.array(target.ee_quat_xyzw, dtype=np.float64)
                quat /= np.linalg.norm(quat)
                pos_goal = np.asarray(target.ee_position_m, dtype=np.float64)
                if self._box is not None:  # a target on a wall: the setpoint stops short of it
                    pos_goal = np.clip(pos_goal, *self._box)
                q_goal = self.ik.solve(self._q_cmd, pos_goal, quat, max_step_rad)
            else:
                raise RobotError(
                    "RobotTarget needs either joint_positions_rad or ee_position_m + ee_quat_xyzw"
                )
            if not np.all(np.isfinite(q_goal)):
                raise RobotError("IK produced a non-finite joint target; target rejected, arm holds")
            # Where a stream announced to go on stops (a chunk's last row after rows that named
            # their next, a row the next one repeats: clipped at a wall), ease the setpoint in over
            # the whole period instead of the first half (_step). A caller that names no next
            # targets at all (the expert's row-by-row driver) keeps the plain ramp.
            nxt = target.next_target
            stops = (nxt is None and self._streaming) or (nxt is not None and _repeats(target, nxt))
            self._streaming = nxt is not None
            q_goal = self._bounded(q_goal, pos_goal)
            # Arriving at a wall of the box, ease in too: a setpoint that ramps in half a tick carries
            # the arm past its end (seen: 7.6 mm past a joint target's TCP 0.5 mm inside the top).
            stops = stops or self._near_wall(self.ik.position(q_goal))
            self._step(q_goal, float(target.gripper_width_m), n_steps, stops)

    def _bounded(self, q_goal: np.ndarray, pos_goal: np.ndarray | None) -> np.ndarray:
        """The furthest point on the joint-space line from the setpoint toward ``q_goal`` (a share
        of it, _RAMP_SCALES, or none of it) along which the TCP moves at most ``max_tcp_step_m`` from
        the setpoint AND from the MEASURED TCP (a servo lagging its setpoint would otherwise catch up
        faster than the limit), stays in the box (shrunk by the tracking margin) and, for a pose
        target, within ``tcp_tube_m`` of the line from where it is to the target."""
        q0 = self._q_cmd
        p0 = self.ik.position(q0)
        p_measured = self.ik.position(self.world.data.qpos[self.world.arm_qpos_adr])
        dq = q_goal - q0
        # A joint target, or a pose target that turns a joint far (a large rotation), sweeps the arm
        # through joint space, where the servos lag more (seen: 6-8 mm off the setpoint at 0.7 rad/s)
        # than along a straight line of the TCP: it keeps further from the walls, and a joint target
        # (whose TCP path the planner did not bound) a shorter step from the measured TCP.
        sweeps = pos_goal is None or float(np.max(np.abs(dq))) > SWEEP_RAD
        inset_m = JOINT_TRACKING_M if sweeps else 0.0
        step_m = self.max_tcp_step_m - STEP_OVERSHOOT_M - (JOINT_TRACKING_M if pos_goal is None else 0.0)
        outside0 = self._outside_box_m(p0, inset_m)
        line = None if pos_goal is None else pos_goal - p0
        line_len2 = 0.0 if line is None else float(line @ line)
        for scale in _RAMP_SCALES:
            ok = True
            for s in (0.25, 0.5, 0.75, 1.0):  # the servos ramp along the joint-space line
                p = self.ik.position(q0 + s * scale * dq)
                if (
                    norm(p - p0) > self.max_tcp_step_m
                    or norm(p - p_measured) > step_m
                    or self._outside_box_m(p, inset_m) > max(outside0, 0.001)
                ):
                    ok = False
                    break
                if line is not None:
                    t = min(1.0, max(0.0, float((p - p0) @ line) / line_len2)) if line_len2 > 0 else 0.0
                    if norm(p - (p0 + t * line)) > self.tcp_tube_m:
                        ok = False
                        break
            if ok:
                return q0 + scale * dq
        return q0.copy()

    def _step(self, q_goal: np.ndarray, gripper_width_m: float, n_steps: int, ease_in: bool = False) -> None:
        """Advance ``n_steps`` physics steps, the servos' setpoint ramping to ``q_goal`` over the
        first half (the stream goes on: the arm keeps up with it) or, ``ease_in``, over all of
        them, slowing linearly from the ramp's speed to rest: a setpoint stopping abruptly at the
        ramp's speed carried the arm past the target (up to 3.8 mm at 5 cm per tick)."""
        w = self.world
        m, d = w.model, w.data
        q_start = self._q_cmd
        q_delta = q_goal - q_start
        ramp_steps = n_steps if ease_in else max(1, n_steps // 2)
        grip_goal = min(max(gripper_width_m / 2, 0.0), fr3.GRIPPER_MAX_WIDTH_M / 2)
        grip_step = w.config.gripper_speed_m_s / 2 * w.timestep_s
        hand = self.guiding_hand if self._servo_params is not None else None
        # Substeps per setpoint block (the profile's; 1 while a hand pushes: its force is per step)
        hold = 1 if hand is not None else w.config.profile.setpoint_hold_steps
        # The setpoints of the ramp, all at once: each row is q_start + alpha * q_delta, the same
        # float operations per element as one substep at a time. From the ramp's end on (alpha 1)
        # the last row repeats.
        alphas = [min(1.0, (i + 1) / ramp_steps) for i in range(min(n_steps, ramp_steps))]
        if ease_in:
            alphas = [1.0 - (1.0 - a) ** 2 for a in alphas]
        setpoints = q_start + np.array(alphas)[:, None] * q_delta
        last = len(alphas) - 1
        arm_ctrl, grip_id = self._arm_ctrl, w.gripper_actuator_id
        grip = self._gripper_ctrl
        grip_block = grip_step * hold  # x * 1 == x: the default's numbers are unchanged
        i = 0
        while i < n_steps:
            if hand is not None:
                hand(w)
            k = min(i + hold - 1, last)  # a block holds the ramp's setpoint at its last substep
            d.ctrl[arm_ctrl] = setpoints[k]
            grip += clip_scalar(grip_goal - grip, -grip_block, grip_block)
            d.ctrl[grip_id] = self._gripper_ctrl = grip
            if hand is None and alphas[k] == 1.0 and grip == grip_goal:
                # Ramp done, gripper there: every later substep writes these same setpoints, so
                # MuJoCo runs them in one call (its own loop of mj_step: the same state, bit for bit).
                # Not while a hand pushes: its force is set anew before every step.
                mujoco.mj_step(m, d, n_steps - i)
                break
            block = min(hold, n_steps - i)
            mujoco.mj_step(m, d, block)
            i += block
        # Positions, sites and contacts consistent with the new qpos (for state and rendering).
        mujoco.mj_fwdPosition(m, d)
        self._q_cmd = q_goal.copy()
        if not np.all(np.isfinite(d.qpos)):
            raise RobotError("the simulation diverged (non-finite state): call home() to reset it")

    def _near_wall(self, p: np.ndarray) -> bool:
        """``p`` within the tracking-error distance of a wall of the setpoint's box (or outside)."""
        if self._box is None:
            return False
        lo, hi = self._box
        return bool(np.min(np.concatenate([p - lo, hi - p])) < _NEAR_WALL_M)

    def _outside_box_m(self, p: np.ndarray, inset_m: float = 0.0) -> float:
        """How far ``p`` is outside the setpoint's box, shrunk by ``inset_m`` more."""
        if self._box is None:
            return 0.0
        lo, hi = self._box
        return norm(np.maximum(lo + inset_m - p, 0.0) + np.maximum(p - hi + inset_m, 0.0))

    def hold(self) -> None:
        w = self.world
        with w.lock:
            self._q_cmd = w.data.qpos[w.arm_qpos_adr].copy()
            w.data.ctrl[self._arm_ctrl] = self._q_cmd

    def idle(self, period_s: float) -> None:
        self.step_idle(period_s)

    def set_guiding(self, enabled: bool) -> None:
        """Guiding: the arm servos go limp; the links' gravity is compensated (``gravcomp`` in the
        model, as the FR3 controller does), so the arm stays put until something pushes it
        (``data.xfrc_applied`` on a link, the scene). Ending it re-engages the servos at the
        measured joint angles."""
        w = self.world
        m, ids = w.model, w.arm_actuator_ids
        with w.lock:
            if enabled and self._servo_params is None:
                # stopped first, as the FR3 backend waits for its motion to end: a limp arm would
                # coast on with the speed it had
                w.data.qvel[w.arm_dof_adr] = 0.0
                self._servo_params = (m.actuator_gainprm[ids].copy(), m.actuator_biasprm[ids].copy())
                m.actuator_gainprm[ids] = 0.0
                m.actuator_biasprm[ids] = 0.0
            elif not enabled and self._servo_params is not None:
                m.actuator_gainprm[ids], m.actuator_biasprm[ids] = self._servo_params
                self._servo_params = None
                if self.guiding_hand is not None:
                    w.data.xfrc_applied[:] = 0.0  # the hand lets go
            self._q_cmd = w.data.qpos[w.arm_qpos_adr].copy()
            w.data.ctrl[ids] = self._q_cmd

    def step_idle(self, period_s: float) -> None:
        """Advance physics with the current setpoints (holding still)."""
        with self.world.lock:
            self._step(self._q_cmd, self._gripper_ctrl * 2, max(1, round(period_s / self.world.timestep_s)))

    def home(
        self, task: str = "", seed: int | None = None, joints_rad: Sequence[float] | None = None
    ) -> None:
        """Reset physics to the home pose (or ``joints_rad``) with the gripper open; with ``task``,
        lay out its scene from ``seed`` (a random seed when None)."""
        from robot_server.sim import tasks  # tasks import the world; import here to avoid a cycle

        # Everything that can refuse the request (unknown task, bad seed) before the sim is touched;
        # a failure after that restores the state from before the call, so a failed reset leaves the
        # arm and the scene as they were.
        new_task = tasks.load(task) if task else None
        q_home = (
            fr3.HOME_Q_RAD.copy() if joints_rad is None else np.asarray(joints_rad, dtype=float).reshape(7)
        )
        self.set_guiding(False)  # a reset re-engages the servos, as on the FR3
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        try:
            rng = np.random.default_rng(seed)
        except (TypeError, ValueError) as e:
            raise RobotError(f"reset seed {seed!r} refused ({e}): use an integer >= 0 or None") from e
        w = self.world
        with self._reset_lock, w.lock:
            m, d = w.model, w.data
            before = mujoco.MjData(m)
            mujoco.mj_copyData(before, m, d)
            q_cmd, gripper_ctrl = self._q_cmd, self._gripper_ctrl
            try:
                mujoco.mj_resetData(m, d)
                d.qpos[w.arm_qpos_adr] = q_home
                d.qpos[w.finger_qpos_adr] = fr3.GRIPPER_MAX_WIDTH_M / 2
                if new_task is not None:
                    new_task.reset(w, rng)
                mujoco.mj_forward(m, d)
                self._q_cmd = q_home.copy()
                self._gripper_ctrl = fr3.GRIPPER_MAX_WIDTH_M / 2
                self._step(self._q_cmd, fr3.GRIPPER_MAX_WIDTH_M, max(1, round(SETTLE_S / w.timestep_s)))
            except BaseException:
                mujoco.mj_copyData(d, m, before)
                self._q_cmd, self._gripper_ctrl = q_cmd, gripper_ctrl
                raise
            self._task, self.task_name, self.seed = new_task, task, seed

    def task_success(self) -> bool | None:
        if self._task is None:
            return None
        with self.world.lock:
            return bool(self._task.success(self.world))

    @property
    def home_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """TCP (position, quaternion xyzw) at the home joint angles."""
        return self._home_pos.copy(), self._home_quat_xyzw.copy()
