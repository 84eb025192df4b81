"""The compose stacks (docker-compose.yml on one machine; docker-compose.robot.yml and
docker-compose.workstation.yml on two, all over docker/compose.services.yml): Debian's
docker-compose (v1) parses each with every profile, required variables fail loudly, and every
service command starts as a plain process with its stack's environment and answers its own
healthcheck (PostgreSQL: a real server started here; robot backend: sim; the two-machine layout
over the CURVE robot link with keys from `pde keys init`). No image is built: CI has no Docker
engine."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from learner.loop.settings import LoopSettings
from learner.policies.pi05_options import Pi05Options
from learner.policy_args import pi05_options
from learner.ppo_config import PPOConfig
from pde.keys import DEFAULT_CLIENTS
from pde.keys import init as keys_init
from pde.procs import ProcessGroup
from pde_contract.client import RobotClient, RobotServerError
from pde_contract.messages import ErrorCode
from tests.helpers import REPO_ROOT, free_port, pde_command, subprocess_env
from tests.storage.postgres import find_pg_bin, postgres_server

SINGLE, ROBOT, WORKSTATION = (
    "docker-compose.yml",
    "docker-compose.robot.yml",
    "docker-compose.workstation.yml",
)
STACKS = (SINGLE, ROBOT, WORKSTATION)
DOCKER_COMPOSE = shutil.which("docker-compose")
ROBOT_REQUIRED = ("ROBOT_BACKEND", "ROBOT_CONFIG")
REQUIRED = {
    SINGLE: ("POSTGRES_PASSWORD", "PDE_UI_TOKEN", *ROBOT_REQUIRED),
    ROBOT: (*ROBOT_REQUIRED, "ROBOT_LINK_HOST", "LINK_KEYS_DIR"),
    WORKSTATION: ("POSTGRES_PASSWORD", "PDE_UI_TOKEN", "ROBOT_PC_HOST", "LINK_KEYS_DIR"),
}
# What each stack runs whatever the profiles (sim_setup and vllm are behind theirs).
ALWAYS = {
    SINGLE: {"postgres", "robot_server", "learner", "supervisor", "operator_ui"},
    ROBOT: {"robot_server"},
    WORKSTATION: {"postgres", "learner", "supervisor", "operator_ui"},
}
PROFILES = {
    SINGLE: ("", "sim", "vllm", "record", "sim,vllm,record"),
    ROBOT: ("",),
    WORKSTATION: ("", "sim", "vllm", "record", "sim,vllm,record"),
}
# Not plain `pde` processes: the database and the VLM server are other images. (docker-compose v1
# `config` lists every service whatever the profiles; their `profiles` key says which.)
OTHER_IMAGES = {"postgres", "vllm"}
# Run once, not kept up (no healthcheck): the sim's demos + SFT, and `pde record`.
ONE_OFF = {"sim_setup", "record"}

needs_compose = pytest.mark.skipif(DOCKER_COMPOSE is None, reason="docker-compose is not installed")


def env_file(tmp_path: Path, **values: str) -> Path:
    """.env.example with the required blanks filled and ``values`` applied ('' removes a line).
    The robot configuration is a copy of config/robot.example.toml unless ``values`` names one."""
    lines = []
    robot_toml = tmp_path / "robot.toml"
    if "ROBOT_CONFIG" not in values and not robot_toml.exists():
        shutil.copy(REPO_ROOT / "config" / "robot.example.toml", robot_toml)
    filled = {
        "POSTGRES_PASSWORD": "pw-" + "x" * 20,
        "PDE_UI_TOKEN": "tok-" + "y" * 24,
        "ROBOT_LINK_HOST": "0.0.0.0",
        "ROBOT_PC_HOST": "192.0.2.10",
        "LINK_KEYS_DIR": str(tmp_path / "keys"),
        "ROBOT_CONFIG": str(robot_toml),
    }
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


def compose(
    env_path: Path, *args: str, profiles: str = "", stack: str = SINGLE
) -> subprocess.CompletedProcess[str]:
    assert DOCKER_COMPOSE is not None
    # Only what the .env file says: variables of the test's own shell must not leak in.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    if profiles:
        env["COMPOSE_PROFILES"] = profiles
    return subprocess.run(
        [DOCKER_COMPOSE, "--env-file", str(env_path), "-f", str(REPO_ROOT / stack), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def config(env_path: Path, profiles: str = "", stack: str = SINGLE) -> dict[str, Any]:
    r = compose(env_path, "config", profiles=profiles, stack=stack)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = yaml.safe_load(r.stdout)
    return doc


@needs_compose
@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_validates_with_each_profile(tmp_path: Path, stack: str) -> None:
    env = env_file(tmp_path)
    for profiles in PROFILES[stack]:
        config(env, profiles, stack)
    services = config(env, stack=stack)["services"]
    always = {n for n, s in services.items() if not s.get("profiles")}
    assert always == ALWAYS[stack]
    assert set(services) - always == ({"sim_setup", "vllm", "record"} if stack != ROBOT else set())


@needs_compose
def test_single_machine_stack(tmp_path: Path) -> None:
    env = env_file(tmp_path)
    services = config(env)["services"]
    assert services["sim_setup"]["profiles"] == ["sim"]
    assert services["sim_setup"]["command"][:2] == ["demo", "--prepare-only"]
    assert services["vllm"]["profiles"] == ["vllm"]
    assert any(c.startswith("--limit-mm-per-prompt") for c in services["vllm"]["command"])
    # The lab settings the robot needs: host network, real-time limits, USB devices, GPU learner.
    robot = services["robot_server"]
    assert robot["network_mode"] == "host"
    assert robot["ulimits"]["rtprio"] == 99 and robot["ulimits"]["memlock"] == -1
    # USB bind-mounted (a reset camera's new device node appears), udev read-only, any USB device.
    assert "/dev/bus/usb:/dev/bus/usb:rw" in robot["volumes"] and "/run/udev:/run/udev:ro" in robot["volumes"]
    assert robot["device_cgroup_rules"] == ["c 189:* rmw"] and "devices" not in robot
    # Everything on loopback: no keys needed.
    assert robot["environment"]["PDE_ROBOT_HOST"] == "127.0.0.1"
    assert not any(k.startswith("PDE_ROBOT_LINK") for k in robot["environment"])
    # One GPU each by index, vLLM pinned with a memory share.
    gpu = services["learner"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"] and gpu["device_ids"] == ["0"]
    vllm_gpu = services["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert vllm_gpu["device_ids"] == ["1"]
    assert services["vllm"]["image"] == "vllm/vllm-openai:v0.10.0"
    assert "--gpu-memory-utilization=0.85" in services["vllm"]["command"]
    shared = config(env_file(tmp_path, VLLM_GPU="0", VLLM_GPU_MEMORY_UTILIZATION="0.4"))["services"]["vllm"]
    assert shared["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0"]
    assert "--gpu-memory-utilization=0.4" in shared["command"]
    # ... and the learner uses it (no quiet CPU fallback), unless LEARNER_DEVICE says otherwise.
    assert services["learner"]["environment"]["PDE_LEARNER_DEVICE"] == "cuda"
    learner_env = config(env_file(tmp_path, LEARNER_DEVICE=""))["services"]["learner"]["environment"]
    assert learner_env["PDE_LEARNER_DEVICE"] == "cuda"
    assert services["postgres"]["healthcheck"]["test"][0] == "CMD-SHELL"


def tasks_file_source(svc: dict[str, Any]) -> str:
    """The file on this machine that the service's bind mount shows at its PDE_TASKS_FILE."""
    target = svc["environment"]["PDE_TASKS_FILE"]
    [source] = [v.split(":")[0] for v in svc["volumes"] if isinstance(v, str) and v.split(":")[1] == target]
    return str(source)


