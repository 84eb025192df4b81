"""The sim's fast arithmetic (robot_server/sim/ik.py, robot_server/robots/sim/robot_sim.py) gives
the states numpy's calls gave, bit for bit: the same trajectories on fixed scenes,
so the PDE benchmark's episodes are what they were before it got cheaper."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import mujoco
import numpy as np
import pytest

import robot_server.robots.sim.robot_sim as robot_sim
import robot_server.sim.ik as ik

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/bench_episode_throughput.py: its fixed sim trajectory is what both sides of the
    benchmark hash, so the test and the benchmark check the same thing."""
    spec = importlib.util.spec_from_file_location(
        "bench_episode_throughput", ROOT / "bench" / "bench_episode_throughput.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _OneStepAtATime:
    """``mujoco`` as robot_sim sees it, except that mj_step(m, d, n) runs n single steps."""

    def __getattr__(self, name: str) -> Any:
        return getattr(mujoco, name)

    @staticmethod
    def mj_step(m: mujoco.MjModel, d: mujoco.MjData, nstep: int = 1) -> None:
        for _ in range(nstep):
            mujoco.mj_step(m, d)


def test_trajectories_are_numpys_bit_for_bit(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three scenes, 36 chunks of random TCP steps each, the gripper closing and opening."""
    fast = bench.sim_trace(profile_top=0)["hash"]
    monkeypatch.setattr(ik, "clip", np.clip)
    monkeypatch.setattr(ik, "norm", lambda v: float(np.linalg.norm(v)))
    monkeypatch.setattr(robot_sim, "norm", lambda v: float(np.linalg.norm(v)))
    monkeypatch.setattr(robot_sim, "clip_scalar", lambda x, lo, hi: float(np.clip(x, lo, hi)))
    monkeypatch.setattr(
        robot_sim, "same_within", lambda a, b, tol: bool(np.allclose(a, b, rtol=0.0, atol=tol))
    )
    monkeypatch.setattr(robot_sim, "mujoco", _OneStepAtATime())
    assert bench.sim_trace(profile_top=0)["hash"] == fast


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
