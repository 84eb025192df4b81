"""Pictures of the board through a known pinhole camera with Brown-Conrady distortion, at known
poses: ground truth for the tests and for checking the tool on a machine without cameras.

Each output pixel is traced back: undistort it to a normalised ray, intersect the ray with the
board plane (the inverse of the plane's homography) and read the checker colour there, averaged
over the pixel's footprint on the board: the anti-aliased edges a real lens produces, which is what
sub-pixel corner refinement expects.
"""

from __future__ import annotations

import cv2
import msgspec
import numpy as np

from calibration.board import BoardSpec, camera_matrix, distortion_vector
from pde_contract.messages import CameraIntrinsics


def render_board(
    intrinsics: CameraIntrinsics,
    board: BoardSpec,
    T_cam_board: np.ndarray,
    margin_squares: float = 1.0,
    background: float = 90.0,
) -> np.ndarray:
    """A grey uint8 [height, width] image of the board at ``T_cam_board`` (board frame in the
    camera frame), with a white border ``margin_squares`` wide around the squares."""
    if board.kind == "charuco":
        return _render_texture(intrinsics, board, T_cam_board, margin_squares, background)
    bx, by, in_front = _board_coordinates(intrinsics, board, T_cam_board, supersample=1)
    # Box-filter each axis' square wave over the pixel's footprint on the board (in squares): the
    # anti-aliased edges a lens gives, without supersampling.
    dx_dv, dx_du = np.gradient(bx)
    dy_dv, dy_du = np.gradient(by)
    sx = _filtered_square_wave(bx, np.abs(dx_du) + np.abs(dx_dv))
    sy = _filtered_square_wave(by, np.abs(dy_du) + np.abs(dy_dv))
    black, white = 20.0, 235.0
    # Squares -1..cols-1 by -1..rows-1; (ix + iy) even is black, so the origin's diagonal is black.
    checker = (white + black) / 2 - (white - black) / 2 * sx * sy
    on_checker = (bx >= -1) & (bx <= board.cols) & (by >= -1) & (by <= board.rows)
    on_paper = (
        (bx >= -1 - margin_squares)
        & (bx <= board.cols + margin_squares)
        & (by >= -1 - margin_squares)
        & (by <= board.rows + margin_squares)
    )
    image = np.full(bx.shape, background)
    image[in_front & on_paper] = white
    inside = in_front & on_checker
    image[inside] = checker[inside]
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def _render_texture(
    intrinsics: CameraIntrinsics,
    board: BoardSpec,
    T_cam_board: np.ndarray,
    margin_squares: float,
    background: float,
    px_per_square: int = 64,
    supersample: int = 2,
) -> np.ndarray:
    """Any printed board (markers included): sample its image where each sub-pixel's ray meets
    the plane, then average the sub-pixels."""
    margin_px = round(margin_squares * px_per_square)
    texture = board.image(px_per_square, margin_px).astype(np.float32)
    bx, by, in_front = _board_coordinates(intrinsics, board, T_cam_board, supersample)
    # Board x = -1 (the outer edge of the squares) is texture column margin_px; centres at +0.5.
    map_x = (margin_px + (bx + 1.0) * px_per_square - 0.5).astype(np.float32)
    map_y = (margin_px + (by + 1.0) * px_per_square - 0.5).astype(np.float32)
    image = cv2.remap(
        texture, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=(background,)
    )
    image[~in_front] = background
    image = cv2.resize(image, (intrinsics.width, intrinsics.height), interpolation=cv2.INTER_AREA)
    # The printed black and white as a camera sees them (not pure 0 and 255).
    return np.clip(np.round(20.0 + image * (215.0 / 255.0)), 0, 255).astype(np.uint8)


