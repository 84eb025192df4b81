"""``pde calibrate selfcheck``: the whole tool on simulated sessions with a known answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calibration import selfcheck
from calibration.main import main
from calibration.results import HandEyeCalibration, IntrinsicsCalibration, load_json


def test_selfcheck_reports_errors_against_the_truth_and_fails_beyond_its_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An impossible limit: the run must say FAILED and exit 1 while printing its real errors.
    monkeypatch.setattr(selfcheck, "MAX_HANDEYE_ERROR_MM", 1e-9)
    assert main(["selfcheck", "--views", "7", "--image-noise", "2", "--out", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert "FAILED" in printed
    fx = float(re.search(r"fx ([+-][\d.]+)%", printed).group(1))  # type: ignore[union-attr]
    assert abs(fx) < 0.5
    errors = re.findall(r"hand-eye \((hand|base)\): ([\d.]+) mm, ([\d.]+)°", printed)
    assert [mount for mount, _, _ in errors] == ["hand", "base"]
    for _, mm, deg in errors:
        assert 0.0 < float(mm) < 1.0 and float(deg) < 0.1
    # The sessions, as collect would have written them, and the results are kept in --out.
    assert load_json(tmp_path / "intrinsics_wrist.json", IntrinsicsCalibration).n_views_used == 7
    assert load_json(tmp_path / "external" / "handeye_external.json", HandEyeCalibration).mount == "base"
