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
from pde_contract.rotations import quat_from_rotvec, quat_multiply, rotvec_between
from robot_server.sim import fr3
from robot_server.sim.world import SimWorld, SimWorldConfig

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


def _reference_solve(
    solver: ik.DifferentialIK, q_seed: np.ndarray, pos: np.ndarray, quat: np.ndarray, max_step: np.ndarray
) -> tuple[np.ndarray, int]:
    """DifferentialIK.solve as plain numpy calls: a fresh Jacobian per iteration (np.vstack of the
    picked columns), np.linalg.norm, np.clip, rotvec_between on arrays."""
    m, d = solver.model, mujoco.MjData(solver.model)
    q = np.clip(np.asarray(q_seed, dtype=np.float64).copy(), fr3.JOINT_LOWER_RAD, fr3.JOINT_UPPER_RAD)
    lower = np.minimum(fr3.JOINT_LOWER_RAD + ik.IK_JOINT_MARGIN_RAD, q)
    upper = np.maximum(fr3.JOINT_UPPER_RAD - ik.IK_JOINT_MARGIN_RAD, q)
    lower, upper = np.maximum(lower, q - max_step), np.minimum(upper, q + max_step)
    jacp, jacr, out = np.zeros((3, m.nv)), np.zeros((3, m.nv)), np.zeros(6)
    for it in range(1, solver.max_iterations + 1):
        d.qpos[solver.qpos_adr] = q
        mujoco.mj_kinematics(m, d)
        now = ik.quat_xyzw_of_mujoco_matrix(d.site_xmat[solver.site_id])
        err = np.concatenate([pos - d.site_xpos[solver.site_id], rotvec_between(now, quat)])
        if float(np.linalg.norm(err)) < solver.tolerance:
            return q, it
        mujoco.mj_comPos(m, d)
        mujoco.mj_jacSite(m, d, jacp, jacr, solver.site_id)
        jac = np.vstack([jacp[:, solver.dof_adr], jacr[:, solver.dof_adr]])
        chol = jac @ jac.T + solver.damping**2 * np.eye(6)
        mujoco.mju_cholFactor(chol, 0.0)
        mujoco.mju_cholSolve(out, chol, err)
        dq = jac.T @ out
        pull = solver.nullspace_gain * (fr3.HOME_Q_RAD - q)
        mujoco.mju_cholSolve(out, chol, jac @ pull)
        dq += pull - jac.T @ out
        q = np.clip(q + dq, lower, upper)
    return q, solver.max_iterations


def test_ik_matches_plain_numpy_also_where_it_does_not_converge() -> None:
    """Targets near and far (most of a policy's ticks end at the 20-iteration cap): the same joint
    angles and iteration counts as the plain-numpy reference, bit for bit."""
    world = SimWorld(SimWorldConfig(image_width=16, image_height=16))
    try:
        solver = ik.DifferentialIK(world.model, world.tcp_site_id, world.arm_qpos_adr, world.arm_dof_adr)
        rng = np.random.default_rng(3)
        home_pos, home_quat = solver.forward(fr3.HOME_Q_RAD)
        max_step = fr3.JOINT_VELOCITY_LIMIT_RAD_S * 0.1
        capped = 0
        for reach_m in [0.001, 0.01, 0.05, 0.2] * 10:
            q_seed = fr3.HOME_Q_RAD + rng.normal(0.0, 0.2, 7)
            pos = home_pos + rng.normal(0.0, reach_m, 3)
            quat = quat_multiply(quat_from_rotvec(rng.normal(0.0, reach_m * 3, 3)), home_quat)
            expected, iterations = _reference_solve(solver, q_seed, pos, quat, max_step)
            got = solver.solve(q_seed, pos, quat, max_step)
            assert got.tobytes() == expected.tobytes() and solver.last_iterations == iterations
            capped += iterations == solver.max_iterations
        assert 0 < capped < 40  # both kinds were checked
    finally:
        world.close()
