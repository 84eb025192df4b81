"""The simulated arm stops at a chunk's final target: measured at every physics step, through the
real executor and safety layer (bench/bench_chunk_end_overshoot.py runs every case)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from robot_server.executor import ChunkExecutor, ExecutorConfig
from robot_server.robots import chunk_end as ce
from robot_server.robots.sim import SimRobot
from robot_server.safety import SafetyLimits
from robot_server.sim.world import SimWorld, SimWorldConfig
from tests.robot_server.chunk_end_checks import CASES_AT_5CM, assert_stops_at_the_end, case_id

LIMITS = SafetyLimits()


@pytest.fixture(scope="module")
def rig() -> Iterator[ce.ChunkEndRig]:
    world = SimWorld(SimWorldConfig(scene="table"))
    robot = SimRobot(
        world,
        max_tcp_step_m=LIMITS.max_step_translation_m,
        workspace_m=(LIMITS.workspace_min_m, LIMITS.workspace_max_m),
    )
    ticks = ce.TickStates()
    # Realtime pacing: the settling after a chunk's end is measured, and fast pacing stops the sim's
    # clock between chunks (docs/sim.md, "Fast pacing"); each tick steps the same physics either way.
    ex = ChunkExecutor(robot, ExecutorConfig(realtime=True, heartbeat_timeout_s=0, limits=LIMITS), ticks)
    ex.start()
    try:
        yield ce.ChunkEndRig(
            ex,
            ce.PhysicsStepSampler(world.tcp_site_id, world.arm_qpos_adr, world.lock, world.data),
            ticks,
            LIMITS,
        )
    finally:
        ex.close()
        world.close()


@pytest.mark.parametrize("case", CASES_AT_5CM, ids=case_id)
def test_overshoot_at_a_chunk_end_at_5cm_per_tick(rig: ce.ChunkEndRig, case: ce.ChunkEndCase) -> None:
    figures = rig.run(case, settle_s=0.5)
    assert_stops_at_the_end(figures)
    # the measured TCP keeps to the per-tick step (the sim's setpoint does; servo tracking adds
    # at most 1 mm here)
    assert figures["tcp_step_per_tick_max_m"] <= LIMITS.max_step_translation_m + 0.001, figures


def test_the_physics_sampler_ignores_other_mujoco_data(rig: ce.ChunkEndRig) -> None:
    """MuJoCo's control callback is process-wide: a step of another model while the sampler runs
    must not add a sample (this one has enough sites and joints for the rig's indices to be valid)."""
    import mujoco

    bodies = "".join(f'<body><joint/><geom size=".1"/><site name="s{i}"/></body>' for i in range(64))
    other = mujoco.MjModel.from_xml_string(f"<mujoco><worldbody>{bodies}</worldbody></mujoco>")
    sampler = rig.sampler
    sampler.start()
    try:
        mujoco.mj_step(other, mujoco.MjData(other))
    finally:
        sampler.stop()
    assert sampler.samples.time_s == []
