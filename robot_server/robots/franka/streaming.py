"""How a stream of absolute targets, one per control tick, becomes franky motions.

The server's control loop hands the backend one target every ``period_s`` (10 Hz by default) and
must never wait for the arm. Each strategy below turns that stream into franky motions without
the arm stopping between ticks or between chunks. bench/bench_franka_strategies.py measures them
against franky-sim; ``timed_preempt`` is the default because it tracked best without stops there.

- ``preempt``: every tick a new asynchronous ``CartesianMotion`` to the target preempts the running
  one. Time-optimal planning reaches each target early and then decelerates to zero: stop-and-go.
- ``timed_preempt``: the same, but the target carries the velocity of the stream and a minimum time
  of one period, so the arm arrives on schedule still moving and the next tick's motion takes over
  without a dip. The motion keeps holding its last target. The velocity never carries the arm past
  where the stream stops (``through_velocity``): a target with no known successor (a chunk's last
  row, a hold) or one the stream stops or turns at (a row clipped at a wall of the box) is reached
  at rest. Feeding the last step's velocity into a chunk's last row carried the arm 18-34 mm past
  it at 3-4.5 cm per tick on franky-sim (into the table below the box's floor).
- ``impedance``: one long-lived ``CartesianImpedanceTrackingMotion`` whose reference is updated
  each tick; compliant, but lags the reference by its stiffness.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Literal

import numpy as np

from pde_contract.rotations import rotvec_between

if TYPE_CHECKING:  # franky is imported where an FR3 is driven: the sim-only server runs without it
    import franky

StrategyName = Literal["timed_preempt", "preempt", "impedance"]
STRATEGY_NAMES: tuple[str, ...] = ("timed_preempt", "preempt", "impedance")


Pose = tuple[np.ndarray, np.ndarray]  # position (m), quaternion xyzw

# A waypoint's feed-forward speed stays at most this share of the speed the arm can still stop
# from within the next step (the rest is margin for jerk limiting and tracking).
FEEDFORWARD_SHARE = 0.9
# The braking distance used is this share of the step actually there (margin for the jerk phase).
_STOPPING_SHARE = 0.9


def stopping_speed(distance: np.ndarray | float, deceleration: np.ndarray | float) -> np.ndarray:
    """The highest speed from which the arm stops within ``distance`` (m or rad; per joint where
    arrays) at ``deceleration``, with a margin."""
    return np.sqrt(2.0 * _STOPPING_SHARE * np.asarray(deceleration, float) * np.abs(distance))


def _same_pose(a: Pose, b: Pose | None) -> bool:
    return b is not None and bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))


def through_velocity(step_in: np.ndarray, step_out: np.ndarray, period_s: float) -> np.ndarray:
    """The velocity to pass through a target with, per axis, given the step that led to it and
    the step that follows it: the smaller of the two over the period where both go the same way,
    zero where either is zero or they turn (a "minmod" limiter). So the arm passes a target at
    the stream's speed while the stream goes on, and arrives at rest where it stops or turns:
    it never carries on past a target that the stream does not go beyond. Braking from
    ``step/period`` takes ``(step/period)**2 / (2 a)``, which is within the next step while
    ``step <= 2 a period**2`` (54 mm at FR3's 9 m/s^2 x 0.3 at 10 Hz)."""
    same_way = np.sign(step_in) == np.sign(step_out)
    smaller = np.minimum(np.abs(step_in), np.abs(step_out))
    return np.where(same_way, np.sign(step_out) * smaller, 0.0) / period_s


class CartesianStreamer(abc.ABC):
    """Turns absolute end-effector targets, one per tick, into motions on a franky ``Robot``."""

    name: str

    def __init__(self, robot: franky.Robot, relative_dynamics_factor: float = 1.0) -> None:
        self.robot = robot
        self.relative_dynamics_factor = relative_dynamics_factor
        self._last: Pose | None = None
        self._last_at_rest = False  # the last motion ends at rest at ``_last``

    def reset(self) -> None:
        """Forget the stream (after a stop, an error, a home move)."""
        self._last = None
        self._last_at_rest = False

    def send(
        self, position_m: np.ndarray, quat_xyzw: np.ndarray, period_s: float, next_pose: Pose | None = None
    ) -> None:
        """Non-blocking: start moving towards the target. ``next_pose`` is the next tick's target
        where it is known (None: the arm must arrive at rest). Errors of the previous motion
        surface here (franky raises them at the next ``move``)."""
        pose = (np.asarray(position_m, float), np.asarray(quat_xyzw, float))
        after = None
        if next_pose is not None:
            after = (np.asarray(next_pose[0], float), np.asarray(next_pose[1], float))
        if self._last_at_rest and _same_pose(pose, self._last) and self.robot.is_in_control:
            # The running motion already brings the arm to rest here (the stream stopped: a hold,
            # rows clipped at a wall that repeat the target). A new one would be planned
            # from the current command without its braking acceleration: resending the held
            # target every tick carried the arm 12 mm past it from 0.5 m/s on franky-sim.
            return
        self._last_at_rest = self._move(pose, period_s, after)
        self._last = pose

    @abc.abstractmethod
    def _move(self, pose: Pose, period_s: float, next_pose: Pose | None) -> bool:
        """Start the motion to ``pose``; True when it ends at rest there."""

    def stop(self) -> None:
        """Decelerate to rest (jerk-limited) without waiting."""
        import franky

        self.reset()
        self.robot.move(franky.CartesianStopMotion(), asynchronous=True)


class PreemptStreamer(CartesianStreamer):
    name = "preempt"

    def _move(self, pose: Pose, period_s: float, next_pose: Pose | None) -> bool:
        import franky

        motion = franky.CartesianMotion(
            franky.Affine(*pose),
            franky.ReferenceType.Absolute,
            relative_dynamics_factor=self.relative_dynamics_factor,
        )
        self.robot.move(motion, asynchronous=True)
        return True


class TimedPreemptStreamer(CartesianStreamer):
    name = "timed_preempt"

    # Feed-forward velocity is capped: a jump in the stream (first tick after a pause, a
    # clipped step) must not turn into a fast target velocity.
    max_feedforward_m_s = 0.5
    max_feedforward_rad_s = 1.5

    def _move(self, pose: Pose, period_s: float, next_pose: Pose | None) -> bool:
        import franky

        position_m, quat_xyzw = pose
        linear = np.zeros(3)
        angular = np.zeros(3)
        speed_factor = 1.0
        if self._last is not None and next_pose is not None and period_s > 0.0:
            last_pos, last_quat = self._last
            next_pos, next_quat = next_pose
            step_out = next_pos - position_m
            turn_out = rotvec_between(quat_xyzw, next_quat)
            linear = through_velocity(position_m - last_pos, step_out, period_s)
            angular = through_velocity(rotvec_between(last_quat, quat_xyzw), turn_out, period_s)
            if np.any(linear) or np.any(angular):
                # The arm passes this target moving, so it must be able to stop by the next one,
                # whatever speed it reaches on the way (it speeds up when it lags the stream).
                robot, robot_factor = self.robot, self.robot.relative_dynamics_factor
                scale_v = robot_factor.velocity * self.relative_dynamics_factor
                scale_a = robot_factor.acceleration * self.relative_dynamics_factor
                caps = stopping_speed(
                    np.array([np.linalg.norm(step_out), np.linalg.norm(turn_out)]),
                    np.array(
                        [robot.translation_acceleration_limit.get(), robot.rotation_acceleration_limit.get()]
                    )
                    * scale_a,
                )
                maxima = np.array(
                    [robot.translation_velocity_limit.get(), robot.rotation_velocity_limit.get()]
                )
                speed_factor = min(1.0, max(float(np.max(caps / (maxima * scale_v))), 1e-3))
                # within what this motion may reach too, or ruckig refuses the target
                bounds = FEEDFORWARD_SHARE * np.minimum(caps, maxima * scale_v * speed_factor)
                bounds = np.minimum(bounds, [self.max_feedforward_m_s, self.max_feedforward_rad_s])
                linear *= min(1.0, bounds[0] / max(float(np.linalg.norm(linear)), 1e-12))
                angular *= min(1.0, bounds[1] / max(float(np.linalg.norm(angular)), 1e-12))
        state = franky.CartesianState(
            franky.Affine(position_m, quat_xyzw), franky.RobotVelocity(franky.Twist(linear, angular))
        )
        waypoint = franky.CartesianWaypoint(
            state,
            franky.ReferenceType.Absolute,
            minimum_time=franky.Duration(max(1, round(period_s * 1000.0))),
        )
        factor = self.relative_dynamics_factor
        motion = franky.CartesianWaypointMotion(
            [waypoint],
            relative_dynamics_factor=franky.RelativeDynamicsFactor(factor * speed_factor, factor, factor),
            return_when_finished=False,
        )
        self.robot.move(motion, asynchronous=True)
        return not (np.any(linear) or np.any(angular))


class ImpedanceStreamer(CartesianStreamer):
    name = "impedance"

    def __init__(
        self,
        robot: franky.Robot,
        relative_dynamics_factor: float = 1.0,
        translational_stiffness: float = 1000.0,
        rotational_stiffness: float = 100.0,
    ) -> None:
        super().__init__(robot, relative_dynamics_factor)
        self.translational_stiffness = translational_stiffness
        self.rotational_stiffness = rotational_stiffness
        self._motion: franky.CartesianImpedanceTrackingMotion | None = None

    def reset(self) -> None:
        super().reset()
        self._motion = None

    def _move(self, pose: Pose, period_s: float, next_pose: Pose | None) -> bool:
        import franky

        target = franky.Affine(*pose)
        if self._motion is None or not self.robot.is_in_control:
            # Surface any stored error of the previous motion before starting a new controller.
            self.robot.poll_motion()
            motion = franky.CartesianImpedanceTrackingMotion(
                translational_stiffness=self.translational_stiffness,
                rotational_stiffness=self.rotational_stiffness,
            )
            self._motion = motion
            motion.set_reference(franky.CartesianReference(target=self.robot.current_pose.end_effector_pose))
            self.robot.move(motion, asynchronous=True)
        self._motion.set_reference(franky.CartesianReference(target=target))
        return False  # a new reference is cheap: set it every tick

    def stop(self) -> None:
        import franky

        self.reset()
        self.robot.move(franky.TorqueStopMotion(), asynchronous=True)


def make_streamer(name: str, robot: franky.Robot, relative_dynamics_factor: float = 1.0) -> CartesianStreamer:
    if name == "timed_preempt":
        return TimedPreemptStreamer(robot, relative_dynamics_factor)
    if name == "preempt":
        return PreemptStreamer(robot, relative_dynamics_factor)
    if name == "impedance":
        return ImpedanceStreamer(robot, relative_dynamics_factor)
    raise ValueError(f"unknown streaming strategy {name!r}; choose one of {', '.join(STRATEGY_NAMES)}")
