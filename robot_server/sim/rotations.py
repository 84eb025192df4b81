"""Quaternion helpers. The wire uses [x, y, z, w]; MuJoCo uses [w, x, y, z]."""

from __future__ import annotations

import mujoco
import numpy as np


def xyzw_to_wxyz(q: np.ndarray) -> np.ndarray:
    return np.array([q[3], q[0], q[1], q[2]], dtype=np.float64)


def wxyz_to_xyzw(q: np.ndarray) -> np.ndarray:
    return np.array([q[1], q[2], q[3], q[0]], dtype=np.float64)


def mat_to_quat_wxyz(mat: np.ndarray) -> np.ndarray:
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(mat, dtype=np.float64).reshape(9))
    return q


def quat_wxyz_to_mat(q: np.ndarray) -> np.ndarray:
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(q, dtype=np.float64))
    return mat.reshape(3, 3)


def rotvec_to_quat_wxyz(rotvec: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    axis = np.asarray(rotvec, dtype=np.float64) / angle
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


def quat_mul_wxyz(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return out


def quat_conj_wxyz(q: np.ndarray) -> np.ndarray:
    return np.array([q[0], -q[1], -q[2], -q[3]], dtype=np.float64)


def quat_to_rotvec_wxyz(q: np.ndarray) -> np.ndarray:
    """Axis * angle of the shortest rotation that ``q`` represents (angle in [0, pi])."""
    q = np.asarray(q, dtype=np.float64)
    if q[0] < 0:
        q = -q
    s = float(np.linalg.norm(q[1:]))
    if s < 1e-12:
        return np.zeros(3)
    angle = 2.0 * np.arctan2(s, q[0])
    return q[1:] / s * angle


def rotation_error_wxyz(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Rotation vector (base frame) that takes ``current`` to ``target``: rotvec(target * current^-1)."""
    return quat_to_rotvec_wxyz(quat_mul_wxyz(target, quat_conj_wxyz(current)))
