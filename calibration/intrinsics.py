"""Camera intrinsics from views of the checkerboard (Zhang's method, ``cv2.calibrateCamera``).

Views whose own reprojection error stands out (a blurred frame, a board that moved during the
exposure, a wrong corner order) are dropped one at a time, worst first, and the fit is redone:
one bad view otherwise pulls every parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import cv2
import msgspec
import numpy as np

from calibration.board import (
    MIN_CHARUCO_CORNERS,
    BoardSpec,
    Detection,
    camera_matrix,
    detect,
    distortion_vector,
)
from calibration.results import IntrinsicsCalibration, ViewError
from pde_contract.messages import CameraIntrinsics

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
COVERAGE_GRID = (8, 6)


class IntrinsicsError(ValueError):
    """Calibration is impossible or untrustworthy with these views; the message says what to add."""


def list_images(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise IntrinsicsError(f"{directory} is not a directory of images")
    return sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def detect_in_files(paths: Iterable[Path], board: BoardSpec) -> tuple[list[Detection], dict[str, str]]:
    """Detections, and for every image without one the reason."""
    detections: list[Detection] = []
    missed: dict[str, str] = {}
    sizes: set[tuple[int, int]] = set()
    for path in paths:
        image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
        if image is None:
            missed[path.name] = "not a readable image"
            continue
        sizes.add((image.shape[1], image.shape[0]))
        detection = detect(image, board, name=path.name)
        if detection is None:
            whole = "all of it" if board.kind == "checkerboard" else f"≥ {MIN_CHARUCO_CORNERS} corners"
            missed[path.name] = f"no {board.describe()} found ({whole} must be in view, sharp, not glared)"
        else:
            detections.append(detection)
    if len(sizes) > 1:
        raise IntrinsicsError(
            f"images have different sizes {sorted(sizes)}; calibrate one camera at one resolution per run"
        )
    return detections, missed


def coverage_fraction(detections: Sequence[Detection]) -> float:
    width, height = detections[0].image_size
    cols, rows = COVERAGE_GRID
    hit = np.zeros((rows, cols), bool)
    for detection in detections:
        cells_x = np.clip((detection.corners_px[:, 0] / width * cols).astype(int), 0, cols - 1)
        cells_y = np.clip((detection.corners_px[:, 1] / height * rows).astype(int), 0, rows - 1)
        hit[cells_y, cells_x] = True
    return float(hit.mean())


def calibrate(
    detections: Sequence[Detection],
    board: BoardSpec,
    camera: str,
    serial: str = "",
    missed: dict[str, str] | None = None,
    min_views: int = 6,
    max_view_rms_px: float = 1.0,
    outlier_factor: float = 3.0,
    fit_k3: bool = False,
) -> IntrinsicsCalibration:
    """Fit fx fy cx cy and k1 k2 p1 p2 (k3 too with ``fit_k3``; it is poorly constrained unless
    the board reaches the image corners). A view is rejected when its RMS error exceeds both
    ``max_view_rms_px`` and ``outlier_factor`` times the median view's."""
    missed = dict(missed or {})
    if len(detections) < min_views:
        raise IntrinsicsError(
            f"the board was found in {len(detections)} view(s), need at least {min_views} "
            f"(10-20 is better){_missed_text(missed)}. Take views with the whole board in sight: "
            "tilted ±30° left/right and up/down, near and far, and near each image corner."
        )
    width, height = detections[0].image_size
    flags = 0 if fit_k3 else cv2.CALIB_FIX_K3
    used = list(range(len(detections)))
    rejected: dict[int, tuple[float, str]] = {}
    while True:
        fit = _fit([detections[i] for i in used], board, (width, height), flags)
        rms, k, dist, std, view_errors = fit
        median = float(np.median(view_errors))
        threshold = max(max_view_rms_px, outlier_factor * median)
        worst = int(np.argmax(view_errors))
        if view_errors[worst] <= threshold:
            break
        if len(used) - 1 < min_views:
            raise IntrinsicsError(
                f"view {detections[used[worst]].name} has a reprojection error of "
                f"{view_errors[worst]:.2f} px (limit {threshold:.2f} px) and dropping it leaves fewer "
                f"than {min_views} views; retake blurred views with the board and camera still, and "
                "check the board is flat and its square size right"
            )
        index = used.pop(worst)
        rejected[index] = (
            float(view_errors[worst]),
            f"reprojection error {view_errors[worst]:.2f} px > {threshold:.2f} px (limit: max of "
            f"{max_view_rms_px} px and {outlier_factor}x the median {median:.2f} px): blurred, "
            "board moving or bent; dropped",
        )
    errors_by_index = dict(zip(used, (float(e) for e in view_errors), strict=True))
    views = [
        ViewError(name=d.name, rms_px=errors_by_index[i], used=True)
        if i in errors_by_index
        else ViewError(name=d.name, rms_px=rejected[i][0], used=False, reason=rejected[i][1])
        for i, d in enumerate(detections)
    ]
    views += [
        ViewError(name=name, rms_px=float("nan"), used=False, reason=why) for name, why in missed.items()
    ]
    coverage = coverage_fraction([detections[i] for i in used])
    warnings = []
    if coverage < 0.6:
        warnings.append(
            f"the corners cover only {coverage:.0%} of the image (8x6 cells); distortion is "
            "extrapolated elsewhere: add views with the board near the image edges and corners"
        )
    if len(used) < 10:
        warnings.append(f"only {len(used)} views used; 10-20 give steadier estimates")
    return IntrinsicsCalibration(
        camera=camera,
        serial=serial,
        width=width,
        height=height,
        fx=float(k[0, 0]),
        fy=float(k[1, 1]),
        cx=float(k[0, 2]),
        cy=float(k[1, 2]),
        distortion=[float(v) for v in dist.ravel()[:5]],
        rms_px=float(rms),
        std_fx_fy_cx_cy=[float(v) for v in std.ravel()[:4]],
        views=views,
        board=board,
        coverage_fraction=coverage,
        warnings=warnings,
    )


