"""The sim's fast arithmetic (robot_server/sim/ik.py, robot_server/robots/sim/robot_sim.py) gives
the states numpy's calls gave, bit for bit: same trajectories and task outcomes on fixed scenes,
so the PDE benchmark's episodes are what they were before it got cheaper."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import mujoco
import numpy as np
import pytest

import robot_server.robots.sim.robot_sim as robot_sim
import robot_server.sim.ik as ik
from robot_server.robots.base import RobotTarget
from robot_server.robots.sim import SimRobot
from robot_server.sim.world import SimWorld, SimWorldConfig

TASK = "put_green_container_in_front_of_camera"
SCENES = (100_000, 100_001)  # the benchmark's first held-out evaluation scenes


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    w = SimWorld(SimWorldConfig(image_width=32, image_height=32, layout_spread=0.2))
    yield w
    w.close()


def trajectory(world: SimWorld) -> tuple[str, list[bool | None]]:
    """(hash of every tick's joint state, task success per scene) for chunks of random TCP steps
    with the gripper closing and opening, a clipped (repeated) row, and an idle tick per chunk."""
    robot = SimRobot(world, workspace_m=((0.2, -0.4, 0.0), (0.8, 0.4, 0.6)))
    robot.connect()
    h = hashlib.sha256()
    outcomes = []
    for scene in SCENES:
        robot.home(task=TASK, seed=scene)
        rng = np.random.default_rng(scene)
        state = robot.read_state()
        pos, quat = state.ee_position_m.copy(), state.ee_quat_xyzw.copy()
        for chunk in range(3):
            rows = []
            for row in range(10):
                if row != 5:  # row 5 repeats row 4: a stream clipped at a wall
                    pos = pos + rng.normal(0.0, 0.01, 3)
                width = 0.0 if chunk == 1 else 0.08
                rows.append(RobotTarget(gripper_width_m=width, ee_position_m=pos.copy(), ee_quat_xyzw=quat))
            for k, target in enumerate(rows):
                robot.command(replace(target, next_target=rows[k + 1]) if k + 1 < len(rows) else target, 0.1)
                h.update(world.data.qpos.tobytes() + world.data.qvel.tobytes() + world.data.ctrl.tobytes())
            robot.step_idle(0.1)
            h.update(world.data.qpos.tobytes() + robot.read_state().ee_quat_xyzw.tobytes())
        outcomes.append(robot.task_success())
    return h.hexdigest(), outcomes


class _OneStepAtATime:
    """``mujoco`` as robot_sim sees it, except that mj_step(m, d, n) runs n single steps."""

    def __getattr__(self, name: str) -> Any:
        return getattr(mujoco, name)

    @staticmethod
    def mj_step(m: mujoco.MjModel, d: mujoco.MjData, nstep: int = 1) -> None:
        for _ in range(nstep):
            mujoco.mj_step(m, d)


def test_trajectories_are_numpys_bit_for_bit(world: SimWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = trajectory(world)
    monkeypatch.setattr(ik, "clip", np.clip)
    monkeypatch.setattr(ik, "norm", lambda v: float(np.linalg.norm(v)))
    monkeypatch.setattr(robot_sim, "norm", lambda v: float(np.linalg.norm(v)))
    monkeypatch.setattr(robot_sim, "clip_scalar", lambda x, lo, hi: float(np.clip(x, lo, hi)))
    monkeypatch.setattr(
        robot_sim, "same_within", lambda a, b, tol: bool(np.allclose(a, b, rtol=0.0, atol=tol))
    )
    monkeypatch.setattr(robot_sim, "mujoco", _OneStepAtATime())
    assert trajectory(world) == fast


def test_helpers_match_numpy_on_edge_values() -> None:
    rng = np.random.default_rng(0)
    for v in [*rng.normal(0.0, 1.0, (50, 6)), np.zeros(3), np.array([1e-300, 1e300, -0.0])]:
        assert ik.norm(v) == float(np.linalg.norm(v))
        lo, hi = -np.abs(v[::-1]), np.abs(v)
        assert np.array_equal(ik.clip(v * 3, lo, hi), np.clip(v * 3, lo, hi))
    for x in (-1.0, -1e-5, 0.0, -0.0, 1e-5, 2e-5, 1.0, float("nan")):
        expected = float(np.clip(x, -2e-5, 2e-5))
        got = robot_sim.clip_scalar(x, -2e-5, 2e-5)
        assert got == expected or (np.isnan(got) and np.isnan(expected))
    a = rng.normal(0.0, 1.0, 7)
    for b in (a, a + 1e-9, a + 2e-9, a - 1e-10, a + np.eye(7)[3] * 1e-8):
        assert robot_sim.same_within(a, b, 1e-9) == bool(np.allclose(a, b, rtol=0.0, atol=1e-9))
