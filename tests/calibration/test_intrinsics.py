"""Intrinsics from rendered views of a known camera: recovery, view rejection, files, CLI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import cv2
import msgspec
import numpy as np
import pytest

from calibration import intrinsics
from calibration.board import Detection, detect
from calibration.main import main
from calibration.results import IntrinsicsCalibration, load_intrinsics, load_json, save_json
from calibration.synthetic import render_board
from pde_contract.messages import CameraIntrinsics
from tests.calibration.scenes import BOARD, CAMERA, board_views
from tests.helpers import pde_command, subprocess_env


@pytest.fixture(scope="module")
def images() -> list[np.ndarray]:
    return [render_board(CAMERA, BOARD, view) for view in board_views(12, seed=7)]


@pytest.fixture(scope="module")
def detections(images: list[np.ndarray]) -> list[Detection]:
    found = [detect(image, BOARD, name=f"view{i:02d}") for i, image in enumerate(images)]
    usable = [d for d in found if d is not None]
    assert len(usable) == len(found), "every view of the scene shows the whole board"
    return usable


def assert_close_to_truth(result: IntrinsicsCalibration) -> None:
    assert result.fx == pytest.approx(CAMERA.fx, rel=0.005)
    assert result.fy == pytest.approx(CAMERA.fy, rel=0.005)
    assert abs(result.cx - CAMERA.cx) < 2.0 and abs(result.cy - CAMERA.cy) < 2.0
    assert result.distortion[0] == pytest.approx(CAMERA.distortion[0], abs=0.02)
    assert result.distortion[1] == pytest.approx(CAMERA.distortion[1], abs=0.05)
    # What matters: both models put every ray at nearly the same pixel.
    assert intrinsics.compare(result.to_camera_intrinsics(), CAMERA).max_displacement_px < 1.0


def test_recovers_known_intrinsics(detections: list[Detection]) -> None:
    result = intrinsics.calibrate(detections, BOARD, camera="wrist", serial="123")
    assert_close_to_truth(result)
    assert result.rms_px < 0.2
    assert all(v.used for v in result.views) and result.n_views_used == len(detections)
    assert all(std < 2.0 for std in result.std_fx_fy_cx_cy)
    assert (result.width, result.height) == (CAMERA.width, CAMERA.height)


def test_bad_view_is_rejected_with_a_reason(detections: list[Detection]) -> None:
    rng = np.random.default_rng(3)
    bad = Detection(
        name="shaken.png",
        corners_px=(detections[0].corners_px + rng.normal(0, 3.0, detections[0].corners_px.shape)).astype(
            np.float32
        ),
        image_size=detections[0].image_size,
    )
    result = intrinsics.calibrate([*detections[1:], bad], BOARD, camera="wrist")
    rejected = [v for v in result.views if not v.used]
    assert [v.name for v in rejected] == ["shaken.png"]
    assert "reprojection error" in rejected[0].reason and rejected[0].rms_px > 2.0
    assert_close_to_truth(result)


def test_too_few_views_says_what_to_take(detections: list[Detection]) -> None:
    with pytest.raises(
        intrinsics.IntrinsicsError, match=r"found in 3 view\(s\), need at least 6.*tilted"
    ) as e:
        intrinsics.calibrate(detections[:3], BOARD, camera="wrist", missed={"a.png": "no board"})
    assert "a.png: no board" in str(e.value)


def test_coverage_warning_when_the_board_stays_in_the_middle(detections: list[Detection]) -> None:
    centre = np.array([CAMERA.width / 2, CAMERA.height / 2], np.float32)
    # The same views seen through a 2.5x longer lens: the corners never leave the image centre.
    central = [
        Detection(name=d.name, corners_px=centre + 0.4 * (d.corners_px - centre), image_size=d.image_size)
        for d in detections
    ]
    result = intrinsics.calibrate(central, BOARD, camera="wrist")
    assert result.coverage_fraction < 0.6
    assert any("cover only" in w and "edges and corners" in w for w in result.warnings)
    assert not any("cover only" in w for w in intrinsics.calibrate(detections, BOARD, "wrist").warnings)


def test_json_round_trip_loads_into_camera_intrinsics(detections: list[Detection], tmp_path: Path) -> None:
    result = intrinsics.calibrate(detections, BOARD, camera="wrist", serial="123")
    path = tmp_path / "intrinsics_wrist.json"
    save_json(result, path)
    loaded = load_json(path, IntrinsicsCalibration)
    assert loaded == result
    camera_intrinsics, source = load_intrinsics(path)
    assert isinstance(camera_intrinsics, CameraIntrinsics)
    assert camera_intrinsics == result.to_camera_intrinsics()
    assert "calibrated" in source and loaded.serial == "123" and loaded.created_utc
    # The factory values as a bare CameraIntrinsics message load the same way.
    bare = tmp_path / "factory.json"
    bare.write_bytes(msgspec.json.encode(CAMERA))
    assert load_intrinsics(bare)[0] == CAMERA


def test_compare_reports_offsets_against_factory() -> None:
    same = intrinsics.compare(CAMERA, CAMERA)
    assert same.max_displacement_px < 1e-3 and same.d_fx_px == 0.0
    shifted = msgspec.structs.replace(CAMERA, fx=CAMERA.fx * 1.01, cx=CAMERA.cx + 3.0)
    c = intrinsics.compare(shifted, CAMERA)
    assert c.d_fx_percent == pytest.approx(1.0) and c.d_cx_px == pytest.approx(3.0)
    assert 3.0 <= c.max_displacement_px < 3.0 + 0.01 * CAMERA.width
    with pytest.raises(intrinsics.IntrinsicsError, match="cannot compare"):
        intrinsics.compare(msgspec.structs.replace(CAMERA, width=1280, height=720), CAMERA)


def test_cli_calibrates_a_directory_and_compares_with_factory(
    images: list[np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, image in enumerate(images):
        cv2.imwrite(str(tmp_path / f"view{i:02d}.png"), image)
    (tmp_path / "notes.txt").write_text("not an image")
    factory = tmp_path / "factory.json"
    factory.write_bytes(msgspec.json.encode(msgspec.structs.replace(CAMERA, fx=CAMERA.fx + 6.0)))
    out = tmp_path / "out" / "wrist.json"
    rc = main(
        [
            "intrinsics",
            "--images",
            str(tmp_path),
            "--camera",
            "wrist",
            "--factory",
            str(factory),
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert_close_to_truth(load_json(out, IntrinsicsCalibration))
    assert re.search(r"vs factory: fx -(5\.9|6\.0)\d px", printed), printed
    assert f"wrote {out}" in printed


def test_cli_mixed_image_sizes_are_refused(images: list[np.ndarray], tmp_path: Path) -> None:
    for i, image in enumerate(images[:6]):
        cv2.imwrite(str(tmp_path / f"view{i:02d}.png"), image)
    cv2.imwrite(str(tmp_path / "small.png"), cv2.resize(images[6], (320, 240)))
    with pytest.raises(intrinsics.IntrinsicsError, match="different sizes"):
        intrinsics.detect_in_files(intrinsics.list_images(tmp_path), BOARD)


def test_pde_calibrate_without_images_exits_2_with_a_message(tmp_path: Path) -> None:
    proc = subprocess.run(
        pde_command("calibrate", "intrinsics", "--images", str(tmp_path), "--camera", "wrist"),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no images matching" in proc.stderr
