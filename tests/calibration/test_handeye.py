"""Hand-eye calibration against known camera poses: exact data, noisy data, rendered images,
degenerate pose sets, files and the CLI."""

from __future__ import annotations

from pathlib import Path

import cv2
import msgspec
import numpy as np
import pytest

from calibration import handeye
from calibration.main import main
from calibration.poses import make_transform, rotation_angle_deg
from calibration.results import HandEyeCalibration, Mount, SampleSet, load_json, save_json
from tests.calibration.scenes import BOARD, CAMERA, board_views, perturb, robot_poses, truth, write_session

MOUNTS: list[Mount] = ["hand", "base"]


def ok(figure: float | None) -> float:
    assert figure is not None, "the method failed"
    return figure


def errors(transform: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(translation mm, rotation deg) between two transforms."""
    return (
        1000.0 * float(np.linalg.norm(transform[:3, 3] - expected[:3, 3])),
        rotation_angle_deg(transform[:3, :3].T @ expected[:3, :3]),
    )


@pytest.mark.parametrize("mount", MOUNTS)
def test_every_method_recovers_the_camera_from_exact_poses(mount: Mount) -> None:
    views = board_views(12, seed=1)
    result = handeye.calibrate("cam", mount, robot_poses(mount, views), views, BOARD)
    assert [m.method for m in result.methods] == list(handeye.METHODS)
    for method in result.methods:
        assert not method.error, method
        mm, deg = errors(np.asarray(method.transform), truth(mount))
        assert mm < 0.01 and deg < 0.001, (method.method, mm, deg)
        assert ok(method.translation_rms_mm) < 0.01 and ok(method.rotation_rms_deg) < 0.001
    assert result.frame == ("T_tcp_camera" if mount == "hand" else "T_base_camera")
    mm, deg = errors(result.matrix(), truth(mount))
    assert mm < 0.01 and deg < 0.001
    assert result.rotation_span_deg > 30.0


@pytest.mark.parametrize("mount", MOUNTS)
def test_noisy_poses_give_a_bounded_error_and_residuals_that_show_the_noise(mount: Mount) -> None:
    rng = np.random.default_rng(11)
    views = board_views(20, seed=2)
    # Robot repeatability and PnP on a real board: ~0.5 mm / 0.05° and ~1 mm / 0.2°.
    tcps = [perturb(t, rng, 0.5, 0.05) for t in robot_poses(mount, views)]
    boards = [perturb(v, rng, 1.0, 0.2) for v in views]
    result = handeye.calibrate("cam", mount, tcps, boards, BOARD)
    mm, deg = errors(result.matrix(), truth(mount))
    assert mm < 5.0 and deg < 0.5, (result.method, mm, deg)
    best = next(m for m in result.methods if m.method == result.method)
    assert 0.3 < ok(best.translation_rms_mm) < 10.0 and 0.05 < ok(best.rotation_rms_deg) < 1.0
    assert ok(best.translation_max_mm) >= ok(best.translation_rms_mm)


@pytest.mark.parametrize("mount", MOUNTS)
def test_from_rendered_images_through_the_cli(
    mount: Mount, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camera = "wrist" if mount == "hand" else "external"
    samples = write_session(tmp_path, camera, mount, board_views(10, seed=5))
    # One sample whose picture shows no board: dropped with a reason, the rest still calibrate.
    cv2.imwrite(str(tmp_path / f"{camera}_009.png"), np.full((CAMERA.height, CAMERA.width), 128, np.uint8))
    intrinsics_file = tmp_path / "intrinsics.json"
    intrinsics_file.write_bytes(msgspec.json.encode(CAMERA))
    rc = main(
        ["handeye", "--samples", str(samples), "--camera", camera, "--intrinsics", str(intrinsics_file)]
    )
    printed = capsys.readouterr().out
    assert rc == 0, printed
    result = load_json(tmp_path / f"handeye_{camera}.json", HandEyeCalibration)
    assert result.mount == mount  # chosen from the camera name
    mm, deg = errors(result.matrix(), truth(mount))
    assert mm < 1.0 and deg < 0.1, (result.method, mm, deg)
    assert (
        list(result.samples_rejected) == ["sample 9"]
        and "no 9x6 checkerboard" in result.samples_rejected["sample 9"]
    )
    best = next(m for m in result.methods if m.method == result.method)
    assert ok(best.reprojection_rms_px) < 0.5
    for name in handeye.METHODS:
        assert name in printed
    # Round trip of the file.
    again = tmp_path / "again.json"
    save_json(result, again)
    assert load_json(again, HandEyeCalibration) == result


def test_without_intrinsics_file_the_factory_values_are_used_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = write_session(tmp_path, "wrist", "hand", board_views(8, seed=9))
    assert main(["handeye", "--samples", str(samples), "--camera", "wrist"]) == 0
    assert "factory intrinsics" in capsys.readouterr().out
    assert main(["handeye", "--samples", str(samples), "--camera", "external"]) == 2
    assert "no intrinsics for camera 'external'" in capsys.readouterr().err
    # Intrinsics on a session folder need the camera's name; the message lists the session's.
    assert main(["intrinsics", "--images", str(tmp_path)]) == 2
    assert "this session has cameras ['wrist']: pass one with --camera" in capsys.readouterr().err


def rotations_about(axis: np.ndarray, angles_deg: np.ndarray) -> list[np.ndarray]:
    down = np.diag([1.0, -1.0, -1.0])
    return [
        make_transform(cv2.Rodrigues(axis * np.radians(a))[0] @ down, [0.45 + 0.01 * i, 0.02 * i, 0.4])
        for i, a in enumerate(angles_deg)
    ]


def test_rotation_about_one_axis_only_is_refused_naming_the_axes_to_add() -> None:
    tcps = rotations_about(np.array([0.0, 0.0, 1.0]), np.linspace(-40, 40, 10))
    with pytest.raises(handeye.HandEyeError, match=r"one axis.*base z \(yaw\).*base x \(roll\) and base y"):
        handeye.calibrate("wrist", "hand", tcps, tcps, BOARD)


def test_translation_only_is_refused() -> None:
    tcps = rotations_about(np.array([1.0, 0.0, 0.0]), np.zeros(10))
    with pytest.raises(handeye.HandEyeError, match=r"varies by only 0\.0°.*tilted by 15-30°"):
        handeye.calibrate("wrist", "hand", tcps, tcps, BOARD)


def test_too_few_samples_are_refused() -> None:
    views = board_views(4, seed=1)
    with pytest.raises(handeye.HandEyeError, match="4 usable sample"):
        handeye.calibrate("wrist", "hand", robot_poses("hand", views), views, BOARD)


def test_cli_degenerate_session_exits_2_with_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = write_session(tmp_path, "wrist", "hand", board_views(6, seed=3))
    sample_set = load_json(samples, SampleSet)
    for sample in sample_set.samples:  # every pose reported with the same orientation
        sample.tcp_quat_xyzw = [1.0, 0.0, 0.0, 0.0]
    save_json(sample_set, samples)
    assert main(["handeye", "--samples", str(samples), "--camera", "wrist"]) == 2
    err = capsys.readouterr().err
    assert "varies by only" in err and "Add poses" in err


def test_diversity_measures() -> None:
    one_axis = handeye.pose_diversity(rotations_about(np.array([0.0, 0.0, 1.0]), np.linspace(-20, 20, 5)))
    assert one_axis.rotation_span_deg == pytest.approx(40.0) and one_axis.axis_spread < 1e-6
    assert abs(one_axis.dominant_axis_base[2]) == pytest.approx(1.0)
    spread = handeye.pose_diversity(robot_poses("hand", board_views(10, seed=1)))
    assert spread.axis_spread > 0.1
