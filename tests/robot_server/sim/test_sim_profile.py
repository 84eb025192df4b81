"""The sim speed profiles (robot_server/sim/profile.py): the server's setting reaches the physics and
the IK, a wrong name says which exist, and the scripted expert still solves the PDE benchmark's
task under the fast profile (bench/bench_sim_profiles.py counts it over 30 seeds)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from robot_server.backends import build_backend
from robot_server.robots.sim import SimRobot
from robot_server.settings import RobotServerSettings
from robot_server.sim.profile import DEFAULT, FAST, load_profile
from robot_server.sim.rollout import run_expert_episode
from robot_server.sim.world import SimWorld, SimWorldConfig

BENCH_TASK = "put_green_container_in_front_of_camera"


@pytest.mark.parametrize("name", ["default", "fast"])
def test_the_server_setting_reaches_physics_and_ik(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("PDE_ROBOT_SIM_PROFILE", name)
    backend = build_backend(RobotServerSettings(backend="sim", image_width=32, image_height=32))
    try:
        robot = backend.robot
        assert isinstance(robot, SimRobot)
        profile = load_profile(name)
        assert robot.world.config.profile == profile
        assert robot.world.timestep_s == profile.physics_timestep_s
        assert (robot.ik.max_iterations, robot.ik.tolerance) == (
            profile.ik_max_iterations,
            profile.ik_tolerance,
        )
    finally:
        backend.close()


def test_the_default_is_the_default_profile() -> None:
    assert RobotServerSettings().sim_profile == "default"
    assert SimWorldConfig().profile == DEFAULT


def test_unknown_profiles_are_refused_with_the_known_names() -> None:
    with pytest.raises(ValidationError, match="'default' or 'fast'"):
        RobotServerSettings(sim_profile="turbo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown sim profile 'turbo': choose one of \['default', 'fast'\]"):
        load_profile("turbo")
    with pytest.raises(ValueError, match="setpoint_hold_steps=0"):
        type(FAST)(**{**vars(FAST), "setpoint_hold_steps": 0})


def test_the_expert_solves_the_benchmark_task_under_the_fast_profile() -> None:
    world = SimWorld(SimWorldConfig(image_width=32, image_height=32, layout_spread=0.2, profile=FAST))
    try:
        robot = SimRobot(world)  # as `pde sim record` builds it
        robot.connect()
        for seed in (0, 1):
            assert run_expert_episode(robot, BENCH_TASK, seed).success, seed
    finally:
        world.close()
