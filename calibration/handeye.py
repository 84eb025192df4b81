"""Hand-eye calibration: where a camera sits relative to the robot.

- mount "hand" (eye-in-hand, the wrist camera): the board lies still on the table and the robot
  moves the camera; the result is ``T_tcp_camera``.
- mount "base" (eye-to-hand, the external camera): the board is fixed to the gripper and the robot
  shows it to the still camera; the result is ``T_base_camera``.

Every OpenCV method is run: the five of ``cv2.calibrateHandEye`` (Tsai, Park, Horaud, Andreff,
Daniilidis; for a fixed camera on the inverted robot poses) and the two robot-world/hand-eye ones of
``cv2.calibrateRobotWorldHandEye`` (Shah, Li). Each is judged the same way: with the camera pose
found, the board's pose in the frame where it is still (base for "hand", TCP for "base") should be
the same in every sample; its scatter (degrees, millimetres at the board origin) and the corner
reprojection error through the mean board pose are the residuals, and the method with the
smallest reprojection error is chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from calibration.board import BoardSpec, Detection, board_pose, camera_matrix, detect, distortion_vector
from calibration.poses import (
    invert,
    make_transform,
    mean_transform,
    pose_from_position_quat,
    rotation_angle_deg,
    rotation_axis,
)
from calibration.results import HandEyeCalibration, MethodResult, Mount, SampleSet
from pde_contract.messages import CameraIntrinsics
from pde_contract.rotations import quat_from_matrix

HAND_EYE_METHODS: dict[str, int] = {
    "tsai": cv2.CALIB_HAND_EYE_TSAI,
    "park": cv2.CALIB_HAND_EYE_PARK,
    "horaud": cv2.CALIB_HAND_EYE_HORAUD,
    "andreff": cv2.CALIB_HAND_EYE_ANDREFF,
    "daniilidis": cv2.CALIB_HAND_EYE_DANIILIDIS,
}
ROBOT_WORLD_METHODS: dict[str, int] = {
    "shah": cv2.CALIB_ROBOT_WORLD_HAND_EYE_SHAH,
    "li": cv2.CALIB_ROBOT_WORLD_HAND_EYE_LI,
}
METHODS = (*HAND_EYE_METHODS, *ROBOT_WORLD_METHODS)
_BASE_AXIS_NAMES = ("base x (roll)", "base y (pitch)", "base z (yaw)")


class HandEyeError(ValueError):
    """The samples cannot determine the camera pose; the message says which poses to add."""


@dataclass(frozen=True, slots=True)
class Diversity:
    n_samples: int
    rotation_span_deg: float  # largest orientation difference between two samples
    axis_spread: float  # second eigenvalue share of the relative rotation axes (0: one axis only)
    dominant_axis_base: np.ndarray


def pose_diversity(T_base_tcp: Sequence[np.ndarray], min_pair_angle_deg: float = 3.0) -> Diversity:
    rotations = [t[:3, :3] for t in T_base_tcp]
    span = 0.0
    scatter = np.zeros((3, 3))
    for i in range(len(rotations)):
        for j in range(i + 1, len(rotations)):
            relative = rotations[j] @ rotations[i].T  # base frame
            angle = rotation_angle_deg(relative)
            span = max(span, angle)
            if angle >= min_pair_angle_deg:
                axis = rotation_axis(relative)
                scatter += np.outer(axis, axis)
    if not scatter.any():
        return Diversity(len(rotations), span, 0.0, np.zeros(3))
    eigenvalues, eigenvectors = np.linalg.eigh(scatter)  # ascending
    shares = eigenvalues / eigenvalues.sum()
    return Diversity(len(rotations), span, float(shares[1]), eigenvectors[:, 2])


def check_diversity(
    T_base_tcp: Sequence[np.ndarray],
    min_samples: int = 5,
    min_rotation_span_deg: float = 15.0,
    min_axis_spread: float = 0.05,
) -> Diversity:
    """Refuse pose sets that cannot fix the camera pose: too few samples, too little rotation
    (translation is then unobservable), or rotations about one axis only (the offset along that
    axis is then unobservable)."""
    diversity = pose_diversity(T_base_tcp)
    advice = (
        "Add poses where the gripper is tilted by 15-30° about at least two different axes (e.g. "
        "pitch forward/back and roll left/right, plus some yaw), moving the TCP by 5-15 cm between "
        "them, with the whole board in the camera's view each time."
    )
    if diversity.n_samples < min_samples:
        raise HandEyeError(f"{diversity.n_samples} usable sample(s), need at least {min_samples}. {advice}")
    if diversity.rotation_span_deg < min_rotation_span_deg:
        raise HandEyeError(
            f"the gripper orientation varies by only {diversity.rotation_span_deg:.1f}° across the "
            f"samples (need ≥ {min_rotation_span_deg:.0f}°): the camera's position cannot be told "
            f"from pure translations. {advice}"
        )
    if diversity.axis_spread < min_axis_spread:
        axis = diversity.dominant_axis_base
        closest = _BASE_AXIS_NAMES[int(np.argmax(np.abs(axis)))]
        others = [name for k, name in enumerate(_BASE_AXIS_NAMES) if k != int(np.argmax(np.abs(axis)))]
        raise HandEyeError(
            "all orientation changes are about nearly one axis "
            f"({np.array2string(axis, precision=2)} in the base frame, close to {closest}; spread "
            f"{diversity.axis_spread:.3f} < {min_axis_spread}): the camera offset along it cannot be "
            f"found. Add poses rotated about {others[0]} and {others[1]} too. {advice}"
        )
    return diversity


def _split(transforms: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return [np.ascontiguousarray(t[:3, :3]) for t in transforms], [t[:3, 3].reshape(3, 1) for t in transforms]


def solve(
    method: str, mount: Mount, T_base_tcp: Sequence[np.ndarray], T_cam_board: Sequence[np.ndarray]
) -> np.ndarray:
    """The camera pose by one method: T_tcp_camera (mount hand) or T_base_camera (mount base)."""
    T_tcp_base = [invert(t) for t in T_base_tcp]
    if method in HAND_EYE_METHODS:
        # Fixed camera: the same equations with the robot poses inverted give camera-to-base.
        gripper = T_base_tcp if mount == "hand" else T_tcp_base
        rotation, translation = cv2.calibrateHandEye(
            *_split(gripper), *_split(T_cam_board), method=HAND_EYE_METHODS[method]
        )
        return make_transform(rotation, translation)
    if method in ROBOT_WORLD_METHODS:
        # A X = Z B with A = world->camera and B = base->gripper. Wrist camera: world = board.
        # Fixed camera: swap the roles of camera and board (the board rides on the gripper).
        world_to_cam = list(T_cam_board) if mount == "hand" else [invert(t) for t in T_cam_board]
        base_to_world_r, base_to_world_t, gripper_to_cam_r, gripper_to_cam_t = cv2.calibrateRobotWorldHandEye(
            *_split(world_to_cam), *_split(T_tcp_base), method=ROBOT_WORLD_METHODS[method]
        )
        if mount == "hand":
            return invert(make_transform(gripper_to_cam_r, gripper_to_cam_t))  # T_tcp_cam
        return invert(make_transform(base_to_world_r, base_to_world_t))  # T_base_cam
    raise HandEyeError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


def still_board_poses(
    mount: Mount, T_base_tcp: Sequence[np.ndarray], T_cam_board: Sequence[np.ndarray], X: np.ndarray
) -> list[np.ndarray]:
    """The board's pose in the frame where it does not move, one per sample: T_base_board
    (mount hand) or T_tcp_board (mount base). Identical for a perfect X and perfect data."""
    if mount == "hand":
        return [a @ X @ b for a, b in zip(T_base_tcp, T_cam_board, strict=True)]
    return [invert(a) @ X @ b for a, b in zip(T_base_tcp, T_cam_board, strict=True)]


def residuals(
    method: str,
    mount: Mount,
    X: np.ndarray,
    T_base_tcp: Sequence[np.ndarray],
    T_cam_board: Sequence[np.ndarray],
    board: BoardSpec | None = None,
    intrinsics: CameraIntrinsics | None = None,
    detections: Sequence[Detection] | None = None,
) -> tuple[MethodResult, np.ndarray]:
    still = still_board_poses(mount, T_base_tcp, T_cam_board, X)
    mean = mean_transform(still)
    rotation_deg = np.array([rotation_angle_deg(mean[:3, :3].T @ s[:3, :3]) for s in still])
    translation_mm = np.array([1000.0 * np.linalg.norm(s[:3, 3] - mean[:3, 3]) for s in still])
    reprojection = None
    if board is not None and intrinsics is not None and detections is not None:
        k, dist = camera_matrix(intrinsics), distortion_vector(intrinsics)
        squared: list[np.ndarray] = []
        for a, detection in zip(T_base_tcp, detections, strict=True):
            camera_pose = a @ X if mount == "hand" else invert(a) @ X  # in the board's still frame
            predicted = invert(camera_pose) @ mean
            rvec, _ = cv2.Rodrigues(np.ascontiguousarray(predicted[:3, :3]))
            projected, _ = cv2.projectPoints(detection.object_points(board), rvec, predicted[:3, 3], k, dist)
            squared.append(np.sum((projected.reshape(-1, 2) - detection.corners_px) ** 2, axis=1))
        reprojection = float(np.sqrt(np.mean(np.concatenate(squared))))
    result = MethodResult(
        method=method,
        transform=X.tolist(),
        rotation_rms_deg=float(np.sqrt(np.mean(rotation_deg**2))),
        rotation_max_deg=float(rotation_deg.max()),
        translation_rms_mm=float(np.sqrt(np.mean(translation_mm**2))),
        translation_max_mm=float(translation_mm.max()),
        reprojection_rms_px=reprojection,
    )
    return result, mean


def calibrate(
    camera: str,
    mount: Mount,
    T_base_tcp: Sequence[np.ndarray],
    T_cam_board: Sequence[np.ndarray],
    board: BoardSpec,
    intrinsics: CameraIntrinsics | None = None,
    detections: Sequence[Detection] | None = None,
    sample_names: Sequence[str] | None = None,
    rejected: dict[str, str] | None = None,
    intrinsics_source: str = "",
    methods: Sequence[str] = METHODS,
    min_samples: int = 5,
    min_rotation_span_deg: float = 15.0,
) -> HandEyeCalibration:
    if mount not in ("hand", "base"):
        raise HandEyeError(f"mount {mount!r}: use 'hand' (wrist camera) or 'base' (fixed camera)")
    if len(T_base_tcp) != len(T_cam_board):
        raise HandEyeError(f"{len(T_base_tcp)} robot poses but {len(T_cam_board)} board poses")
    diversity = check_diversity(T_base_tcp, min_samples, min_rotation_span_deg)
    names = list(sample_names or [str(i) for i in range(len(T_base_tcp))])
    results: list[MethodResult] = []
    still_by_method: dict[str, np.ndarray] = {}
    for method in methods:
        try:
            X = solve(method, mount, T_base_tcp, T_cam_board)
            if not np.all(np.isfinite(X)):
                raise HandEyeError("the solver returned NaN")
            result, still_by_method[method] = residuals(
                method, mount, X, T_base_tcp, T_cam_board, board, intrinsics, detections
            )
        except (cv2.error, HandEyeError, np.linalg.LinAlgError) as e:
            result = MethodResult(
                method=method, transform=[], rotation_rms_deg=None, rotation_max_deg=None,
                translation_rms_mm=None, translation_max_mm=None, reprojection_rms_px=None,
                error=str(e).strip().splitlines()[-1][:300],
            )  # fmt: skip
        results.append(result)
    ok = [r for r in results if not r.error]
    if not ok:
        raise HandEyeError("every method failed: " + "; ".join(f"{r.method}: {r.error}" for r in results))
    best = min(ok, key=_score)
    X = np.asarray(best.transform)
    warnings = []
    if len(T_base_tcp) < 10:
        warnings.append(f"only {len(T_base_tcp)} samples; 10-20 well spread poses give a steadier result")
    translation_rms_mm, rotation_rms_deg = best.translation_rms_mm or 0.0, best.rotation_rms_deg or 0.0
    if translation_rms_mm > 5.0 or rotation_rms_deg > 0.5:
        warnings.append(
            f"large residuals ({translation_rms_mm:.1f} mm, {rotation_rms_deg:.2f}° rms): "
            "check the intrinsics, the board's square size, that the board did not move, and that "
            "each image was taken with the robot at rest"
        )
    return HandEyeCalibration(
        camera=camera,
        mount=mount,
        frame="T_tcp_camera" if mount == "hand" else "T_base_camera",
        method=best.method,
        transform=X.tolist(),
        position_m=X[:3, 3].tolist(),
        quat_xyzw=quat_from_matrix(X[:3, :3]).tolist(),
        board_frame="T_base_board" if mount == "hand" else "T_tcp_board",
        board_transform=still_by_method[best.method].tolist(),
        methods=results,
        n_samples=len(T_base_tcp),
        rotation_span_deg=diversity.rotation_span_deg,
        samples_used=names,
        samples_rejected=dict(rejected or {}),
        intrinsics_source=intrinsics_source,
        board=board,
        warnings=warnings,
    )


def _score(result: MethodResult) -> float:
    if result.reprojection_rms_px is not None:
        return result.reprojection_rms_px
    return (result.translation_rms_mm or 0.0) + 10.0 * (result.rotation_rms_deg or 0.0)


def calibrate_samples(
    samples_path: Path,
    sample_set: SampleSet,
    camera: str,
    mount: Mount,
    board: BoardSpec,
    intrinsics: CameraIntrinsics,
    intrinsics_source: str,
    max_pnp_rms_px: float = 2.0,
    min_samples: int = 5,
    min_rotation_span_deg: float = 15.0,
) -> HandEyeCalibration:
    """Detect the board in each sample's image of ``camera``, find its pose, and calibrate."""
    T_base_tcp: list[np.ndarray] = []
    T_cam_board: list[np.ndarray] = []
    detections: list[Detection] = []
    names: list[str] = []
    rejected: dict[str, str] = {}
    for sample in sample_set.samples:
        name = f"sample {sample.index}"
        if camera not in sample.images:
            rejected[name] = f"no image from camera {camera!r} (has {sorted(sample.images)})"
            continue
        image_path = samples_path.parent / sample.images[camera]
        image = cv2.imread(str(image_path), cv2.IMREAD_GRAYSCALE)
        if image is None:
            rejected[name] = f"{image_path} is missing or not an image"
            continue
        if (image.shape[1], image.shape[0]) != (intrinsics.width, intrinsics.height):
            raise HandEyeError(
                f"{image_path} is {image.shape[1]}x{image.shape[0]} but the intrinsics are for "
                f"{intrinsics.width}x{intrinsics.height}; calibrate intrinsics at this resolution"
            )
        detection = detect(image, board, name=name)
        if detection is None:
            rejected[name] = f"no {board.describe()} found in {image_path.name}"
            continue
        pose = board_pose(detection, board, intrinsics)
        if pose.reprojection_rms_px > max_pnp_rms_px:
            rejected[name] = (
                f"board pose fits its corners to {pose.reprojection_rms_px:.2f} px only (> "
                f"{max_pnp_rms_px} px): blurred, or wrong intrinsics for this camera"
            )
            continue
        T_base_tcp.append(
            pose_from_position_quat(np.array(sample.tcp_position_m), np.array(sample.tcp_quat_xyzw))
        )
        T_cam_board.append(pose.T_cam_board)
        detections.append(detection)
        names.append(name)
    try:
        return calibrate(
            camera, mount, T_base_tcp, T_cam_board, board, intrinsics, detections, names, rejected,
            intrinsics_source, min_samples=min_samples, min_rotation_span_deg=min_rotation_span_deg,
        )  # fmt: skip
    except HandEyeError as e:
        if rejected:
            skipped = "; ".join(f"{k}: {v}" for k, v in list(rejected.items())[:5])
            raise HandEyeError(f"{e} ({len(rejected)} sample(s) unusable — {skipped})") from e
        raise