def _learner_settings(learner: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> LoopSettings:
    """The loop's settings as the learner's container environment gives them (the tasks file read
    at its mount's source on this machine)."""
    for k in [k for k in os.environ if k.startswith(("PDE_LOOP_", "PDE_LEARNER_"))]:
        monkeypatch.delenv(k)
    for k, v in learner["environment"].items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.setenv("PDE_TASKS_FILE", tasks_file_source(learner))
    return LoopSettings(**{})


@needs_compose
@pytest.mark.parametrize("stack", [SINGLE, WORKSTATION])
def test_the_learner_runs_the_small_policy_unless_the_env_file_says_pi05(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: str
) -> None:
    learner = config(env_file(tmp_path), stack=stack)["services"]["learner"]
    # Every PDE_LOOP_* variable the stack sets is one of the loop's settings (a typo would be ignored).
    loop_vars = {
        k.removeprefix("PDE_LOOP_").lower() for k in learner["environment"] if k.startswith("PDE_LOOP_")
    }
    assert {"policy", "init", "pi05_trainable", "bf16", "gradient_checkpointing"} <= loop_vars
    assert {v.split("__")[0] for v in loop_vars} <= set(LoopSettings.model_fields)
    ppo_fields = {f.name for f in dataclasses.fields(PPOConfig)}
    assert {v.removeprefix("ppo__") for v in loop_vars if v.startswith("ppo__")} <= ppo_fields
    settings = _learner_settings(learner, monkeypatch)
    assert (settings.policy, settings.init) == ("small", "")
    assert pi05_options(settings) == Pi05Options()
    # The checkpoint directory is mounted read-only whatever the policy (default: ./models/pi05).
    assert f"{REPO_ROOT / 'models' / 'pi05'}:/models/pi05:ro" in learner["volumes"]

    values = {"LEARNER_POLICY": "pi05", "PI05_DIR": str(tmp_path / "pi05"), "PI05_INIT": "/models/pi05"}
    values |= {"PI05_TRAINABLE": "expert", "PI05_BF16": "true", "PI05_GRADIENT_CHECKPOINTING": "true"}
    learner = config(env_file(tmp_path, **values), stack=stack)["services"]["learner"]
    assert f"{tmp_path / 'pi05'}:/models/pi05:ro" in learner["volumes"]
    settings = _learner_settings(learner, monkeypatch)
    assert (settings.policy, settings.init) == ("pi05", "/models/pi05")
    assert pi05_options(settings) == Pi05Options(trainable="expert", bf16=True, gradient_checkpointing=True)
    # The stack's command takes the policy from these settings: it names none itself.
    assert learner["command"] == ["learner", "run"]


@needs_compose
def test_two_machine_stacks(tmp_path: Path) -> None:
    env = env_file(tmp_path)
    robot = config(env, stack=ROBOT)["services"]["robot_server"]
    renv = robot["environment"]
    # The lab LAN with keys; the FCI's host network and the real-time limits as on one machine.
    assert renv["PDE_ROBOT_HOST"] == "0.0.0.0"
    assert renv["PDE_ROBOT_LINK_SECRET_KEY"] == "/keys/server.key_secret"
    assert renv["PDE_ROBOT_LINK_CLIENTS_DIR"] == "/keys/clients"
    assert f"{tmp_path / 'keys'}:/keys:ro" in robot["volumes"]
    assert robot["network_mode"] == "host" and robot["ulimits"]["rtprio"] == 99
    assert "PDE_DATABASE_URL" not in renv  # the robot PC has no database
    ws = config(env, stack=WORKSTATION)["services"]
    for name in ("learner", "operator_ui", "record"):
        wenv = ws[name]["environment"]
        assert wenv["PDE_ROBOT_CMD_ENDPOINT"] == "tcp://192.0.2.10:5556"
        assert wenv["PDE_ROBOT_LINK_SERVER_KEY"] == "/keys/server.key"
        assert wenv["PDE_ROBOT_LINK_CLIENT_KEY"].startswith("/keys/")
        assert f"{tmp_path / 'keys'}:/keys:ro" in ws[name]["volumes"]
    # What `pde keys init` writes is what the stacks name.
    assert {
        Path(ws[n]["environment"]["PDE_ROBOT_LINK_CLIENT_KEY"]).name
        for n in ("learner", "operator_ui", "record")
    } == {f"{c}.key_secret" for c in DEFAULT_CLIENTS}
    # The same service definitions in every stack (docker/compose.services.yml).
    single = config(env)["services"]
    for name in ALWAYS[WORKSTATION] - {"postgres"}:
        assert ws[name]["command"] == single[name]["command"]
        assert ws[name]["healthcheck"] == single[name]["healthcheck"]
    assert robot["command"] == single["robot_server"]["command"]


@needs_compose
@pytest.mark.parametrize("stack,missing", [(s, m) for s in STACKS for m in REQUIRED[s]])
def test_required_variables_fail_loudly(tmp_path: Path, stack: str, missing: str) -> None:
    r = compose(env_file(tmp_path, **{missing: ""}), "config", stack=stack)
    assert r.returncode != 0
    assert f"set {missing}" in r.stderr, r.stderr


@needs_compose
@pytest.mark.parametrize("stack", STACKS)
def test_every_dependency_is_waited_for_by_its_health(tmp_path: Path, stack: str) -> None:
    services = config(env_file(tmp_path), PROFILES[stack][-1], stack)["services"]
    for name, svc in services.items():
        for dep, how in (svc.get("depends_on") or {}).items():
            assert how["condition"] == "service_healthy", (name, dep)
            assert "healthcheck" in services[dep], f"{name} waits for {dep}, which has no healthcheck"
        if name not in OTHER_IMAGES | ONE_OFF:
            assert svc["healthcheck"]["test"][:3] == ["CMD", "pde", "health"], name


# --- the service commands as plain processes -----------------------------------------------------


@pytest.fixture(scope="module")
def pg_port() -> Iterator[int]:
    """A PostgreSQL server with the compose file's role (trust auth: any password)."""
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries (initdb/pg_ctl) are not installed: apt-get install postgresql")
    with postgres_server() as admin_url:
        port = int(admin_url.rsplit(":", 1)[1].split("/")[0])
        with _admin(port) as c:
            c.execute("CREATE ROLE pde LOGIN PASSWORD 'unused-trust-auth'")
        yield port


def _admin(port: int) -> psycopg.Connection[Any]:
    return psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True)


