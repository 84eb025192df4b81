"""The robot configuration file in the compose stacks: every stack that runs the robot server mounts
it read-only where PDE_ROBOT_CONFIG points, sets no variable that would shadow one of its settings,
and the server started with the stack's environment (as a plain process, as in test_compose.py)
runs with the file's values: read back from the running server, on the sim backend and on the
franka backend against franky-sim. The franka server also finds a fault latched before its restart
in the data volume and keeps it until the operator's reset."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pde.keys import DEFAULT_CLIENTS
from pde.keys import init as keys_init
from pde.procs import ProcessGroup
from pde_contract.client import RobotClient
from pde_contract.link import ClientCurve
from pde_contract.messages import RobotFault, Status
from robot_server.config_file import ENV_CONFIG_FILE
from robot_server.settings import RobotServerSettings
from tests.compose.test_compose import (
    PROFILES,
    ROBOT,
    SINGLE,
    STACKS,
    _bind_mounts,
    _command,
    _service_env,
    _start_healthy,
    config,
    env_file,
    needs_compose,
)
from tests.helpers import free_port, pde_command

# What a stack may set for the robot server itself: where it runs and how it is reached. Every
# other setting belongs to the file; a stack variable would silently override it.
WHERE_IT_RUNS = {
    "backend",
    "host",
    "cmd_port",
    "obs_port",
    "link_secret_key",
    "link_clients_dir",
    "sim_layout_spread",
}

BOX_MIN_M = (0.2, -0.3, 0.05)
BOX_MAX_M = (0.6, 0.35, 0.55)  # its top above the home TCP (z 0.487 m): config_check refuses less


def robot_servers(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if s.get("command", [None])[0] == "robot-server"}


@needs_compose
@pytest.mark.parametrize("stack", STACKS)
def test_every_robot_server_mounts_the_robot_config_read_only(tmp_path: Path, stack: str) -> None:
    robot_toml = tmp_path / "lab-robot.toml"
    for profiles in PROFILES[stack]:
        services = config(env_file(tmp_path, ROBOT_CONFIG=str(robot_toml)), profiles, stack)["services"]
        servers = robot_servers(services)
        assert bool(servers) == (stack in (SINGLE, ROBOT)), (stack, profiles)
        for name, svc in servers.items():
            env = svc["environment"]
            inside = env[ENV_CONFIG_FILE]
            mounts = _bind_mounts(svc, read_only=True)
            assert mounts.get(str(robot_toml)) == inside, (name, svc["volumes"])
            assert "/run/secrets/pde" in mounts.values()  # where desk_password_file points
            shadowing = {
                k
                for k in env
                if k.startswith("PDE_FRANKA_")
                or (
                    k.startswith("PDE_ROBOT_")
                    and k.removeprefix("PDE_ROBOT_").lower()
                    in set(RobotServerSettings.model_fields) - WHERE_IT_RUNS
                )
            }
            assert not shadowing, (
                f"{stack} sets {shadowing}: they would override the robot configuration file"
            )


def _write_config(path: Path, franka: str = "") -> Path:
    path.write_text(
        "[robot]\n"
        f"workspace_min_m = {list(BOX_MIN_M)}\n"
        f"workspace_max_m = {list(BOX_MAX_M)}\n"
        "rt_priority = 0  # no SCHED_FIFO control thread on a shared test machine\n" + franka
    )
    return path


def _status(client: RobotClient) -> Status:
    client.connect()
    return client.status()


def _print_config(env: dict[str, str]) -> str:
    r = subprocess.run(
        pde_command("robot-server", "--print-config"), env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@needs_compose
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sim_server_of_the_single_machine_stack_runs_with_the_mounted_file(tmp_path: Path) -> None:
    robot_toml = _write_config(tmp_path / "robot.toml")
    port = str(free_port())
    values = {"ROBOT_CONFIG": str(robot_toml), "ROBOT_BACKEND": "sim", "ROBOT_CMD_PORT": port}
    svc = config(env_file(tmp_path, ROBOT_OBS_PORT=str(free_port()), **values))["services"]["robot_server"]
    env = _service_env(svc, tmp_path / "data", tmp_path / "no-keys")
    assert env[ENV_CONFIG_FILE] == str(robot_toml)
    printed = _print_config(env)
    assert f"[robot] workspace_min_m = {list(BOX_MIN_M)}  (file)" in printed
    assert '[robot] backend = "sim"  (environment)' in printed
    procs = ProcessGroup(tmp_path / "logs")
    try:
        _start_healthy(procs, "robot_server", svc, env, tmp_path / "data")
        with RobotClient(f"tcp://127.0.0.1:{port}", name="test", timeout_s=5.0) as client:
            st = _status(client)
        assert tuple(st.workspace_min_m) == BOX_MIN_M and tuple(st.workspace_max_m) == BOX_MAX_M
        assert st.relative_dynamics_factor is None  # the sim has no dynamics factor
        assert "workspace_min_m = [0.2, -0.3, 0.05]  (file)" in procs.tail("robot_server", 200)
    finally:
        procs.stop_all()


@needs_compose
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_franka_server_of_the_robot_pc_stack_runs_with_the_mounted_file(tmp_path: Path) -> None:
    from robot_server.robots.franka.fci_sim import FciSim

    keys = tmp_path / "keys"
    keys_init(keys, list(DEFAULT_CLIENTS))
    port = str(free_port())
    with FciSim(realtime=True) as sim:
        robot_toml = _write_config(
            tmp_path / "robot.toml",
            "cameras = []\n"
            "[franka]\n"
            f'host = "{sim.host}"\n'
            'realtime = "ignore"  # franky-sim: no PREEMPT_RT kernel here\n'
            "relative_dynamics_factor = 0.1\n"
            "gripper_homing = false\n"
            "home_dynamics_factor = 0.6\n"
            "home_timeout_s = 150.0  # franky-sim falls behind real time on a loaded machine\n",
        )
        # What a reflex left in the data volume before the server restarted.
        fault_file = tmp_path / "data" / "robot_fault.json"
        fault_file.parent.mkdir(parents=True)
        reflex = {
            "kind": "reflex",
            "detail": "FR3 reflex: cartesian_reflex.",
            "action": "Reset to acknowledge.",
        }
        fault_file.write_text(json.dumps(reflex | {"latched_at": "2026-11-26 15:00:00 UTC"}))
        values = {
            "ROBOT_CONFIG": str(robot_toml),
            "ROBOT_BACKEND": "franka",
            "ROBOT_LINK_HOST": "127.0.0.1",
            "ROBOT_CMD_PORT": port,
            "ROBOT_OBS_PORT": str(free_port()),
            "LINK_KEYS_DIR": str(keys / "robot-pc"),
        }
        svc = config(env_file(tmp_path, **values), stack=ROBOT)["services"]["robot_server"]
        env = _service_env(svc, tmp_path / "data", keys / "robot-pc")
        printed = _print_config(env)
        assert "[franka] relative_dynamics_factor = 0.1  (file)" in printed
        assert '[franka] realtime = "ignore"  (file)' in printed
        procs = ProcessGroup(tmp_path / "logs")
        try:
            _start_healthy(procs, "robot_server", svc, env, tmp_path / "data")
            curve = ClientCurve.from_files(
                keys / "workstation" / "server.key", keys / "workstation" / "learner.key_secret"
            )
            with RobotClient(f"tcp://127.0.0.1:{port}", name="test", timeout_s=5.0, curve=curve) as client:
                st = _status(client)
                # Read from franky's Robot in the server: the value reached the arm's controller.
                assert st.relative_dynamics_factor == pytest.approx(0.1)
                assert tuple(st.workspace_min_m) == BOX_MIN_M and tuple(st.workspace_max_m) == BOX_MAX_M
                assert (
                    st.fault is RobotFault.REFLEX and "before the robot server restarted" in st.fault_detail
                )
                assert st.fault_action == "Reset to acknowledge."
                client.reset(timeout_s=180.0)  # the operator acknowledges
                assert client.status().fault is RobotFault.NONE and not fault_file.exists()
        finally:
            procs.stop_all()


@needs_compose
def test_a_bad_file_stops_the_server_naming_the_key(tmp_path: Path) -> None:
    robot_toml = tmp_path / "robot.toml"
    robot_toml.write_text("[franka]\nrelative_dynamic_factor = 0.1\n")
    svc = config(env_file(tmp_path, ROBOT_CONFIG=str(robot_toml), ROBOT_BACKEND="franka"))["services"][
        "robot_server"
    ]
    env = _service_env(svc, tmp_path / "data", tmp_path / "no-keys")
    r = subprocess.run(_command(svc, tmp_path / "data"), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "unknown key 'relative_dynamic_factor' in [franka]" in r.stderr
    assert "relative_dynamics_factor" in r.stderr  # the known keys are listed
