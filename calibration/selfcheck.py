"""``pde calibrate selfcheck``: the whole tool on a simulated lab whose answer is known.

A D405-like camera with barrel distortion looks at the board in two sessions written exactly as
``collect`` writes them: as a wrist camera over a board on the table, and as the external camera
watching a board carried by the gripper. Intrinsics are calibrated from the wrist session's
images, then both hand-eye transforms from the images and robot poses; every figure is compared
with the truth. Run it after installing, or after changing the tool.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import msgspec
import numpy as np

from calibration import handeye, intrinsics
from calibration.board import BoardSpec
from calibration.poses import invert, make_transform, rotation_angle_deg
from calibration.results import Mount, SampleRecord, SampleSet, save_json
from calibration.synthetic import look_at_board, project_corners, render_board
from pde_contract.messages import CameraIntrinsics
from pde_contract.rotations import quat_from_matrix

CAMERA = CameraIntrinsics(
    width=640,
    height=480,
    fx=605.0,
    fy=603.0,
    cx=318.5,
    cy=243.0,
    distortion=[-0.11, 0.07, 0.0008, -0.0006, 0.0],
)
# The wrist camera: 6 cm off the flange axis, a few degrees off parallel to it.
T_TCP_CAM = make_transform(cv2.Rodrigues(np.array([0.05, -0.04, 0.03]))[0], [0.06, -0.01, 0.045])
# The external camera, 1.1 m in front of the robot looking back at the workspace.
T_BASE_EXTERNAL = make_transform(
    cv2.Rodrigues(np.array([0.0, -1.9, 0.0]))[0] @ cv2.Rodrigues(np.array([0.0, 0.0, 1.5708]))[0],
    [1.1, 0.05, 0.45],
)
# Face up on the table (its z, into the board, points down), and held by the gripper.
T_BASE_BOARD = make_transform(
    cv2.Rodrigues(np.array([0.0, 0.0, 0.2]))[0] @ cv2.Rodrigues(np.array([np.pi, 0.0, 0.0]))[0],
    [0.45, -0.06, 0.0],
)
T_TCP_BOARD = make_transform(cv2.Rodrigues(np.array([0.0, 0.0, 0.1]))[0], [-0.1, -0.06, 0.02])
# Pass marks: what a correct tool reaches on noise-free images with a dozen views.
MAX_FOCAL_ERROR_PERCENT = 0.5
MAX_RAY_DISPLACEMENT_PX = 1.0
MAX_HANDEYE_ERROR_MM = 1.0
MAX_HANDEYE_ERROR_DEG = 0.1


def board_views(
    n: int, seed: int, board: BoardSpec, whole: bool = True, max_tilt_rad: float = 0.55
) -> list[np.ndarray]:
    """T_cam_board for ``n`` views tilted about every axis that keep the whole board in the image,
    or (``whole=False``, for ChArUco) that push it against the image edges and corners."""
    rng = np.random.default_rng(seed)
    views: list[np.ndarray] = []
    reach = 1.0 if whole else 2.5
    while len(views) < n:
        tilt = np.array(
            [rng.uniform(-1, 1) * max_tilt_rad, rng.uniform(-1, 1) * max_tilt_rad, rng.uniform(-0.6, 0.6)]
        )
        offset = np.array([rng.uniform(-0.06, 0.06) * reach, rng.uniform(-0.04, 0.04) * reach, 0.0])
        view = look_at_board(board, rng.uniform(0.32, 0.42), tilt, offset)
        corners = project_corners(CAMERA, board, view)
        inside = np.all((corners > 40) & (corners < [CAMERA.width - 40, CAMERA.height - 40]), axis=1)
        # The whole board with a margin, as an operator frames a checkerboard; or a good part of it.
        if inside.all() if whole else 15 <= inside.sum() <= 0.8 * len(inside):
            views.append(view)
    return views


def robot_poses(mount: Mount, views: list[np.ndarray]) -> list[np.ndarray]:
    """T_base_tcp that produce each board view: the wrist camera over the board on the table
    (mount hand), or the gripper showing its board to the external camera (mount base)."""
    if mount == "hand":
        return [T_BASE_BOARD @ invert(v) @ invert(T_TCP_CAM) for v in views]
    return [T_BASE_EXTERNAL @ v @ invert(T_TCP_BOARD) for v in views]


def truth(mount: Mount) -> np.ndarray:
    return T_TCP_CAM if mount == "hand" else T_BASE_EXTERNAL


def write_session(
    directory: Path,
    camera: str,
    mount: Mount,
    views: list[np.ndarray],
    board: BoardSpec,
    image_noise: float = 0.0,
    seed: int = 0,
) -> Path:
    """Images (with Gaussian noise of ``image_noise`` grey levels) and samples.json, as
    ``collect`` writes them; returns the samples file."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sample_set = SampleSet(factory_intrinsics={camera: CAMERA})
    for index, (view, tcp) in enumerate(zip(views, robot_poses(mount, views), strict=True)):
        image = render_board(CAMERA, board, view).astype(np.float64)
        image += rng.normal(0.0, image_noise, image.shape) if image_noise > 0 else 0.0
        name = f"{camera}_{index:03d}.png"
        cv2.imwrite(str(directory / name), np.clip(np.round(image), 0, 255).astype(np.uint8))
        sample_set.samples.append(
            SampleRecord(
                index=index,
                tcp_position_m=tcp[:3, 3].tolist(),
                tcp_quat_xyzw=quat_from_matrix(tcp[:3, :3]).tolist(),
                images={camera: name},
            )
        )
    path = directory / "samples.json"
    save_json(sample_set, path)
    return path


