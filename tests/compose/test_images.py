"""The images built and run (docker/check_images.py): the CPU image from docker/Dockerfile and the
GPU image from docker/Dockerfile.gpu on stand-in bases, the robot-PC stack (sim) and the
workstation stack (its learner on the CPU) started through docker-compose against podman, one chunk
over the robot link, the operator page. Root, podman and about half an
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

from robot_server.settings import HARDWARE_RT_PRIORITY
from tests.compose.test_compose import ROBOT, WORKSTATION, compose, config, env_file, needs_compose
from tests.helpers import REPO_ROOT

# runc's refusals on a machine without CAP_SYS_RESOURCE (measured here: podman 4.3.1, runc 1.1.5)
RUNC_REFUSED = (
    "Error: runc: runc create failed: unable to start container process: error during container "
    "init: error setting rlimits for ready process: error setting rlimit type {}: operation not "
    "permitted: OCI permission denied"
)


def check_images() -> ModuleType:
    """docker/check_images.py (a script, not a package) as a module."""
    spec = importlib.util.spec_from_file_location("check_images", REPO_ROOT / "docker" / "check_images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_images"] = module  # dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def test_the_check_asks_for_the_stacks_own_limits_and_priority() -> None:
    """What the check tries first is what the lab runs: compose's ulimits for the robot server and
    the FR3's control-thread priority, which config/robot.example.toml shows commented out."""
    ci = check_images()
    services = yaml.safe_load((REPO_ROOT / "docker" / "compose.services.yml").read_text())["services"]
    assert services["robot_server"]["ulimits"] == ci.LAB_ULIMITS
    assert "SYS_NICE" in services["robot_server"]["cap_add"]
    assert ci.LAB_RT_PRIORITY == HARDWARE_RT_PRIORITY
    assert (
        f"# rt_priority = {HARDWARE_RT_PRIORITY}\n"
        in (REPO_ROOT / "config" / "robot.example.toml").read_text()
    )
    assert tuple(services["learner"]["command"]) == ci.LEARNER
    assert "learner" in ci.WORKSTATION_SERVICES


def test_the_check_caps_only_the_limits_runc_refuses_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refusal (runc's error, as measured here) caps that one limit at the host's hard limit
    and is written down with the error; limits that start are left as the stack has them.
    FAKES: try_ulimits (podman) and hard_limit answer from tables: the hard limits measured on the
    check's machine, where runc refuses anything above them; memlock unlimited is let through here
    to show that a limit that starts stays as the stack has it."""
    ci = check_images()
    numbers = {"nproc": 6, "nofile": 7, "memlock": 8, "rtprio": 14}
    hard = {"nproc": 32768, "nofile": 20000, "memlock": 8 << 20, "rtprio": 0}
    monkeypatch.setattr(ci, "hard_limit", hard.__getitem__)
    allowed = hard | {"memlock": -1}
    tried: list[dict[str, int]] = []

    def podman_adds_its_own(r: object, limits: dict[str, int]) -> str:
        tried.append(dict(limits))
        # podman adds open files and processes (above the hard limits) once any ulimit is set
        for name, value in ({"nofile": 1 << 30, "nproc": 1 << 30} | limits).items():
            if allowed[name] != -1 and (value == -1 or value > allowed[name]):
                return RUNC_REFUSED.format(numbers[name])
        return ""

    monkeypatch.setattr(ci, "try_ulimits", podman_adds_its_own)
    result = ci.Result(started_utc="", command="")
    limits = ci.robot_ulimits(object(), result)
    assert limits["rtprio"] == {"soft": 0, "hard": 0}
    assert limits["memlock"] == {"soft": -1, "hard": -1}  # not refused: the stack's own
    assert {k: v["hard"] for k, v in limits.items()} == {
        "rtprio": 0,
        "memlock": -1,
        "nofile": 20000,
        "nproc": 32768,
    }
    assert tried[0] == ci.LAB_ULIMITS
    said = "\n".join(result.adjusted_why)
    assert "rtprio: 99 (compose) refused by runc" in said and "rlimit type 14" in said
    assert "memlock" not in said
    assert "nofile: podman's own" in said

    # Nothing refused: no ulimits override at all (the stack runs as committed).
    monkeypatch.setattr(ci, "try_ulimits", lambda r, limits: "")
    result = ci.Result(started_utc="", command="")
    assert ci.robot_ulimits(object(), result) == {} and result.adjusted_why == []

    # A refusal that names no limit stops the check with the error.
    monkeypatch.setattr(ci, "try_ulimits", lambda r, limits: "Error: something else")
    with pytest.raises(ci.Failed, match="something else"):
        ci.robot_ulimits(object(), ci.Result(started_utc="", command=""))


@needs_compose
@pytest.mark.parametrize("stack", [ROBOT, WORKSTATION])
def test_the_check_changes_only_limits_and_healthcheck_timeouts(tmp_path: Path, stack: str) -> None:
    """The check runs each stack as committed but for its override file: the robot server's
    ulimits where runc refuses them (at this machine's hard limits), its real-time budget where the
    kernel schedules real-time by cgroup, and the healthchecks' timeout."""
    ci = check_images()
    env = env_file(tmp_path, ROBOT_BACKEND="sim", ROBOT_LINK_HOST="127.0.0.1", ROBOT_PC_HOST="127.0.0.1")
    if stack == ROBOT:
        capped = {name: {"soft": ci.hard_limit(name), "hard": ci.hard_limit(name)} for name in ci.LAB_ULIMITS}
        rt = {"cpu_rt_runtime": ci.ROBOT_RT_RUNTIME_US}  # rt_budget's, where RT is scheduled by cgroup
        changes: dict[str, dict[str, object]] = {"robot_server": {"ulimits": capped} | rt}
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
            assert merged[name]["cpu_rt_runtime"] == changes[name]["cpu_rt_runtime"]
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
    for what in (
        "robot_server",
        "chunk",
        "operator page GET /",
        "down -v",
        "SCHED_FIFO",
        "doctor",
        "learner",
    ):
        assert what in names, f"no check of {what!r} in {names}"
    assert "localhost/pde-robot:gpu" in {b["image"] for b in result["built"]}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result["commit"] == head.stdout.strip()
    assert result["versions"]["gpu.torch_cuda"] not in ("", "None")
    # The official bases were stood in for, and the result says so.
    assert {b["stand_in_for"] for b in result["built"]} >= {
        "docker.io/library/python:3.11-slim-bookworm",
        "docker.io/library/postgres:16-bookworm",
    }
    assert len(result["stood_in"]) == 2