@pytest.fixture
def fresh_db(pg_port: int) -> int:
    """The compose stacks' database `pde`, empty for each test."""
    with _admin(pg_port) as c:
        c.execute("DROP DATABASE IF EXISTS pde WITH (FORCE)")
        c.execute("CREATE DATABASE pde OWNER pde")
    return pg_port


@pytest.fixture(scope="module")
def sft_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sim profile's one-shot setup (demonstrations + SFT), small enough for CI, run once as its
    compose command; returns the checkpoints folder it left."""
    tmp = tmp_path_factory.mktemp("sim_setup")
    svc = config(env_file(tmp, ROBOT_BACKEND="sim"), "sim")["services"]["sim_setup"]
    data_dir = tmp / "data"
    setup = subprocess.run(
        _command(svc, data_dir),
        env=_service_env(svc, data_dir, tmp)
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
    return data_dir / "checkpoints"


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


def _service_env(svc: dict[str, Any], data_dir: Path, keys_dir: Path) -> dict[str, str]:
    """The service's compose environment for a plain process: the data volume, the mounted key
    folder and the mounted files (the robot configuration, the tasks file) become the host paths
    they stand for."""
    env = subprocess_env(**{k: str(v) for k, v in svc["environment"].items()})
    assert env["PDE_DATA_DIR"] == "/data"
    env["PDE_DATA_DIR"] = str(data_dir)
    files = {inside: host for host, inside in _bind_mounts(svc).items() if Path(host).is_file()}
    for k, v in env.items():
        if v.startswith("/keys/"):
            env[k] = str(keys_dir / v.removeprefix("/keys/"))
        elif v in files:
            env[k] = files[v]
    if "PDE_TASKS_FILE" in svc["environment"]:
        env["PDE_TASKS_FILE"] = tasks_file_source(svc)
    return env


def _bind_mounts(svc: dict[str, Any], read_only: bool = False) -> dict[str, str]:
    """host path -> path in the container, of the service's bind mounts (``read_only``: only
    those mounted ``:ro``)."""
    out = {}
    for volume in svc.get("volumes") or []:
        host, inside, *mode = volume.split(":")
        if host.startswith("/") and (not read_only or mode == ["ro"]):
            out[host] = inside
    return out


def _command(svc: dict[str, Any], data_dir: Path) -> list[str]:
    return pde_command(*[str(data_dir) if a == "/data" else a for a in svc["command"]])


def _healthy(test: list[str], env: dict[str, str]) -> tuple[bool, str]:
    assert test[:2] == ["CMD", "pde"], test
    r = subprocess.run(pde_command(*test[2:]), env=env, capture_output=True, text=True, timeout=60)
    return r.returncode == 0, r.stdout + r.stderr


def _start_healthy(
    procs: ProcessGroup, name: str, svc: dict[str, Any], env: dict[str, str], data_dir: Path
) -> None:
    procs.start(name, _command(svc, data_dir), env)
    deadline = time.monotonic() + 240
    ok, out = False, ""
    while not ok:
        assert procs.services[name].alive, f"{name} exited:\n{procs.tail(name, 40)}"
        assert time.monotonic() < deadline, f"{name} never healthy: {out}\n{procs.tail(name, 40)}"
        ok, out = _healthy(svc["healthcheck"]["test"], env)
        if not ok:
            time.sleep(1.0)


def _run_stacks(
    tmp_path: Path,
    checkpoints: Path,
    stacks: list[tuple[dict[str, Any], Path]],
    while_up: Callable[[], None] = lambda: None,
) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """Start every `pde` service of each (services, keys folder) stack in order, each healthy
    before the next, then check them all again together and run ``while_up``; returns
    name -> (service, env)."""
    data_dir = tmp_path / "data"
    shutil.copytree(checkpoints, data_dir / "checkpoints")
    procs = ProcessGroup(tmp_path / "logs")
    started: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
    try:
        for services, keys_dir in stacks:
            for name in start_order(services):
                if name in OTHER_IMAGES | ONE_OFF:
                    continue
                svc, env = services[name], _service_env(services[name], data_dir, keys_dir)
                _start_healthy(procs, name, svc, env, data_dir)
                started[name] = (svc, env)
        for name, (svc, env) in started.items():
            ok, out = _healthy(svc["healthcheck"]["test"], env)
            assert ok, f"{name}: {out}"
        while_up()
    finally:
        procs.stop_all()
    # Stopped cleanly: the learner says so in its heartbeat, so it is unhealthy now.
    ok, out = _healthy(started["learner"][0]["healthcheck"]["test"], started["learner"][1])
    assert not ok and "stopped" in out, out
    return started


def _ports(pg_port: int) -> dict[str, str]:
    ports = {"ROBOT_CMD_PORT": free_port(), "ROBOT_OBS_PORT": free_port(), "UI_PORT": free_port()}
    # LEARNER_DEVICE=cpu: the compose default (cuda) needs the GPU that CI does not have.
    return {"ROBOT_BACKEND": "sim", "POSTGRES_PORT": str(pg_port), "LEARNER_DEVICE": "cpu"} | {
        k: str(v) for k, v in ports.items()
    }


@needs_compose
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_single_machine_services_start_and_answer_their_healthchecks(
    tmp_path: Path, fresh_db: int, sft_checkpoints: Path
) -> None:
    services = config(env_file(tmp_path, **_ports(fresh_db)), "sim")["services"]
    started = _run_stacks(tmp_path, sft_checkpoints, [(services, tmp_path / "no-keys")])
    assert set(started) == set(services) - OTHER_IMAGES - ONE_OFF


@needs_compose
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_two_machine_services_start_over_the_curve_link(
    tmp_path: Path, fresh_db: int, sft_checkpoints: Path
) -> None:
    keys = tmp_path / "keys"
    keys_init(keys, list(DEFAULT_CLIENTS))
    # Both "machines" on loopback here; the link has keys all the same, as on the lab LAN. The
    # robot configuration is the example's (sim backend: normal scheduling, no SCHED_FIFO thread).
    env = env_file(tmp_path, ROBOT_LINK_HOST="127.0.0.1", ROBOT_PC_HOST="127.0.0.1", **_ports(fresh_db))
    robot = config(env, stack=ROBOT)["services"]
    workstation = config(env, "sim", WORKSTATION)["services"]
    endpoint = workstation["learner"]["environment"]["PDE_ROBOT_CMD_ENDPOINT"]

    # A plain client of the robot stack's server gets nothing (checked while every service is up).
    def plain_client_refused() -> None:
        with RobotClient(endpoint, "stranger", timeout_s=0.5) as c, pytest.raises(RobotServerError) as e:
            c.connect()
        assert e.value.code is ErrorCode.TIMEOUT

    stacks = [(robot, keys / "robot-pc"), (workstation, keys / "workstation")]
    started = _run_stacks(tmp_path, sft_checkpoints, stacks, while_up=plain_client_refused)
    assert set(started) == {"robot_server"} | ALWAYS[WORKSTATION] - {"postgres"}


@needs_compose
@pytest.mark.parametrize("stack", [SINGLE, WORKSTATION])
def test_the_tasks_file_reaches_the_learner_supervisor_and_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: str
) -> None:
    readers = ("learner", "supervisor", "operator_ui")
    services = config(env_file(tmp_path), stack=stack)["services"]
    example = f"{REPO_ROOT / 'config' / 'tasks.example.toml'}:/etc/pde/tasks.toml:ro"
    for name in readers:  # default: the committed example, read-only where PDE_TASKS_FILE names it
        assert example in services[name]["volumes"], name
        assert services[name]["environment"]["PDE_TASKS_FILE"] == "/etc/pde/tasks.toml", name
    assert "PDE_TASKS_FILE" not in services.get("robot_server", {}).get("environment", {})  # pose: Reset
    ours = tmp_path / "tasks.toml"
    ours.write_text('[tasks.stack_cups]\nprompt = "stack the blue cup on the red cup"\n')
    services = config(env_file(tmp_path, TASKS_FILE=str(ours)), stack=stack)["services"]
    for name in readers:
        assert f"{ours}:/etc/pde/tasks.toml:ro" in services[name]["volumes"], name
    # The learner's settings, with the file where the container finds it, know the lab's task.
    learner = config(env_file(tmp_path, TASKS_FILE=str(ours), LOOP_TASKS='["stack_cups"]'), stack=stack)
    settings = _learner_settings(learner["services"]["learner"], monkeypatch)
    assert settings.tasks == ["stack_cups"] and settings.catalogue.get("stack_cups").builtin is False
