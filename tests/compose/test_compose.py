"""docker-compose.yml: Debian's docker-compose (v1) parses it, required variables fail loudly, and
every service command in it starts as a plain process with the compose environment and answers
its own healthcheck (PostgreSQL: a real server started here; robot backend: sim)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from pde.procs import ProcessGroup
from tests.helpers import REPO_ROOT, free_port, pde_command, subprocess_env
from tests.storage.postgres import find_pg_bin, postgres_server

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKER_COMPOSE = shutil.which("docker-compose")
REQUIRED = ("POSTGRES_PASSWORD", "PDE_UI_TOKEN", "ROBOT_BACKEND", "FR3_HOST", "REALSENSE_SERIALS")
# Not plain `pde` processes: the database and the VLM server are other images. (docker-compose v1
# `config` lists every service whatever the profiles; their `profiles` key says which.)
OTHER_IMAGES = {"postgres", "vllm"}

needs_compose = pytest.mark.skipif(DOCKER_COMPOSE is None, reason="docker-compose is not installed")


def env_file(tmp_path: Path, **values: str) -> Path:
    """.env.example with the required blanks filled and ``values`` applied ('' removes a line)."""
    lines = []
    filled = {"POSTGRES_PASSWORD": "pw-" + "x" * 20, "PDE_UI_TOKEN": "tok-" + "y" * 24}
    filled.update(values)
    for line in (REPO_ROOT / ".env.example").read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        if key in filled:
            if filled[key] == "":
                continue
            line = f"{key}={filled[key]}"
        lines.append(line)
    path = tmp_path / ".env"
    path.write_text("\n".join(lines) + "\n")
    return path


def compose(env_path: Path, *args: str, profiles: str = "") -> subprocess.CompletedProcess[str]:
    assert DOCKER_COMPOSE is not None
    # Only what the .env file says: variables of the test's own shell must not leak in.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    if profiles:
        env["COMPOSE_PROFILES"] = profiles
    return subprocess.run(
        [DOCKER_COMPOSE, "--env-file", str(env_path), "-f", str(COMPOSE_FILE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def config(env_path: Path, profiles: str = "") -> dict[str, Any]:
    r = compose(env_path, "config", profiles=profiles)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = yaml.safe_load(r.stdout)
    return doc


@needs_compose
def test_compose_file_validates_with_each_profile(tmp_path: Path) -> None:
    env = env_file(tmp_path)
    for profiles in ("", "sim", "vllm", "sim,vllm"):
        config(env, profiles)
    services = config(env)["services"]
    # Always on: the database and the five services; behind a profile: the sim setup and the VLM.
    always = {n for n, s in services.items() if not s.get("profiles")}
    assert always == {"postgres", "robot_server", "learner", "supervisor", "operator_ui"}
    assert services["sim_setup"]["profiles"] == ["sim"]
    assert services["sim_setup"]["command"][:2] == ["demo", "--prepare-only"]
    assert services["vllm"]["profiles"] == ["vllm"]
    assert any(c.startswith("--limit-mm-per-prompt") for c in services["vllm"]["command"])
    # The lab settings the robot needs: host network, real-time limits, USB devices, GPU learner.
    robot = services["robot_server"]
    assert robot["network_mode"] == "host"
    assert robot["ulimits"]["rtprio"] == 99 and robot["ulimits"]["memlock"] == -1
    assert "/dev/bus/usb:/dev/bus/usb" in robot["devices"]
    gpu = services["learner"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"]
    # ... and the learner uses it (no quiet CPU fallback), unless LEARNER_DEVICE says otherwise.
    assert services["learner"]["environment"]["PDE_LEARNER_DEVICE"] == "cuda"
    learner_env = config(env_file(tmp_path, LEARNER_DEVICE=""))["services"]["learner"]["environment"]
    assert learner_env["PDE_LEARNER_DEVICE"] == "cuda"
    assert services["postgres"]["healthcheck"]["test"][0] == "CMD-SHELL"


@needs_compose
@pytest.mark.parametrize("missing", REQUIRED)
def test_required_variables_fail_loudly(tmp_path: Path, missing: str) -> None:
    r = compose(env_file(tmp_path, **{missing: ""}), "config")
    assert r.returncode != 0
    assert f"set {missing}" in r.stderr, r.stderr


@needs_compose
def test_every_dependency_is_waited_for_by_its_health(tmp_path: Path) -> None:
    services = config(env_file(tmp_path), "sim")["services"]
    for name, svc in services.items():
        for dep, how in (svc.get("depends_on") or {}).items():
            assert how["condition"] == "service_healthy", (name, dep)
            assert "healthcheck" in services[dep], f"{name} waits for {dep}, which has no healthcheck"
        if name not in OTHER_IMAGES and name != "sim_setup":
            assert svc["healthcheck"]["test"][:3] == ["CMD", "pde", "health"], name


# --- the service commands as plain processes -----------------------------------------------------


@pytest.fixture(scope="module")
def pg_port() -> Iterator[int]:
    """A PostgreSQL server with the compose file's role and database (trust auth: any password)."""
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries (initdb/pg_ctl) are not installed: apt-get install postgresql")
    with postgres_server() as admin_url:
        port = int(admin_url.rsplit(":", 1)[1].split("/")[0])
        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        ) as c:
            c.execute("CREATE ROLE pde LOGIN PASSWORD 'unused-trust-auth'")
            c.execute("CREATE DATABASE pde OWNER pde")
        yield port


