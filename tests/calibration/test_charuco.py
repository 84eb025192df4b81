"""ChArUco boards: partial views, intrinsics from views reaching the image corners, hand-eye, and
the printable board images of both kinds."""

from __future__ import annotations

from pathlib import Path

import cv2
import msgspec
import numpy as np
import pytest

from calibration import intrinsics
from calibration.board import BoardError, BoardSpec, detect
from calibration.main import main
from calibration.poses import rotation_angle_deg
from calibration.results import HandEyeCalibration, load_json
from calibration.synthetic import look_at_board, project_corners, render_board
from tests.calibration.scenes import BOARD, CAMERA, CHARUCO, T_BASE_EXTERNAL, board_views, write_session


def test_partial_view_gives_identified_corners() -> None:
    T_cam_board = look_at_board(
        CHARUCO, 0.33, np.array([0.2, -0.3, 0.4]), offset_m=np.array([0.15, 0.1, 0.0])
    )
    detection = detect(render_board(CAMERA, CHARUCO, T_cam_board), CHARUCO, name="edge")
    assert detection is not None and detection.ids is not None
    assert 8 <= len(detection.ids) < CHARUCO.n_corners
    truth = project_corners(CAMERA, CHARUCO, T_cam_board)[detection.ids]
    error_px = np.linalg.norm(detection.corners_px - truth, axis=1)
    assert error_px.mean() < 0.15 and error_px.max() < 0.4, error_px
    # The same view is useless with a checkerboard, which must be seen whole.
    assert detect(render_board(CAMERA, BOARD, T_cam_board), BOARD) is None


def test_intrinsics_from_views_reaching_the_image_corners() -> None:
    views = board_views(12, seed=21, board=CHARUCO, whole=False)
    detections = [
        detect(render_board(CAMERA, CHARUCO, v), CHARUCO, name=f"v{i}") for i, v in enumerate(views)
    ]
    found = [d for d in detections if d is not None]
    assert len(found) == len(views)
    result = intrinsics.calibrate(found, CHARUCO, camera="wrist")
    assert result.fx == pytest.approx(CAMERA.fx, rel=0.005) and result.fy == pytest.approx(
        CAMERA.fy, rel=0.005
    )
    assert abs(result.cx - CAMERA.cx) < 2.0 and abs(result.cy - CAMERA.cy) < 2.0
    assert intrinsics.compare(result.to_camera_intrinsics(), CAMERA).max_displacement_px < 1.0
    assert result.coverage_fraction > 0.9 and result.rms_px < 0.2


def test_handeye_for_the_external_camera_through_the_cli(tmp_path: Path) -> None:
    samples = write_session(tmp_path, "external", "base", board_views(6, seed=4, board=CHARUCO), CHARUCO)
    factory = tmp_path / "intrinsics.json"
    factory.write_bytes(msgspec.json.encode(CAMERA))
    args = ["handeye", "--samples", str(samples), "--camera", "external", "--intrinsics", str(factory)]
    assert main([*args, "--charuco", "--out", str(tmp_path / "handeye_external.json")]) == 0
    result = load_json(tmp_path / "handeye_external.json", HandEyeCalibration)
    assert result.board.kind == "charuco" and result.frame == "T_base_camera"
    assert 1000 * np.linalg.norm(result.matrix()[:3, 3] - T_BASE_EXTERNAL[:3, 3]) < 1.0
    assert rotation_angle_deg(result.matrix()[:3, :3].T @ T_BASE_EXTERNAL[:3, :3]) < 0.1


@pytest.mark.parametrize("charuco", [False, True], ids=["checkerboard", "charuco"])
def test_board_command_writes_a_board_the_detector_reads(
    charuco: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "board.png"
    assert main(["board", "--out", str(out), "--dpi", "150", *(["--charuco"] if charuco else [])]) == 0
    assert "Print at 100%" in capsys.readouterr().out
    image = cv2.imread(str(out), cv2.IMREAD_GRAYSCALE)
    board = CHARUCO if charuco else BOARD
    px_per_square = round(0.025 / 0.0254 * 150)
    assert image.shape == ((board.rows + 3) * px_per_square, (board.cols + 3) * px_per_square)
    detection = detect(image, board)
    assert detection is not None and len(detection.corners_px) == board.n_corners
    # Inner corner (i, j) sits two squares (margin + first square) in, on the pixel boundary.
    expected = (board.object_points()[:, :2] / board.square_m + 2.0) * px_per_square - 0.5
    assert np.abs(detection.corners_px - expected).max() < 0.5


def test_charuco_board_mistakes_are_refused() -> None:
    with pytest.raises(BoardError, match="smaller than"):
        BoardSpec.parse("9x6", 25.0, charuco=True, marker_mm=30.0)
    with pytest.raises(BoardError, match="unknown ArUco dictionary"):
        BoardSpec.parse("9x6", 25.0, charuco=True, dictionary="DICT_NOPE")
    with pytest.raises(BoardError, match="has 50 markers"):
        BoardSpec.parse("15x10", 25.0, charuco=True, dictionary="DICT_4X4_50")
    # Even x even inner corners is fine for ChArUco: the markers fix the orientation.
    assert BoardSpec.parse("8x6", 25.0, charuco=True).kind == "charuco"
