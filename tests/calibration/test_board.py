"""Board detection and pose on rendered images with known ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.board import BoardError, BoardSpec, board_pose, detect
from calibration.poses import rotation_angle_deg
from calibration.synthetic import look_at_board, project_corners, render_board
from tests.calibration.scenes import BOARD, CAMERA


@pytest.mark.parametrize(
    "tilt",
    [[0.3, -0.2, 0.1], [-0.4, 0.3, -1.2], [0.1, 0.4, 2.0], [0.0, 0.0, np.pi]],
    ids=["tilted", "rolled", "turned-2rad", "turned-180deg"],
)
def test_corners_match_projection_in_order_and_pose_is_recovered(tilt: list[float]) -> None:
    T_cam_board = look_at_board(BOARD, 0.36, np.array(tilt))
    detection = detect(render_board(CAMERA, BOARD, T_cam_board), BOARD, name="view")
    assert detection is not None
    truth = project_corners(CAMERA, BOARD, T_cam_board)
    error_px = np.linalg.norm(detection.corners_px - truth, axis=1)
    # Sub-pixel accuracy, and the order is the board's even when the detector started elsewhere.
    assert error_px.mean() < 0.1 and error_px.max() < 0.3, error_px
    pose = board_pose(detection, BOARD, CAMERA)
    assert pose.reprojection_rms_px < 0.15
    assert np.linalg.norm(pose.T_cam_board[:3, 3] - T_cam_board[:3, 3]) < 0.001
    assert rotation_angle_deg(pose.T_cam_board[:3, :3].T @ T_cam_board[:3, :3]) < 0.1


def test_no_board_gives_none() -> None:
    blank = np.full((CAMERA.height, CAMERA.width), 128, np.uint8)
    assert detect(blank, BOARD) is None


def test_board_partly_out_of_view_gives_none() -> None:
    T_cam_board = look_at_board(BOARD, 0.3, np.zeros(3), offset_m=np.array([0.18, 0.0, 0.0]))
    assert detect(render_board(CAMERA, BOARD, T_cam_board), BOARD) is None


def test_board_with_180_degree_symmetry_is_refused() -> None:
    with pytest.raises(BoardError, match="ambiguous"):
        BoardSpec(cols=8, rows=6)


@pytest.mark.parametrize("text", ["9-6", "nine", "9x"])
def test_bad_board_text_says_the_format(text: str) -> None:
    with pytest.raises(BoardError, match="COLSxROWS"):
        BoardSpec.parse(text, 25.0)


def test_square_size_in_wrong_unit_is_refused() -> None:
    with pytest.raises(BoardError, match="metres"):
        BoardSpec(square_m=25.0)
