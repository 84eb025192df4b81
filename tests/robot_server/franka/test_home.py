"""Home (reset) moves that finish: the speed is relative_dynamics_factor x home_dynamics_factor
(franky multiplies them), the deadline follows from the distance at that speed (robot time), and a
home that cannot finish within home_timeout_s is refused before anything moves, with the numbers.
The planner's duration against closed forms here, against franky's own planner on franky-sim."""

from __future__ import annotations

import itertools
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest

from robot_server.robots.base import RobotError
from robot_server.robots.franka import FrankaRobot
from robot_server.robots.franka.config import DEFAULT_HOME_JOINTS_RAD
from robot_server.robots.franka.fci_sim import FciSim
from robot_server.robots.franka.home import HOME_MARGIN, HOME_SLACK_S, rest_to_rest_s
from tests.robot_server.franka.conftest import sim_config

# The pose: joint 1 +0.5 rad and joint 7 -1.5 rad from home. At 0.1 x 0.15 of the limits
# it took 39.1 s of robot time on franky-sim against a 30 s home_timeout_s.
FAR_POSE = tuple(q + d for q, d in zip(DEFAULT_HOME_JOINTS_RAD, (0.5, 0, 0, 0, 0, 0, -1.5), strict=True))


def test_rest_to_rest_matches_the_closed_forms() -> None:
    v, a, j = 0.5, 2.0, 100.0
    # long: both limits reached, d/v + v/a + a/j
    assert rest_to_rest_s(3.0, v, a, j) == pytest.approx(3.0 / v + v / a + a / j)
    assert rest_to_rest_s(-3.0, v, a, j) == rest_to_rest_s(3.0, v, a, j)
    # tiny: neither limit reached, four jerk phases of (d / 2j)^(1/3)
    d = 1e-4
    assert rest_to_rest_s(d, v, a, j) == pytest.approx(4.0 * (d / (2.0 * j)) ** (1.0 / 3.0), rel=1e-9)
    assert rest_to_rest_s(0.0, v, a, j) == 0.0
    # monotone in the distance, and never faster than cruising all the way
    ds = np.linspace(1e-4, 2.0, 200)
    ts = [rest_to_rest_s(x, v, a, j) for x in ds]
    assert all(t2 > t1 for t1, t2 in itertools.pairwise(ts))
    assert all(t >= x / v for t, x in zip(ts, ds, strict=True))


def _q(robot: FrankaRobot) -> np.ndarray:
    return robot.read_state().joint_positions_rad


def _go_to(sim: FciSim, pose: tuple[float, ...]) -> None:
    """Put the arm at ``pose`` with a quick home move (30 % of the limits)."""
    mover = FrankaRobot(sim_config(sim.host, gripper=False, home_dynamics_factor=1.0))
    mover.connect()
    try:
        mover.home(joints_rad=pose)
        # franky-sim's joint controller settles up to ~0.03 rad short under gravity (joints 2, 4)
        np.testing.assert_allclose(_q(mover), pose, atol=0.05)
    finally:
        mover.disconnect()


def test_a_home_that_cannot_finish_is_refused_before_it_moves(fci_sim: FciSim, tmp_path: Path) -> None:
    _go_to(fci_sim, FAR_POSE)
    fault_file = tmp_path / "robot_fault.json"
    slow = FrankaRobot(
        sim_config(
            fci_sim.host,
            gripper=False,
            relative_dynamics_factor=0.1,
            home_dynamics_factor=0.15,  # the old example file's: 1.5 % of the limits
            home_timeout_s=30.0,
            fault_state_file=fault_file,
        )
    )
    slow.connect()
    try:
        import franky

        slow._recover_from_reflex(franky.ControlException('motion aborted by reflex! ["joint_reflex"]'))
        before = _q(slow)
        t0 = time.monotonic()
        # not pytest.raises: its traceback would keep home()'s franky Robot, and with it the FCI
        # connection, alive after disconnect
        try:
            slow.home()
        except RobotError as e:
            message = str(e)
        else:
            pytest.fail("a home of 38 s was started against a 30 s home_timeout_s")
        assert time.monotonic() - t0 < 10.0, "the refusal came after a move, not before"
        assert re.search(
            r"refused before it started.*home_timeout_s 30 s\. joint 7 turns 1\.[45]\d rad at 1\.5 % of "
            r"the FR3 limits \(relative_dynamics_factor 0\.1 x home_dynamics_factor 0\.15: franky "
            r"multiplies them\): 3\d\.\d s, deadline 4\d\.\d s.*Raise \[franka\] home_dynamics_factor",
            message,
        ), message
        time.sleep(0.3)
        # nothing moved: 5 mrad is franky-sim still settling from the move before (1.1 mrad seen);
        # the refused home would have turned joint 7 by 12 mrad in these 0.3 s
        np.testing.assert_allclose(_q(slow), before, atol=5e-3)
        assert slow.fault() is not None and fault_file.exists(), "a refused reset must not clear the latch"
    finally:
        slow.disconnect()
    _go_to(fci_sim, DEFAULT_HOME_JOINTS_RAD)


def test_a_home_finishes_within_the_deadline_franky_plans_for(fci_sim: FciSim) -> None:
    _go_to(fci_sim, FAR_POSE)
    robot = FrankaRobot(sim_config(fci_sim.host, gripper=False, home_dynamics_factor=0.5))
    robot.connect()
    try:
        robot.home()
        plan, took_s = robot.last_home, robot.last_home_s
        assert plan is not None and took_s is not None
        assert plan.factor == pytest.approx(0.3 * 0.5)
        # franky's planner (ruckig) and ours agree: the move ends near the planned duration, well
        # inside the deadline (robot time: a slow franky-sim does not count against it).
        assert 0.9 * plan.duration_s <= took_s <= plan.deadline_s, (took_s, plan.duration_s)
        assert plan.deadline_s == pytest.approx(plan.duration_s * HOME_MARGIN + HOME_SLACK_S)
        np.testing.assert_allclose(_q(robot), DEFAULT_HOME_JOINTS_RAD, atol=0.05)
        turn_rad = abs(plan.to_rad[6] - plan.from_rad[6])
        assert plan.slowest_joint == 7
        assert math.isclose(plan.duration_s, rest_to_rest_s(turn_rad, *_joint7_limits(0.15)), rel_tol=1e-9)
        print(f"home: planned {plan.duration_s:.3f} s, took {took_s:.3f} s of robot time")
    finally:
        robot.disconnect()


def _joint7_limits(factor: float) -> tuple[float, float, float]:
    """Joint 7's velocity, acceleration and jerk limits as franky holds them (FR3 values capped by
    franky's maximum, 2.61 rad/s for joint 7), times ``factor``."""
    return 2.61 * factor, 10.0 * factor, 5000.0 * factor
