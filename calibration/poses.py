"""Rigid transforms as 4x4 numpy arrays, and the wire's position + quaternion [x, y, z, w]
(quaternion maths: ``pde_contract.rotations``).

Naming: ``T_a_b`` maps points in frame ``b`` into frame ``a`` (the pose of ``b`` seen from ``a``).
"""

from __future__ import annotations

import cv2
import numpy as np
from numpy.typing import ArrayLike

from pde_contract.rotations import quat_to_matrix


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


def pose_from_position_quat(position_m: np.ndarray, quat_xyzw: np.ndarray) -> np.ndarray:
    return make_transform(quat_to_matrix(quat_xyzw), np.asarray(position_m, dtype=np.float64))


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
