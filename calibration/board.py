"""The calibration target: a printed checkerboard or ChArUco board, its detection and its pose.

Board frame: origin at the first inner corner, x along a row of ``cols`` inner corners, y along a
column of ``rows`` inner corners, z into the board. The square diagonal to the origin inside the
board (between the first two rows and columns of inner corners) is black.

- checkerboard: every corner must be in view. Inner-corner counts must be one odd and one even
  (e.g. 9x6): the board then looks different turned by 180°, which lets the detector's order be
  fixed — a board that can be read both ways would flip the hand-eye result.
- ChArUco (``cv2.aruco``): a checkerboard with ArUco markers in its white squares (OpenCV's
  ``CharucoBoard`` layout, the same squares as the checkerboard). Each corner is identified by
  the markers around it, so a partial view counts: views that reach the image corners, where
  distortion is strongest, become possible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import cv2
import msgspec
import numpy as np

from calibration.poses import from_rvec_tvec
from pde_contract.messages import CameraIntrinsics


class BoardError(ValueError):
    """The board description is unusable; the message says how to fix it."""


BoardKind = Literal["checkerboard", "charuco"]
MIN_CHARUCO_CORNERS = 8  # fewer corners pin a view's pose down poorly


class BoardSpec(msgspec.Struct, frozen=True, kw_only=True):
    kind: BoardKind = "checkerboard"
    cols: int = 9  # inner corners along x
    rows: int = 6  # inner corners along y
    square_m: float = 0.025
    marker_m: float = 0.0  # ChArUco marker side
    dictionary: str = "DICT_5X5_100"  # ChArUco marker dictionary (a cv2.aruco name)

    def __post_init__(self) -> None:
        if self.cols < 3 or self.rows < 3:
            raise BoardError(f"board {self.cols}x{self.rows}: need at least 3x3 inner corners")
        if self.kind == "charuco":
            self._check_charuco()
        elif (self.cols + self.rows) % 2 == 0:
            raise BoardError(
                f"board {self.cols}x{self.rows} inner corners looks the same turned by 180°, so its "
                "orientation is ambiguous; use one odd and one even count (e.g. 9x6, 7x4)"
            )
        if not 0.001 <= self.square_m <= 1.0:
            raise BoardError(f"square size {self.square_m} m is implausible; give it in metres (0.025)")

    def _check_charuco(self) -> None:
        if not hasattr(cv2, "aruco"):
            raise BoardError("this OpenCV build has no cv2.aruco; use a checkerboard")
        if not 0.0 < self.marker_m < self.square_m:
            raise BoardError(
                f"ChArUco marker side {self.marker_m * 1000:.1f} mm must be positive and smaller than "
                f"the square ({self.square_m * 1000:.1f} mm); typically 70-80% of it"
            )
        dictionary_id = getattr(cv2.aruco, self.dictionary, None)
        if not self.dictionary.startswith("DICT_") or not isinstance(dictionary_id, int):
            raise BoardError(f"unknown ArUco dictionary {self.dictionary!r}; e.g. DICT_5X5_100, DICT_4X4_50")
        markers = ((self.cols + 1) * (self.rows + 1)) // 2
        available = len(cv2.aruco.getPredefinedDictionary(dictionary_id).bytesList)
        if markers > available:
            raise BoardError(f"{self.dictionary} has {available} markers, the board needs {markers}")

    @classmethod
    def parse(
        cls, text: str, square_mm: float, charuco: bool = False, marker_mm: float = 0.0, dictionary: str = ""
    ) -> BoardSpec:
        """``"9x6"`` (inner corners) and the printed square (and marker) size in millimetres."""
        try:
            cols_text, rows_text = text.lower().split("x")
            cols, rows = int(cols_text), int(rows_text)
        except ValueError as e:
            raise BoardError(f"board {text!r}: expected COLSxROWS inner corners, e.g. 9x6") from e
        if not charuco:
            return cls(cols=cols, rows=rows, square_m=square_mm / 1000.0)
        return cls(
            kind="charuco",
            cols=cols,
            rows=rows,
            square_m=square_mm / 1000.0,
            marker_m=(marker_mm or 0.75 * square_mm) / 1000.0,
            dictionary=dictionary or "DICT_5X5_100",
        )

    def charuco_board(self) -> cv2.aruco.CharucoBoard:
        dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, self.dictionary))
        return cv2.aruco.CharucoBoard(
            (self.cols + 1, self.rows + 1), self.square_m, self.marker_m, dictionary
        )

    def image(self, px_per_square: int, margin_px: int) -> np.ndarray:
        """The board to print (grey uint8): squares ``-1..cols-1`` by ``-1..rows-1`` and a white
        margin."""
        size = (
            (self.cols + 1) * px_per_square + 2 * margin_px,
            (self.rows + 1) * px_per_square + 2 * margin_px,
        )
        if self.kind == "charuco":
            return np.asarray(self.charuco_board().generateImage(size, marginSize=margin_px))
        squares = (
            np.indices((self.rows + 1, self.cols + 1)).sum(axis=0) % 2
        )  # 0 (black) at the origin's diagonal
        checker = np.kron(squares, np.ones((px_per_square, px_per_square))).astype(np.uint8) * 255
        return np.pad(checker, margin_px, constant_values=255)

    def describe(self) -> str:
        if self.kind == "charuco":
            return f"{self.cols}x{self.rows} ChArUco board ({self.dictionary})"
        return f"{self.cols}x{self.rows} checkerboard"

    @property
    def pattern_size(self) -> tuple[int, int]:
        return (self.cols, self.rows)

    @property
    def n_corners(self) -> int:
        return self.cols * self.rows

    def object_points(self) -> np.ndarray:
        """[N, 3] float32 corner positions in the board frame, in the detector's order (row-major)."""
        grid = np.mgrid[0 : self.cols, 0 : self.rows].T.reshape(-1, 2)
        points = np.zeros((self.n_corners, 3), np.float32)
        points[:, :2] = grid * self.square_m
        return points


