"""The FR3 backend stops at a chunk's final target: the real executor, safety layer, FrankaRobot
and franky against franky-sim (its own process), measured from libfranka's state.

franky-sim cannot keep real time on a loaded 2-core machine (0.35-0.44x measured idle), and a
stream that runs ahead of the robot's clock is not what an FR3 sees. So the simulator runs
slowed and the executor with it (SlowedSimRobot gives the backend each tick's length in robot
time): ~10 Hz of robot time. On the code before the fix (every row fed forward, the held target
resent every tick) the ee_delta case went 17.5 mm below the floor (bench/bench_chunk_end_overshoot.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from robot_server.executor import ChunkExecutor, ExecutorConfig
from robot_server.robots import chunk_end as ce
from robot_server.robots.franka import FrankaRobot
from robot_server.safety import SafetyLimits
from tests.robot_server.chunk_end_checks import CASES_AT_5CM, assert_stops_at_the_end, case_id
from tests.robot_server.franka.conftest import sim_config

SPEED = 0.25  # franky-sim's pace (x real time); the executor runs at 10 Hz x this


@pytest.fixture(scope="module")
def rig() -> Iterator[ce.ChunkEndRig]:
    with ce.FciSimProcess(SPEED) as sim:
        arm = FrankaRobot(
            sim_config(sim.host, gripper=False, stall_timeout_s=2.0 / SPEED, home_timeout_s=30.0 / SPEED)
        )
        arm.connect()
        try:
            arm.home()
            # the joint step limit is a velocity times the wall-clock period: keep it per robot time
            limits = SafetyLimits(joint_velocity_fraction=SafetyLimits().joint_velocity_fraction * SPEED)
            ticks = ce.TickStates()
            config = ExecutorConfig(control_rate_hz=10.0 * SPEED, heartbeat_timeout_s=0, limits=limits)
            ex = ChunkExecutor(ce.SlowedSimRobot(arm, SPEED), config, ticks)
            ex.start()
            try:
                yield ce.ChunkEndRig(ex, ce.PolledSampler(arm.read_state), ticks, limits, 10.0 * SPEED)
            finally:
                ex.close()
        finally:
            arm.disconnect()


@pytest.mark.parametrize("case", CASES_AT_5CM, ids=case_id)
def test_overshoot_at_a_chunk_end_at_5cm_per_tick(rig: ce.ChunkEndRig, case: ce.ChunkEndCase) -> None:
    for _ in range(5):  # a starved simulator's uneven ticks are rare when the suite runs alone
        figures = rig.run(case, settle_s=0.6)
        periods = figures["robot_period_s"]
        if periods and max(periods) / min(periods) <= ce.MAX_PERIOD_SPREAD:
            break
    else:
        pytest.skip(f"franky-sim's ticks stayed uneven in robot time ({periods}): the machine is too loaded")
    assert_stops_at_the_end(figures)