def _fit(
    detections: Sequence[Detection], board: BoardSpec, image_size: tuple[int, int], flags: int
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    criteria = (cv2.TERM_CRITERIA_COUNT + cv2.TERM_CRITERIA_EPS, 100, 1e-10)
    rms, k, dist, _, _, std_intrinsics, _, per_view = cv2.calibrateCameraExtended(
        [d.object_points(board) for d in detections],
        [d.corners_px.reshape(-1, 1, 2) for d in detections],
        image_size,
        np.zeros((3, 3)),  # no initial guess: OpenCV starts from the homographies
        np.zeros(5),
        flags=flags,
        criteria=criteria,
    )
    return float(rms), k, dist, std_intrinsics, per_view.ravel()


def _missed_text(missed: dict[str, str]) -> str:
    if not missed:
        return ""
    shown = "; ".join(f"{name}: {why}" for name, why in list(missed.items())[:5])
    more = f" (and {len(missed) - 5} more)" if len(missed) > 5 else ""
    return f" ({len(missed)} image(s) without it — {shown}{more})"


class IntrinsicsComparison(msgspec.Struct, kw_only=True):
    """Calibrated minus reference (e.g. the factory values the RealSense reports)."""

    d_fx_px: float
    d_fy_px: float
    d_fx_percent: float
    d_fy_percent: float
    d_cx_px: float
    d_cy_px: float
    # Where the two models put the same ray, over a grid of the image: the figure that matters.
    mean_displacement_px: float
    max_displacement_px: float


def compare(calibrated: CameraIntrinsics, reference: CameraIntrinsics) -> IntrinsicsComparison:
    if (calibrated.width, calibrated.height) != (reference.width, reference.height):
        raise IntrinsicsError(
            f"cannot compare {calibrated.width}x{calibrated.height} with "
            f"{reference.width}x{reference.height} intrinsics; use the factory values of the "
            "stream resolution that was calibrated"
        )
    us, vs = np.meshgrid(np.linspace(0, calibrated.width - 1, 33), np.linspace(0, calibrated.height - 1, 25))
    pixels = np.stack([us.ravel(), vs.ravel()], axis=1).reshape(-1, 1, 2)
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 40, 1e-10)
    rays = cv2.undistortPointsIter(
        pixels, camera_matrix(calibrated), distortion_vector(calibrated), np.eye(3), np.eye(3), criteria
    ).reshape(-1, 2)
    points = np.column_stack([rays, np.ones(len(rays))])
    reprojected, _ = cv2.projectPoints(
        points, np.zeros(3), np.zeros(3), camera_matrix(reference), distortion_vector(reference)
    )
    displacement = np.linalg.norm(reprojected.reshape(-1, 2) - pixels.reshape(-1, 2), axis=1)
    return IntrinsicsComparison(
        d_fx_px=calibrated.fx - reference.fx,
        d_fy_px=calibrated.fy - reference.fy,
        d_fx_percent=100.0 * (calibrated.fx - reference.fx) / reference.fx,
        d_fy_percent=100.0 * (calibrated.fy - reference.fy) / reference.fy,
        d_cx_px=calibrated.cx - reference.cx,
        d_cy_px=calibrated.cy - reference.cy,
        mean_displacement_px=float(displacement.mean()),
        max_displacement_px=float(displacement.max()),
    )
