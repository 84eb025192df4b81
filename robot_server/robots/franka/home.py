"""The home (reset) move's speed and deadline, in one place, with franky's semantics.

franky MULTIPLIES speed factors down its layers: a motion's ``relative_dynamics_factor`` scales the
robot's, which scales the joint velocity, acceleration and jerk limits. A home move
(``franky.JointMotion`` with ``home_dynamics_factor``) therefore runs at
``relative_dynamics_factor x home_dynamics_factor`` of the limits: 0.1 x 0.15 = 1.5 %, about
0.033 rad/s on joints 1-4, so a 1.28 rad turn of joint 1 (the default box's corner) took 39 s.

franky plans it with ruckig: every joint's time-optimal rest-to-rest profile under the scaled
limits, synchronised to the slowest joint. ``plan_home`` computes that duration; the deadline is
the duration with a margin, in robot time; a home whose deadline is beyond ``home_timeout_s`` is
refused before anything moves, with the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Deadline = duration x this + HOME_SLACK_S. Measured on franky-sim (bench/bench_home_reset.py, 16
# homes of 7-19 s): each took 0.996-1.033 x its planned duration; the rest covers a controller that
# starts the motion late and an arm that settles slowly (a payload, a soft joint).
HOME_MARGIN = 1.25
HOME_SLACK_S = 1.0

Floats = Sequence[float] | np.ndarray


def rest_to_rest_s(distance: float, velocity: float, acceleration: float, jerk: float) -> float:
    """Minimum time of a jerk-limited move over ``distance`` from rest to rest (one joint, the
    profile ruckig plans): cruise at ``velocity`` when the distance allows it, else the peak
    velocity the distance allows."""
    d = abs(float(distance))
    if d == 0.0:
        return 0.0

    def ramp_s(v: float) -> float:  # time to reach v from rest (and to brake from it)
        if v >= acceleration**2 / jerk:  # the acceleration limit is reached
            return v / acceleration + acceleration / jerk
        return 2.0 * math.sqrt(v / jerk)

    # A ramp up to v and back down covers v * ramp_s(v) (the profile is symmetric).
    if d >= velocity * ramp_s(velocity):
        return ramp_s(velocity) + d / velocity
    lo, hi = 0.0, velocity
    for _ in range(60):  # the peak velocity whose ramps cover exactly d
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid * ramp_s(mid) < d else (lo, mid)
    return 2.0 * ramp_s(hi)


@dataclass(frozen=True)
class HomePlan:
    """What a home move from ``from_rad`` to ``to_rad`` takes, before it starts."""

    from_rad: tuple[float, ...]
    to_rad: tuple[float, ...]
    robot_factor: float  # relative_dynamics_factor, as franky holds it
    home_factor: float  # home_dynamics_factor, the motion's own
    duration_s: float  # the planned duration (robot time)
    slowest_joint: int  # 1..7
    timeout_s: float  # home_timeout_s: the longest a home may take

    @property
    def factor(self) -> float:
        """The share of the FR3 limits the move runs at (franky multiplies the two)."""
        return self.robot_factor * self.home_factor

    @property
    def deadline_s(self) -> float:
        """How long (robot time) the move may run before it is stopped as stuck."""
        return self.duration_s * HOME_MARGIN + HOME_SLACK_S

    @property
    def fits(self) -> bool:
        return self.deadline_s <= self.timeout_s

    def describe(self) -> str:
        j = self.slowest_joint - 1
        turn = abs(self.to_rad[j] - self.from_rad[j])
        return (
            f"joint {self.slowest_joint} turns {turn:.2f} rad at {self.factor * 100:.3g} % of the FR3 limits "
            f"(relative_dynamics_factor {self.robot_factor:g} x home_dynamics_factor {self.home_factor:g}: "
            f"franky multiplies them): {self.duration_s:.1f} s, deadline {self.deadline_s:.1f} s "
            f"(x{HOME_MARGIN} + {HOME_SLACK_S:g} s)"
        )

    def refusal(self) -> str:
        need = (self.duration_s * HOME_MARGIN + HOME_SLACK_S) / self.timeout_s
        return (
            f"The home move was refused before it started: it cannot finish within home_timeout_s "
            f"{self.timeout_s:g} s. {self.describe()}. Raise [franka] home_dynamics_factor (to at least "
            f"{min(1.0, self.home_factor * need):.2g}) or home_timeout_s, or reset from closer to the home "
            "pose (guide the arm nearer first)."
        )


def plan_home(
    from_rad: Floats,
    to_rad: Floats,
    robot_factor: float,
    home_factor: float,
    velocity_rad_s: Floats,
    acceleration_rad_s2: Floats,
    jerk_rad_s3: Floats,
    timeout_s: float,
) -> HomePlan:
    """``*_rad_s*``: the robot's unscaled joint limits (franky's ``joint_*_limit``, as set)."""
    f = robot_factor * home_factor
    times = [
        rest_to_rest_s(b - a, v * f, acc * f, jk * f)
        for a, b, v, acc, jk in zip(
            from_rad, to_rad, velocity_rad_s, acceleration_rad_s2, jerk_rad_s3, strict=True
        )
    ]
    slowest = int(np.argmax(times))
    return HomePlan(
        from_rad=tuple(float(q) for q in from_rad),
        to_rad=tuple(float(q) for q in to_rad),
        robot_factor=float(robot_factor),
        home_factor=float(home_factor),
        duration_s=float(times[slowest]),
        slowest_joint=slowest + 1,
        timeout_s=float(timeout_s),
    )
