"""Rotations, in one convention: unit quaternions are **[x, y, z, w]** (scalar last), as on the wire
(``RobotState.ee_quat_xyzw``), in franky and in scipy. MuJoCo's [w, x, y, z] is converted where
MuJoCo data is read or written (``quat_xyzw_from_wxyz`` / ``quat_wxyz_from_xyzw``), nowhere else.

Products are Hamilton's: ``quat_multiply(a, b)`` rotates by ``b`` first, then by ``a``; with base-
frame deltas, ``quat_multiply(quat_from_rotvec(delta), q)`` applies ``delta`` to orientation ``q``.
A rotation vector is axis * angle (rad). Matrices act on column vectors (``R @ v``).

Each formula is written once, on Python floats (``*_floats``): the safety planner runs them row by
row, where numpy on a 4-vector costs ~10x more. The numpy functions wrap them.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

Quat = tuple[float, float, float, float]  # x, y, z, w
Vec3 = tuple[float, float, float]

IDENTITY_XYZW: Quat = (0.0, 0.0, 0.0, 1.0)


# --- on Python floats -----------------------------------------------------------------------------


def quat_multiply_floats(a: Quat, b: Quat) -> Quat:
    """Hamilton product ``a * b`` (rotate by ``b``, then by ``a``)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def quat_from_rotvec_floats(rx: float, ry: float, rz: float) -> Quat:
    """The rotation by angle |r| about r / |r|; below 1e-12 rad the first-order quaternion,
    normalised (no division by a vanishing angle)."""
    angle = math.sqrt(rx * rx + ry * ry + rz * rz)
    if angle < 1e-12:
        n = math.sqrt(1 + 0.25 * angle**2)
        return (0.5 * rx / n, 0.5 * ry / n, 0.5 * rz / n, 1.0 / n)
    s = math.sin(angle / 2) / angle
    return (rx * s, ry * s, rz * s, math.cos(angle / 2))


def quat_normalize_floats(q: Quat) -> Quat:
    """``q`` scaled to unit norm."""
    x, y, z, w = q
    n = math.sqrt(x * x + y * y + z * z + w * w)
    return (x / n, y / n, z / n, w / n)


def quat_conjugate_floats(q: Quat) -> Quat:
    """The inverse rotation of unit ``q``."""
    x, y, z, w = q
    return (-x, -y, -z, w)


def quat_to_rotvec_floats(q: Quat) -> Vec3:
    """Axis * angle of the shortest rotation that unit ``q`` represents (angle in [0, pi]: ``q``
    and ``-q`` give the same vector)."""
    x, y, z, w = q
    if w < 0:
        x, y, z, w = -x, -y, -z, -w
    s = math.sqrt(x * x + y * y + z * z)
    if s < 1e-12:
        return (0.0, 0.0, 0.0)
    k = 2.0 * math.atan2(s, w) / s
    return (x * k, y * k, z * k)


def quat_z_axis_floats(q: Quat) -> Vec3:
    """Third column of the rotation matrix of unit ``q``: where the body's z axis (the FR3's tool
    axis) points in the base frame."""
    x, y, z, w = q
    return (2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y))


# --- numpy -------------------------------------------------------------------------------------------


def _floats4(q: ArrayLike) -> Quat:
    x, y, z, w = np.asarray(q, dtype=np.float64).reshape(4).tolist()
    return (x, y, z, w)


def quat_xyzw_from_wxyz(q_wxyz: ArrayLike) -> np.ndarray:
    """MuJoCo's [w, x, y, z] -> [x, y, z, w]."""
    q = np.asarray(q_wxyz, dtype=np.float64)
    return np.array([q[1], q[2], q[3], q[0]], dtype=np.float64)


def quat_wxyz_from_xyzw(q_xyzw: ArrayLike) -> np.ndarray:
    """[x, y, z, w] -> MuJoCo's [w, x, y, z]."""
    q = np.asarray(q_xyzw, dtype=np.float64)
    return np.array([q[3], q[0], q[1], q[2]], dtype=np.float64)


def quat_multiply(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Hamilton product ``a * b`` of [x, y, z, w] quaternions (rotate by ``b``, then by ``a``)."""
    return np.array(quat_multiply_floats(_floats4(a), _floats4(b)))


def quat_conjugate(q: ArrayLike) -> np.ndarray:
    """The inverse rotation of unit ``q`` ([x, y, z, w])."""
    return np.array(quat_conjugate_floats(_floats4(q)))


def quat_from_rotvec(rotvec: ArrayLike) -> np.ndarray:
    """Rotation vector (axis * angle, rad) -> unit [x, y, z, w]."""
    rx, ry, rz = np.asarray(rotvec, dtype=np.float64).reshape(3).tolist()
    return np.array(quat_from_rotvec_floats(rx, ry, rz))


def quat_to_rotvec(q: ArrayLike) -> np.ndarray:
    """Axis * angle of the shortest rotation that unit [x, y, z, w] ``q`` represents (angle in
    [0, pi]: ``q`` and ``-q`` give the same vector)."""
    return np.array(quat_to_rotvec_floats(_floats4(q)))


def rotvec_between(q_from: ArrayLike, q_to: ArrayLike) -> np.ndarray:
    """The base-frame rotation vector that turns orientation ``q_from`` into ``q_to`` (both
    [x, y, z, w]): ``quat_to_rotvec(q_to * q_from^-1)``, the shortest way round."""
    delta = quat_multiply_floats(_floats4(q_to), quat_conjugate_floats(_floats4(q_from)))
    return np.array(quat_to_rotvec_floats(delta))


def quat_angle_rad(a: ArrayLike, b: ArrayLike) -> float:
    """Angle (rad, in [0, pi]) of the rotation taking ``a`` to ``b``; neither needs unit norm."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    d = abs(float(np.dot(a / np.linalg.norm(a), b / np.linalg.norm(b))))
    return 2.0 * math.acos(min(1.0, d))


def quat_z_axis(q: ArrayLike) -> np.ndarray:
    """Base-frame direction of the body's z axis (the tool axis) for unit [x, y, z, w] ``q``
    (shape [..., 4] -> [..., 3]; ``quat_z_axis_floats``' formula on every row)."""
    v = np.asarray(q, dtype=np.float64)
    x, y, z, w = v[..., 0], v[..., 1], v[..., 2], v[..., 3]
    return np.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], axis=-1)


def quat_to_matrix(q: ArrayLike) -> np.ndarray:
    """[x, y, z, w] (normalised here) -> 3x3 rotation matrix. Raises ``ValueError`` for a zero or
    non-finite quaternion."""
    v = np.asarray(q, dtype=np.float64).reshape(4)
    norm = float(np.linalg.norm(v))
    if not np.isfinite(norm) or norm < 1e-9:
        raise ValueError(f"quaternion {v.tolist()} has no direction (norm {norm}); expected [x, y, z, w]")
    x, y, z, w = v / norm
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def quat_from_matrix(rotation: ArrayLike) -> np.ndarray:
    """3x3 rotation matrix -> unit [x, y, z, w] with w >= 0. Shepperd's method: the largest of
    the trace and the diagonal terms picks the square root, so it stays well conditioned."""
    m = np.asarray(rotation, dtype=np.float64).reshape(3, 3)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2.0 * np.sqrt(trace + 1.0)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
    quat = np.array(q)
    quat /= np.linalg.norm(quat)
    return quat if quat[3] >= 0 else -quat