@dataclass(frozen=True, slots=True)
class Detection:
    """Inner corners of one view: all of them in ``BoardSpec.object_points`` order, or (ChArUco)
    those whose indices are in ``ids``."""

    name: str  # image file name or sample id
    corners_px: np.ndarray  # [N, 2] float32
    image_size: tuple[int, int]  # (width, height)
    ids: np.ndarray | None = None  # [N] int, None: every corner

    def object_points(self, board: BoardSpec) -> np.ndarray:
        points = board.object_points()
        return points if self.ids is None else np.ascontiguousarray(points[self.ids])


def to_gray(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        return image
    return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)


def detect(image: np.ndarray, board: BoardSpec, name: str = "") -> Detection | None:
    """Find the board's inner corners with sub-pixel refinement; None when the whole board is not
    visible (checkerboard: every corner is needed to know which is which; ChArUco: fewer than
    ``MIN_CHARUCO_CORNERS`` found)."""
    gray = to_gray(image)
    if board.kind == "charuco":
        return _detect_charuco(gray, board, name)
    flags = cv2.CALIB_CB_ADAPTIVE_THRESH | cv2.CALIB_CB_NORMALIZE_IMAGE
    found, corners = cv2.findChessboardCorners(gray, board.pattern_size, flags=flags)
    if not found or corners is None or len(corners) != board.n_corners:
        return None
    # Half the smallest corner spacing bounds the search window, so it never reaches the next corner.
    grid = corners.reshape(board.rows, board.cols, 2)
    spacing = min(
        float(np.linalg.norm(np.diff(grid, axis=1), axis=2).min()),
        float(np.linalg.norm(np.diff(grid, axis=0), axis=2).min()),
    )
    half = int(np.clip(spacing / 2.0 - 1.0, 2, 11))
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_COUNT, 50, 1e-3)
    corners = cv2.cornerSubPix(gray, corners, (half, half), (-1, -1), criteria)
    corners = corners.reshape(-1, 2)
    if _origin_square_is_white(gray, corners, board):
        corners = corners[::-1].copy()  # the detector started at the far corner: turn by 180°
    return Detection(
        name=name, corners_px=corners.astype(np.float32), image_size=(int(gray.shape[1]), int(gray.shape[0]))
    )


