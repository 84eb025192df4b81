"""Ground-truth scenes for the calibration tests: a known camera, board and robot poses."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from calibration.board import BoardSpec
from calibration.poses import invert, make_transform, matrix_to_quat_xyzw
from calibration.results import SampleRecord, SampleSet, save_json
from calibration.synthetic import look_at_board, render_board
from pde_contract.messages import CameraIntrinsics

BOARD = BoardSpec(cols=9, rows=6, square_m=0.025)
# A D405-like wrist camera at 640x480 with visible barrel distortion.
CAMERA = CameraIntrinsics(
    width=640,
    height=480,
    fx=605.0,
    fy=603.0,
    cx=318.5,
    cy=243.0,
    distortion=[-0.11, 0.07, 0.0008, -0.0006, 0.0],
)
# T_tcp_camera of the wrist camera: 6 cm off the flange axis, a few degrees off parallel.
T_TCP_CAM = make_transform(cv2.Rodrigues(np.array([0.05, -0.04, 0.03]))[0], [0.06, -0.01, 0.045])
# The external camera, 1 m in front of the robot looking back at the workspace.
T_BASE_EXTERNAL = make_transform(
    cv2.Rodrigues(np.array([0.0, -1.9, 0.0]))[0] @ cv2.Rodrigues(np.array([0.0, 0.0, 1.5708]))[0],
    [1.1, 0.05, 0.45],
)
# Face up on the table: the board's z (into the board) points down.
T_BASE_BOARD = make_transform(
    cv2.Rodrigues(np.array([0.0, 0.0, 0.2]))[0] @ cv2.Rodrigues(np.array([np.pi, 0.0, 0.0]))[0],
    [0.45, -0.06, 0.0],
)
T_TCP_BOARD = make_transform(cv2.Rodrigues(np.array([0.0, 0.0, 0.1]))[0], [-0.1, -0.06, 0.02])


def board_views(n: int, seed: int, max_tilt_rad: float = 0.55) -> list[np.ndarray]:
    """T_cam_board for ``n`` views that keep the whole board in the image, tilted about every axis."""
    rng = np.random.default_rng(seed)
    views = []
    for _ in range(n):
        tilt = np.array(
            [rng.uniform(-1, 1) * max_tilt_rad, rng.uniform(-1, 1) * max_tilt_rad, rng.uniform(-0.6, 0.6)]
        )
        offset = np.array([rng.uniform(-0.06, 0.06), rng.uniform(-0.04, 0.04), 0.0])
        views.append(look_at_board(BOARD, rng.uniform(0.32, 0.42), tilt, offset))
    return views


def robot_poses(mount: str, views: list[np.ndarray]) -> list[np.ndarray]:
    """T_base_tcp that produce each board view: wrist camera over a board on the table (hand), or
    the gripper showing its board to the external camera (base)."""
    if mount == "hand":
        return [T_BASE_BOARD @ invert(v) @ invert(T_TCP_CAM) for v in views]
    return [T_BASE_EXTERNAL @ v @ invert(T_TCP_BOARD) for v in views]


def truth(mount: str) -> np.ndarray:
    return T_TCP_CAM if mount == "hand" else T_BASE_EXTERNAL


def perturb(transform: np.ndarray, rng: np.random.Generator, sigma_mm: float, sigma_deg: float) -> np.ndarray:
    axis = rng.normal(size=3)
    rotation, _ = cv2.Rodrigues(axis / np.linalg.norm(axis) * np.radians(rng.normal(0.0, sigma_deg)))
    return make_transform(
        rotation @ transform[:3, :3], transform[:3, 3] + rng.normal(0.0, sigma_mm / 1000, 3)
    )


def write_session(directory: Path, camera: str, mount: str, views: list[np.ndarray]) -> Path:
    """Images and samples.json as ``pde calibrate collect`` writes them."""
    directory.mkdir(parents=True, exist_ok=True)
    sample_set = SampleSet(factory_intrinsics={camera: CAMERA})
    for index, (view, tcp) in enumerate(zip(views, robot_poses(mount, views), strict=True)):
        name = f"{camera}_{index:03d}.png"
        cv2.imwrite(str(directory / name), render_board(CAMERA, BOARD, view))
        sample_set.samples.append(
            SampleRecord(
                index=index,
                tcp_position_m=tcp[:3, 3].tolist(),
                tcp_quat_xyzw=matrix_to_quat_xyzw(tcp[:3, :3]).tolist(),
                images={camera: name},
            )
        )
    path = directory / "samples.json"
    save_json(sample_set, path)
    return path
