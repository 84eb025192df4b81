"""Differential inverse kinematics for the simulated FR3 (SIM.md): damped least squares on the 6x7
site Jacobian, a weak null-space pull toward home, joint limits (and optionally a per-call joint
step limit) clipped every iteration. It works on a scratch MjData so the simulation itself is never
touched."""

from __future__ import annotations

import math

import mujoco
import numpy as np

from pde_contract.rotations import quat_xyzw_from_wxyz, rotvec_between
from robot_server.safety import SafetyLimits
from robot_server.sim import fr3

# The IK's own answers keep the margin the safety layer keeps joint targets at (by default).
IK_JOINT_MARGIN_RAD = SafetyLimits().joint_margin_rad


# The IK runs ~15 iterations per control tick, so its small-vector arithmetic is written with
# ufuncs and dot products that give numpy's exact bits at a fraction of np.clip's and
# np.linalg.norm's Python dispatch (tests/robot_server/sim/test_sim_speedups.py swaps the numpy
# calls back in and checks that trajectories are bit-identical).


def clip(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``np.clip(x, lower, upper)`` for float arrays: the same ufuncs (max, then min), same NaNs."""
    return np.minimum(np.maximum(x, lower), upper)


def norm(v: np.ndarray) -> float:
    """``np.linalg.norm(v)`` of a 1-D float vector: what it computes (sqrt of v.dot(v))."""
    return math.sqrt(v.dot(v))


def quat_xyzw_of_mujoco_matrix(mat: np.ndarray) -> np.ndarray:
    """A MuJoCo rotation matrix (``site_xmat``, 9 floats) -> [x, y, z, w], by MuJoCo's own
    conversion (C, called every IK iteration); its [w, x, y, z] is reordered here, at the boundary."""
    q_wxyz = np.zeros(4)
    mujoco.mju_mat2Quat(q_wxyz, np.ascontiguousarray(mat, dtype=np.float64).reshape(9))
    return quat_xyzw_from_wxyz(q_wxyz)


class DifferentialIK:
    def __init__(
        self,
        model: mujoco.MjModel,
        site_id: int,
        qpos_adr: np.ndarray,
        dof_adr: np.ndarray,
        damping: float = 0.02,
        nullspace_gain: float = 0.05,
        max_iterations: int = 20,
        tolerance: float = 1e-4,
    ) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.site_id = site_id
        self.qpos_adr = qpos_adr
        self.dof_adr = dof_adr
        self.damping = damping
        self.nullspace_gain = nullspace_gain
        self.max_iterations = max_iterations
        self.tolerance = tolerance
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._solve_out = np.zeros(6)
        self.last_error_norm = 0.0
        self.last_iterations = 0

    def _chol_solve(self, chol: np.ndarray, vec: np.ndarray) -> np.ndarray:
        mujoco.mju_cholSolve(self._solve_out, chol, np.ascontiguousarray(vec))
        return self._solve_out.copy()

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TCP (position, quaternion [x, y, z, w]) at joint angles ``q``."""
        pos = self.position(q)
        return pos, quat_xyzw_of_mujoco_matrix(self.data.site_xmat[self.site_id])

    def position(self, q: np.ndarray) -> np.ndarray:
        """TCP position at joint angles ``q`` (``forward`` without the orientation)."""
        self.data.qpos[self.qpos_adr] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.site_id].copy()

    def solve(
        self,
        q_seed: np.ndarray,
        pos_target: np.ndarray,
        quat_target_xyzw: np.ndarray,
        max_step_rad: np.ndarray | None = None,
    ) -> np.ndarray:
        """Joint angles near ``q_seed`` that put the TCP at the target. With ``max_step_rad`` no joint
        ends further than that from ``q_seed`` (a velocity limit times the control period): the
        answer is then the best reachable within one tick, never a jump to another configuration."""
        q = clip(np.asarray(q_seed, dtype=np.float64).copy(), fr3.JOINT_LOWER_RAD, fr3.JOINT_UPPER_RAD)
        # Every joint stays IK_JOINT_MARGIN_RAD inside its limits (as the safety layer keeps joint
        # targets): a joint already closer may stay or move out, never further in.
        lower = np.minimum(fr3.JOINT_LOWER_RAD + IK_JOINT_MARGIN_RAD, q)
        upper = np.maximum(fr3.JOINT_UPPER_RAD - IK_JOINT_MARGIN_RAD, q)
        if max_step_rad is not None:
            lower, upper = np.maximum(lower, q - max_step_rad), np.minimum(upper, q + max_step_rad)
        lam2 = self.damping**2 * np.eye(6)
        err_norm = np.inf
        it = 0
        for it in range(1, self.max_iterations + 1):  # noqa: B007 - the count is reported
            pos, quat = self.forward(q)
            err = np.concatenate([pos_target - pos, rotvec_between(quat, quat_target_xyzw)])
            err_norm = norm(err)
            if err_norm < self.tolerance:
                break
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site_id)
            jac = np.vstack([self._jacp[:, self.dof_adr], self._jacr[:, self.dof_adr]])
            # J+ = J^T (J J^T + l^2 I)^-1 with a 6x6 Cholesky (MuJoCo's: numpy's LAPACK call costs
            # 10x more for a matrix this small, and its BLAS threads stall on a loaded machine)
            chol = jac @ jac.T + lam2
            mujoco.mju_cholFactor(chol, 0.0)
            dq = jac.T @ self._chol_solve(chol, err)
            pull = self.nullspace_gain * (fr3.HOME_Q_RAD - q)
            dq += pull - jac.T @ self._chol_solve(chol, jac @ pull)  # (I - J+ J) pull
            q = clip(q + dq, lower, upper)
        self.last_error_norm = err_norm
        self.last_iterations = it
        return q