def _detect_charuco(gray: np.ndarray, board: BoardSpec, name: str) -> Detection | None:
    detector = cv2.aruco.CharucoDetector(board.charuco_board())
    corners, ids, _, _ = detector.detectBoard(gray)
    if corners is None or ids is None or len(ids) < MIN_CHARUCO_CORNERS:
        return None
    ids_flat = ids.ravel()
    if len(np.unique(ids_flat % board.cols)) < 2 or len(np.unique(ids_flat // board.cols)) < 2:
        return None  # corners along one line: no pose from them
    # detectBoard interpolates corners from the markers' homographies; refine them on the image.
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_COUNT, 50, 1e-3)
    corners = cv2.cornerSubPix(gray, corners.astype(np.float32), (5, 5), (-1, -1), criteria)
    order = np.argsort(ids.ravel())
    return Detection(
        name=name,
        corners_px=corners.reshape(-1, 2)[order].astype(np.float32),
        image_size=(int(gray.shape[1]), int(gray.shape[0])),
        ids=ids.ravel()[order].astype(np.int64),
    )


def _square_mean(gray: np.ndarray, quad: np.ndarray) -> float:
    """Mean intensity in the middle of a square (the quad shrunk to half around its centre)."""
    centre = quad.mean(axis=0)
    inner = (centre + 0.5 * (quad - centre)).astype(np.int32)
    mask = np.zeros(gray.shape, np.uint8)
    cv2.fillConvexPoly(mask, inner, (1,))
    return float(cv2.mean(gray, mask=mask)[0])


def _origin_square_is_white(gray: np.ndarray, corners: np.ndarray, board: BoardSpec) -> bool:
    grid = corners.reshape(board.rows, board.cols, 2)
    first = np.array([grid[0, 0], grid[0, 1], grid[1, 1], grid[1, 0]])
    last = np.array([grid[-1, -1], grid[-1, -2], grid[-2, -2], grid[-2, -1]])
    return _square_mean(gray, first) > _square_mean(gray, last)


def camera_matrix(intrinsics: CameraIntrinsics) -> np.ndarray:
    return np.array([[intrinsics.fx, 0.0, intrinsics.cx], [0.0, intrinsics.fy, intrinsics.cy], [0, 0, 1]])


def distortion_vector(intrinsics: CameraIntrinsics) -> np.ndarray:
    return np.asarray(intrinsics.distortion or [0.0] * 5, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class BoardPose:
    T_cam_board: np.ndarray  # [4, 4]
    reprojection_rms_px: float


def board_pose(detection: Detection, board: BoardSpec, intrinsics: CameraIntrinsics) -> BoardPose:
    """The board's pose in the camera frame: IPPE (made for planar targets) refined by
    Levenberg-Marquardt on the reprojection error."""
    k, dist = camera_matrix(intrinsics), distortion_vector(intrinsics)
    object_points = detection.object_points(board)
    ok, rvec, tvec = cv2.solvePnP(object_points, detection.corners_px, k, dist, flags=cv2.SOLVEPNP_IPPE)
    if not ok:
        raise BoardError(f"{detection.name}: solvePnP failed; is the board flat and fully visible?")
    rvec, tvec = cv2.solvePnPRefineLM(object_points, detection.corners_px, k, dist, rvec, tvec)
    projected, _ = cv2.projectPoints(object_points, rvec, tvec, k, dist)
    error = projected.reshape(-1, 2) - detection.corners_px
    rms = float(np.sqrt(np.mean(np.sum(error**2, axis=1))))
    return BoardPose(T_cam_board=from_rvec_tvec(rvec, tvec), reprojection_rms_px=rms)