def _board_coordinates(
    intrinsics: CameraIntrinsics, board: BoardSpec, T_cam_board: np.ndarray, supersample: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each (sub-)pixel's ray meets the board plane, in squares from the origin (x, y), and
    whether it meets it in front of the camera."""
    height, width = intrinsics.height * supersample, intrinsics.width * supersample
    rays = _pixel_rays(intrinsics, supersample)
    homography = np.column_stack([T_cam_board[:3, 0], T_cam_board[:3, 1], T_cam_board[:3, 3]])
    board_h = np.linalg.solve(homography, np.column_stack([rays, np.ones(len(rays))]).T).T
    in_front = (board_h[:, 2] > 0).reshape(height, width)
    depth = np.where(board_h[:, 2] > 0, board_h[:, 2], 1.0)
    bx = (board_h[:, 0] / depth / board.square_m).reshape(height, width)
    by = (board_h[:, 1] / depth / board.square_m).reshape(height, width)
    return bx, by, in_front


def _filtered_square_wave(x: np.ndarray, footprint: np.ndarray) -> np.ndarray:
    """+1 on even unit intervals, -1 on odd ones, averaged over a box ``footprint`` wide."""
    whole = np.floor(x)
    frac = x - whole
    sign = np.where(whole % 2 == 0, 1.0, -1.0)
    to_edge = np.minimum(frac, 1.0 - frac)
    return np.asarray(sign * np.clip(to_edge / np.maximum(footprint / 2, 1e-9), 0.0, 1.0))


_RAYS_CACHE: dict[bytes, np.ndarray] = {}


def _pixel_rays(intrinsics: CameraIntrinsics, supersample: int) -> np.ndarray:
    """Normalised undistorted rays of every (sub-)pixel centre; the same for every view of one
    camera, so computed once per sampling (undistorting every pixel is the slow part)."""
    key = msgspec.msgpack.encode(intrinsics) + bytes([supersample])
    if key not in _RAYS_CACHE:
        s = supersample
        # Sub-pixel centres: pixel i spans [i - 0.5, i + 0.5] in OpenCV's pixel-centre convention.
        us, vs = np.meshgrid(
            (np.arange(intrinsics.width * s) + 0.5) / s - 0.5,
            (np.arange(intrinsics.height * s) + 0.5) / s - 0.5,
        )
        pixels = np.stack([us.ravel(), vs.ravel()], axis=1).reshape(-1, 1, 2)
        criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 40, 1e-10)
        k, dist = camera_matrix(intrinsics), distortion_vector(intrinsics)
        if len(_RAYS_CACHE) >= 4:
            _RAYS_CACHE.clear()  # a few cameras at a time is all the callers need; bounds memory
        _RAYS_CACHE[key] = cv2.undistortPointsIter(pixels, k, dist, np.eye(3), np.eye(3), criteria).reshape(
            -1, 2
        )
    return _RAYS_CACHE[key]


def project_corners(intrinsics: CameraIntrinsics, board: BoardSpec, T_cam_board: np.ndarray) -> np.ndarray:
    """Where the inner corners really are in the image: [N, 2] (all of them, in id order)."""
    rvec, _ = cv2.Rodrigues(np.ascontiguousarray(T_cam_board[:3, :3]))
    projected, _ = cv2.projectPoints(
        board.object_points(),
        rvec,
        T_cam_board[:3, 3],
        camera_matrix(intrinsics),
        distortion_vector(intrinsics),
    )
    return np.asarray(projected.reshape(-1, 2))


def look_at_board(
    board: BoardSpec, distance_m: float, tilt_rvec: np.ndarray, offset_m: np.ndarray | None = None
) -> np.ndarray:
    """T_cam_board with the board's centre ``distance_m`` in front of the camera, turned by
    ``tilt_rvec`` about its centre and shifted by ``offset_m`` (camera frame)."""
    centre = np.array([(board.cols - 1) * board.square_m / 2, (board.rows - 1) * board.square_m / 2, 0.0])
    rotation, _ = cv2.Rodrigues(np.asarray(tilt_rvec, dtype=np.float64).reshape(3, 1))
    transform = np.eye(4)
    transform[:3, :3] = rotation
    position = np.array([0.0, 0.0, distance_m]) + (np.zeros(3) if offset_m is None else offset_m)
    transform[:3, 3] = position - rotation @ centre
    return transform
