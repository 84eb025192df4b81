"""How a stream of absolute targets, one per control tick, becomes franky motions.

The server's control loop hands the backend one target every ``period_s`` (10 Hz by default) and
must never wait for the arm. Each strategy below turns that stream into franky motions without
the arm stopping between ticks or between chunks. bench/bench_franka_strategies.py measures them
against franky-sim; ``timed_preempt`` is the default because it tracked best without stops there.

- ``preempt``: every tick a new asynchronous ``CartesianMotion`` to the target preempts the running
  one. Time-optimal planning reaches each target early and then decelerates to zero: stop-and-go.
- ``timed_preempt``: the same, but the target carries the velocity of the stream (last delta over
  the period) and a minimum time of one period, so the arm arrives on schedule still moving and
  the next tick's motion takes over without a dip. The motion keeps holding its last target.
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


class CartesianStreamer(abc.ABC):
    """Turns absolute end-effector targets, one per tick, into motions on a franky ``Robot``."""

    name: str

    def __init__(self, robot: franky.Robot, relative_dynamics_factor: float = 1.0) -> None:
        self.robot = robot
        self.relative_dynamics_factor = relative_dynamics_factor
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def reset(self) -> None:
        """Forget the stream (after a stop, an error, a home move)."""
        self._last = None

    @abc.abstractmethod
    def send(self, position_m: np.ndarray, quat_xyzw: np.ndarray, period_s: float) -> None:
        """Non-blocking: start moving towards the target. Errors of the previous motion surface
        here (franky raises them at the next ``move``)."""

    def stop(self) -> None:
        """Decelerate to rest (jerk-limited) without waiting."""
        import franky

        self.reset()
        self.robot.move(franky.CartesianStopMotion(), asynchronous=True)


class PreemptStreamer(CartesianStreamer):
    name = "preempt"

    def send(self, position_m: np.ndarray, quat_xyzw: np.ndarray, period_s: float) -> None:
        import franky

        motion = franky.CartesianMotion(
            franky.Affine(np.asarray(position_m, float), np.asarray(quat_xyzw, float)),
            franky.ReferenceType.Absolute,
            relative_dynamics_factor=self.relative_dynamics_factor,
        )
        self.robot.move(motion, asynchronous=True)
        self._last = (np.asarray(position_m, float), np.asarray(quat_xyzw, float))


class TimedPreemptStreamer(CartesianStreamer):
    name = "timed_preempt"

    # Feed-forward velocity is capped: a jump in the stream (first tick after a pause, a
    # clipped step) must not turn into a fast target velocity.
    max_feedforward_m_s = 0.5
    max_feedforward_rad_s = 1.5

    def send(self, position_m: np.ndarray, quat_xyzw: np.ndarray, period_s: float) -> None:
        import franky

        position_m = np.asarray(position_m, float)
        quat_xyzw = np.asarray(quat_xyzw, float)
        linear = np.zeros(3)
        angular = np.zeros(3)
        if self._last is not None and period_s > 0.0:
            last_pos, last_quat = self._last
            linear = (position_m - last_pos) / period_s
            angular = rotvec_between(last_quat, quat_xyzw) / period_s
            linear *= min(1.0, self.max_feedforward_m_s / max(float(np.linalg.norm(linear)), 1e-12))
            angular *= min(1.0, self.max_feedforward_rad_s / max(float(np.linalg.norm(angular)), 1e-12))
        state = franky.CartesianState(
            franky.Affine(position_m, quat_xyzw), franky.RobotVelocity(franky.Twist(linear, angular))
        )
        waypoint = franky.CartesianWaypoint(
            state,
            franky.ReferenceType.Absolute,
            minimum_time=franky.Duration(max(1, round(period_s * 1000.0))),
        )
        motion = franky.CartesianWaypointMotion(
            [waypoint],
            relative_dynamics_factor=self.relative_dynamics_factor,
            return_when_finished=False,
        )
        self.robot.move(motion, asynchronous=True)
        self._last = (position_m, quat_xyzw)


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

    def send(self, position_m: np.ndarray, quat_xyzw: np.ndarray, period_s: float) -> None:
        import franky

        target = franky.Affine(np.asarray(position_m, float), np.asarray(quat_xyzw, float))
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
        self._last = (np.asarray(position_m, float), np.asarray(quat_xyzw, float))

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
