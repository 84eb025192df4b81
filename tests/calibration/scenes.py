"""Ground-truth scenes for the calibration tests: the self-check's known camera, board and robot
poses (calibration/selfcheck.py), with the tests' default board."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from calibration import selfcheck
from calibration.board import BoardSpec
from calibration.poses import make_transform
from calibration.results import Mount
from calibration.selfcheck import CAMERA, T_BASE_EXTERNAL, T_TCP_CAM, robot_poses, truth

BOARD = BoardSpec(cols=9, rows=6, square_m=0.025)
CHARUCO = BoardSpec.parse("9x6", 25.0, charuco=True)

__all__ = ["BOARD", "CAMERA", "CHARUCO", "T_BASE_EXTERNAL", "T_TCP_CAM", "robot_poses", "truth"]


def board_views(n: int, seed: int, board: BoardSpec = BOARD, whole: bool = True) -> list[np.ndarray]:
    return selfcheck.board_views(n, seed, board, whole)


def write_session(
    directory: Path, camera: str, mount: Mount, views: list[np.ndarray], board: BoardSpec = BOARD
) -> Path:
    return selfcheck.write_session(directory, camera, mount, views, board)


def perturb(transform: np.ndarray, rng: np.random.Generator, sigma_mm: float, sigma_deg: float) -> np.ndarray:
    """The transform moved by Gaussian noise: ``sigma_mm`` per axis, ``sigma_deg`` about a random axis."""
    axis = rng.normal(size=3)
    rotation, _ = cv2.Rodrigues(axis / np.linalg.norm(axis) * np.radians(rng.normal(0.0, sigma_deg)))
    return make_transform(
        rotation @ transform[:3, :3], transform[:3, 3] + rng.normal(0.0, sigma_mm / 1000, 3)
    )