class HandEyeCheck(msgspec.Struct, kw_only=True):
    mount: Mount
    method: str
    error_mm: float
    error_deg: float
    reprojection_rms_px: float | None


class SelfCheckReport(msgspec.Struct, kw_only=True):
    board: BoardSpec
    views: int
    image_noise: float
    fx_error_percent: float
    fy_error_percent: float
    cx_error_px: float
    cy_error_px: float
    max_ray_displacement_px: float  # calibrated vs true model over the image
    intrinsics_rms_px: float
    handeye: list[HandEyeCheck]
    passed: bool


def run(
    directory: Path, board: BoardSpec, views: int = 12, image_noise: float = 0.0, seed: int = 0
) -> SelfCheckReport:
    whole = board.kind == "checkerboard"
    hand = write_session(
        directory / "wrist", "wrist", "hand", board_views(views, seed, board, whole), board, image_noise, seed
    )
    base = write_session(
        directory / "external",
        "external",
        "base",
        board_views(views, seed + 1, board),
        board,
        image_noise,
        seed + 1,
    )
    detections, missed = intrinsics.detect_in_files(intrinsics.list_images(hand.parent), board)
    calibrated = intrinsics.calibrate(detections, board, camera="wrist", missed=missed)
    save_json(calibrated, directory / "intrinsics_wrist.json")
    camera = calibrated.to_camera_intrinsics()
    comparison = intrinsics.compare(camera, CAMERA)
    checks = []
    sessions: list[tuple[Mount, Path, str]] = [("hand", hand, "wrist"), ("base", base, "external")]
    for mount, samples, name in sessions:
        sample_set = msgspec.json.decode(samples.read_bytes(), type=SampleSet)
        result = handeye.calibrate_samples(samples, sample_set, name, mount, board, camera, "selfcheck")
        save_json(result, samples.parent / f"handeye_{name}.json")
        X, expected = result.matrix(), truth(mount)
        best = next(m for m in result.methods if m.method == result.method)
        checks.append(
            HandEyeCheck(
                mount=mount,
                method=result.method,
                error_mm=1000.0 * float(np.linalg.norm(X[:3, 3] - expected[:3, 3])),
                error_deg=rotation_angle_deg(X[:3, :3].T @ expected[:3, :3]),
                reprojection_rms_px=best.reprojection_rms_px,
            )
        )
    passed = (
        abs(comparison.d_fx_percent) <= MAX_FOCAL_ERROR_PERCENT
        and abs(comparison.d_fy_percent) <= MAX_FOCAL_ERROR_PERCENT
        and comparison.max_displacement_px <= MAX_RAY_DISPLACEMENT_PX
        and all(c.error_mm <= MAX_HANDEYE_ERROR_MM and c.error_deg <= MAX_HANDEYE_ERROR_DEG for c in checks)
    )
    return SelfCheckReport(
        board=board,
        views=views,
        image_noise=image_noise,
        fx_error_percent=comparison.d_fx_percent,
        fy_error_percent=comparison.d_fy_percent,
        cx_error_px=comparison.d_cx_px,
        cy_error_px=comparison.d_cy_px,
        max_ray_displacement_px=comparison.max_displacement_px,
        intrinsics_rms_px=calibrated.rms_px,
        handeye=checks,
        passed=passed,
    )
