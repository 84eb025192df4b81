"""Rigid transforms as 4x4 numpy arrays, and the wire's position + quaternion [x, y, z, w].

Naming: ``T_a_b`` maps points in frame ``b`` into frame ``a`` (the pose of ``b`` seen from ``a``).
"""

from __future__ import annotations

import cv2
import numpy as np
from numpy.typing import ArrayLike


def make_transform(rotation: ArrayLike, translation_m: ArrayLike) -> np.ndarray:
    transform = np.eye(4)
    transform[:3, :3] = np.asarray(rotation, dtype=np.float64).reshape(3, 3)
    transform[:3, 3] = np.asarray(translation_m, dtype=np.float64).reshape(3)
    return transform


def invert(transform: np.ndarray) -> np.ndarray:
    rotation, translation = transform[:3, :3], transform[:3, 3]
    return make_transform(rotation.T, -rotation.T @ translation)


def from_rvec_tvec(rvec: np.ndarray, tvec: np.ndarray) -> np.ndarray:
    rotation, _ = cv2.Rodrigues(np.asarray(rvec, dtype=np.float64).reshape(3, 1))
    return make_transform(rotation, np.asarray(tvec, dtype=np.float64).reshape(3))


def to_rvec_tvec(transform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rvec, _ = cv2.Rodrigues(np.ascontiguousarray(transform[:3, :3]))
    return rvec.reshape(3), transform[:3, 3].copy()


def quat_xyzw_to_matrix(quat_xyzw: np.ndarray) -> np.ndarray:
    q = np.asarray(quat_xyzw, dtype=np.float64).reshape(4)
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm < 1e-9:
        raise ValueError(f"quaternion {q.tolist()} has no direction (norm {norm}); expected [x, y, z, w]")
    x, y, z, w = q / norm
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quat_xyzw(rotation: np.ndarray) -> np.ndarray:
    """Shepperd's method: pick the largest diagonal term so the square root is well conditioned."""
    m = np.asarray(rotation, dtype=np.float64)
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


def pose_from_position_quat(position_m: np.ndarray, quat_xyzw: np.ndarray) -> np.ndarray:
    return make_transform(quat_xyzw_to_matrix(quat_xyzw), np.asarray(position_m, dtype=np.float64))


def rotation_angle_deg(rotation: np.ndarray) -> float:
    cos = (float(np.trace(rotation)) - 1.0) / 2.0
    return float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))


def rotation_axis(rotation: np.ndarray) -> np.ndarray:
    """Unit axis of a rotation (zero vector for the identity)."""
    rvec, _ = cv2.Rodrigues(np.ascontiguousarray(rotation, dtype=np.float64))
    angle = float(np.linalg.norm(rvec))
    return rvec.reshape(3) / angle if angle > 1e-12 else np.zeros(3)


def mean_transform(transforms: list[np.ndarray]) -> np.ndarray:
    """Chordal mean: project the summed rotation matrices back onto SO(3); mean translation."""
    rotations = np.stack([t[:3, :3] for t in transforms])
    u, _, vt = np.linalg.svd(rotations.sum(axis=0))
    rotation = u @ vt
    if np.linalg.det(rotation) < 0:
        u[:, -1] *= -1
        rotation = u @ vt
    return make_transform(rotation, np.mean([t[:3, 3] for t in transforms], axis=0))


def random_rotation(rng: np.random.Generator, max_angle_deg: float) -> np.ndarray:
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = np.radians(rng.uniform(-max_angle_deg, max_angle_deg))
    rotation, _ = cv2.Rodrigues(axis * angle)
    return np.asarray(rotation)
