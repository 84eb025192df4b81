"""The images built and run (docker/check_images.py): the CPU image from docker/Dockerfile on
stand-in bases, the robot-PC stack (sim) and the workstation stack started through docker-compose
against podman, one chunk over the robot link, the operator page. Root, podman and about half an
hour on two cores: selected only with PDE_CHECK_IMAGES=1 (tests/conftest.py), never in the normal
suite or CI. The committed result of a run is docker/check_result.json. What the script changes in
the stacks for the machine it runs on is checked in the normal suite."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.compose.test_compose import ROBOT, WORKSTATION, compose, config, env_file, needs_compose
from tests.helpers import REPO_ROOT


def check_images() -> ModuleType:
    """docker/check_images.py (a script, not a package) as a module."""
    spec = importlib.util.spec_from_file_location("check_images", REPO_ROOT / "docker" / "check_images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_images"] = module  # dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


@needs_compose
@pytest.mark.parametrize("stack", [ROBOT, WORKSTATION])
def test_the_check_changes_only_limits_and_healthcheck_timeouts(tmp_path: Path, stack: str) -> None:
    """The check runs each stack as committed but for its override file: the robot server's
    ulimits (at this machine's hard limits) and the healthchecks' timeout."""
    ci = check_images()
    env = env_file(tmp_path, ROBOT_BACKEND="sim", ROBOT_LINK_HOST="127.0.0.1", ROBOT_PC_HOST="127.0.0.1")
    if stack == ROBOT:
        changes: dict[str, dict[str, object]] = {"robot_server": {"ulimits": ci.host_limits()}}
    else:
        changes = {name: {} for name in ci.WORKSTATION_SERVICES}
    path = ci.override(tmp_path / "override.yml", changes)
    plain = config(env, stack=stack)["services"]
    r = compose(env, "-f", str(path), "config", stack=stack)
    assert r.returncode == 0, r.stderr
    merged = yaml.safe_load(r.stdout)["services"]
    assert set(merged) == set(plain)
    for name in changes:
        assert merged[name]["healthcheck"]["timeout"] == "1m", name
        assert merged[name]["healthcheck"]["test"] == plain[name]["healthcheck"]["test"], name
        if "ulimits" in changes[name]:
            assert merged[name]["ulimits"] == changes[name]["ulimits"]
            assert set(plain[name]["ulimits"]) <= set(merged[name]["ulimits"])
        unchanged = (set(plain[name]) | set(merged[name])) - {"healthcheck", *changes[name]}
        assert {k: merged[name].get(k) for k in unchanged} == {k: plain[name].get(k) for k in unchanged}


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
