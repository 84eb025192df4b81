"""The images built and run (docker/check_images.py): the CPU image from docker/Dockerfile on
stand-in bases, the robot-PC stack (sim) and the workstation stack started through docker-compose
against podman, one chunk over the robot link, the operator page. Root, podman and about half an
hour on two cores: selected only with PDE_CHECK_IMAGES=1 (tests/conftest.py), never in the normal
suite or CI. The committed result of a run is docker/check_result.json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT


@pytest.mark.images
@pytest.mark.timeout(4 * 3600)
def test_the_cpu_image_builds_and_both_stacks_run(tmp_path: Path) -> None:
    assert shutil.which("podman"), "PDE_CHECK_IMAGES=1 needs podman: apt-get install podman runc debootstrap"
    out = tmp_path / "result.json"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "docker" / "check_images.py"),
            "--out",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    failed = [c for c in result["checks"] if not c["ok"]]
    assert run.returncode == 0 and result["ok"], (result["error"], failed, run.stdout[-3000:])
    names = " ".join(c["name"] for c in result["checks"])
    for what in ("robot_server", "chunk", "operator page GET /", "down -v"):
        assert what in names, f"no check of {what!r} in {names}"
    # The official bases were stood in for, and the result says so.
    assert {b["stand_in_for"] for b in result["built"]} >= {
        "docker.io/library/python:3.11-slim-bookworm",
        "docker.io/library/postgres:16-bookworm",
    }
    assert len(result["stood_in"]) == 2
