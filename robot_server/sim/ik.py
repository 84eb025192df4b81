"""Differential inverse kinematics for the simulated FR3 (SIM.md): damped least squares on the 6x7
site Jacobian, a weak null-space pull toward home, joint limits (and optionally a per-call joint
step limit) clipped every iteration. It works on a scratch MjData so the simulation itself is never
touched."""

from __future__ import annotations

import math

import mujoco
import numpy as np

from pde_contract.rotations import (
    Quat,
    quat_conjugate_floats,
    quat_multiply_floats,
    quat_to_rotvec_floats,
    quat_xyzw_from_wxyz,
)
from robot_server.safety import SafetyLimits
from robot_server.sim import fr3

# The IK's own answers keep the margin the safety layer keeps joint targets at (by default).
IK_JOINT_MARGIN_RAD = SafetyLimits().joint_margin_rad


# The IK runs ~15 iterations per control tick (20, the cap, in most ticks of a policy's episode),
# so its small-vector arithmetic is written with ufuncs and dot products that give numpy's exact bits
# at a fraction of np.clip's and np.linalg.norm's Python dispatch, into buffers allocated once
# (tests/robot_server/sim/test_sim_speedups.py swaps the numpy calls back in and checks that
# trajectories are bit-identical).


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


def slice_or_index(adr: np.ndarray) -> slice | np.ndarray:
    """``adr`` as a slice when it is a run of consecutive addresses (the FR3's joints are): a view
    reads and writes the same numbers as the index array, without a fancy-index copy each time."""
    adr = np.asarray(adr)
    if adr.ndim == 1 and adr.size and np.array_equal(adr, np.arange(adr[0], adr[0] + adr.size)):
        return slice(int(adr[0]), int(adr[0]) + adr.size)
    return adr


def _quat4(q: np.ndarray) -> Quat:
    x, y, z, w = np.asarray(q, dtype=np.float64).reshape(4).tolist()
    return (x, y, z, w)


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
        self._qpos = slice_or_index(qpos_adr)
        self._dofs = slice_or_index(dof_adr)
        self._site_xpos = self.data.site_xpos[site_id]  # views: mj_kinematics writes into them
        self._site_xmat = self.data.site_xmat[site_id]
        self._lam2 = damping**2 * np.eye(6)
        # per-iteration buffers of solve(): the error, the Jacobian, MuJoCo's [w, x, y, z]. The
        # Jacobian is in Fortran order, as np.vstack of index-array column picks made it: BLAS's
        # products over it then round as they did (in C order they differ in the last bit).
        self._err = np.zeros(6)
        self._jac = np.zeros((6, len(dof_adr)), order="F")
        self._q_wxyz = np.zeros(4)
        self.last_error_norm = 0.0
        self.last_iterations = 0

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TCP (position, quaternion [x, y, z, w]) at joint angles ``q``."""
        pos = self.position(q)
        return pos, quat_xyzw_of_mujoco_matrix(self.data.site_xmat[self.site_id])

    def position(self, q: np.ndarray) -> np.ndarray:
        """TCP position at joint angles ``q`` (``forward`` without the orientation)."""
        self.data.qpos[self._qpos] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self._site_xpos.copy()

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
        m, d, site, dofs, qpos = self.model, self.data, self.site_id, self._dofs, self._qpos
        jacp, jacr, jac, err, out = self._jacp, self._jacr, self._jac, self._err, self._solve_out
        q_wxyz = self._q_wxyz
        pos_target = np.asarray(pos_target, dtype=np.float64)
        to = _quat4(quat_target_xyzw)
        err_norm = np.inf
        it = 0
        for it in range(1, self.max_iterations + 1):  # noqa: B007 - the count is reported
            # err = [target - TCP position; rotvec_between(TCP quaternion, target)]
            d.qpos[qpos] = q
            mujoco.mj_kinematics(m, d)
            np.subtract(pos_target, self._site_xpos, out=err[:3])
            mujoco.mju_mat2Quat(q_wxyz, self._site_xmat)
            w, x, y, z = q_wxyz.tolist()
            err[3:] = quat_to_rotvec_floats(quat_multiply_floats(to, quat_conjugate_floats((x, y, z, w))))
            err_norm = norm(err)
            if err_norm < self.tolerance:
                break
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, jacp, jacr, site)
            jac[:3] = jacp[:, dofs]
            jac[3:] = jacr[:, dofs]
            # J+ = J^T (J J^T + l^2 I)^-1 with a 6x6 Cholesky (MuJoCo's: numpy's LAPACK call costs
            # 10x more for a matrix this small, and its BLAS threads stall on a loaded machine)
            chol = jac @ jac.T + self._lam2
            mujoco.mju_cholFactor(chol, 0.0)
            mujoco.mju_cholSolve(out, chol, err)
            dq = jac.T @ out
            pull = self.nullspace_gain * (fr3.HOME_Q_RAD - q)
            mujoco.mju_cholSolve(out, chol, jac @ pull)
            dq += pull - jac.T @ out  # (I - J+ J) pull
            q = clip(q + dq, lower, upper)
        self.last_error_norm = err_norm
        self.last_iterations = it
        return q