def start_order(services: dict[str, Any]) -> list[str]:
    """Dependencies first (a topological order of depends_on)."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in services[name].get("depends_on") or {}:
            visit(dep)
        order.append(name)

    for name in sorted(services):
        visit(name)
    return order


def _healthy(test: list[str], env: dict[str, str]) -> tuple[bool, str]:
    assert test[:2] == ["CMD", "pde"], test
    r = subprocess.run(pde_command(*test[2:]), env=env, capture_output=True, text=True, timeout=60)
    return r.returncode == 0, r.stdout + r.stderr


@needs_compose
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_each_service_command_starts_and_answers_its_healthcheck(tmp_path: Path, pg_port: int) -> None:
    ports = {"ROBOT_CMD_PORT": free_port(), "ROBOT_OBS_PORT": free_port(), "UI_PORT": free_port()}
    # LEARNER_DEVICE=cpu: the compose default (cuda) needs the GPU that CI does not have.
    env_path = env_file(
        tmp_path,
        ROBOT_BACKEND="sim",
        POSTGRES_PORT=str(pg_port),
        LEARNER_DEVICE="cpu",
        **{k: str(v) for k, v in ports.items()},
    )
    services = config(env_path, "sim")["services"]
    data_dir = tmp_path / "data"
    procs = ProcessGroup(tmp_path / "logs")
    envs: dict[str, dict[str, str]] = {}

    def service_env(name: str) -> dict[str, str]:
        env = subprocess_env(**{k: str(v) for k, v in services[name]["environment"].items()})
        assert env["PDE_DATA_DIR"] == "/data"
        env["PDE_DATA_DIR"] = str(data_dir)
        return env

    def command(name: str) -> list[str]:
        return pde_command(*[str(data_dir) if a == "/data" else a for a in services[name]["command"]])

    # The sim profile's one-shot setup first (demonstrations + SFT), small enough for CI.
    setup = subprocess.run(
        command("sim_setup"),
        env=service_env("sim_setup")
        | {
            "PDE_DEMO_TASKS": "put_green_container_in_bowl",
            "PDE_DEMO_DEMOS_PER_TASK": "1",
            "PDE_DEMO_SFT_STEPS": "2",
            "PDE_DEMO_SFT_BATCH_SIZE": "4",
        },
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    assert list((data_dir / "checkpoints").glob("*.pt")), "sim_setup left no SFT checkpoint"
    try:
        for name in start_order(services):
            if name in OTHER_IMAGES or name == "sim_setup":
                continue
            svc = services[name]
            env = envs[name] = service_env(name)
            procs.start(name, command(name), env)
            deadline = time.monotonic() + 240
            ok, out = False, ""
            while not ok:
                assert procs.services[name].alive, f"{name} exited:\n{procs.tail(name, 40)}"
                assert time.monotonic() < deadline, f"{name} never healthy: {out}\n{procs.tail(name, 40)}"
                ok, out = _healthy(svc["healthcheck"]["test"], env)
                if not ok:
                    time.sleep(1.0)
        assert set(envs) == set(services) - OTHER_IMAGES - {"sim_setup"}
        # All up together, each still healthy.
        for name, env in envs.items():
            ok, out = _healthy(services[name]["healthcheck"]["test"], env)
            assert ok, f"{name}: {out}"
    finally:
        procs.stop_all()
    # Stopped cleanly: the learner and supervisor say so in their heartbeat, so they are unhealthy now.
    ok, out = _healthy(services["learner"]["healthcheck"]["test"], envs["learner"])
    assert not ok and "stopped" in out, out
