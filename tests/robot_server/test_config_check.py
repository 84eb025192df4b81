"""The robot configuration's physical sanity (robot_server/config_check.py), refused alike by
`pde robot-server` (start and --print-config) and `pde doctor`; the [franka] section checked on the
sim backend too; --print-config saying when a variable beats the file; start failures that name
their own cause (the port only when the bind failed)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from pde.doctor.main import main as doctor_main
from robot_server.config_check import cell_problems, home_tcp_m
from robot_server.config_file import ENV_CONFIG_FILE
from robot_server.robots.franka.config import FrankaConfig
from robot_server.settings import RobotServerSettings
from tests.fakes.fake_system import ready_robot_pc
from tests.helpers import REPO_ROOT, free_port, pde_command, subprocess_env
from tests.robot_server.franka.conftest import unused_loopback


@pytest.fixture(autouse=True)
def _no_robot_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.upper().startswith(("PDE_ROBOT_", "PDE_FRANKA_", "PDE_DATA_DIR")):
            monkeypatch.delenv(var)


def _env(tmp_path: Path, toml: str = "", **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in subprocess_env().items() if not k.upper().startswith(("PDE_ROBOT_", "PDE_FRANKA_"))
    }
    if toml:
        path = tmp_path / "robot.toml"
        path.write_text(toml)
        env[ENV_CONFIG_FILE] = str(path)
    return {**env, **extra}


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pde_command(*argv), env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("backend", ["sim", "franka"])
def test_the_defaults_are_sane(backend: Literal["sim", "franka"]) -> None:
    assert cell_problems(RobotServerSettings(backend=backend), FrankaConfig()) == []
    assert [round(float(v), 3) for v in home_tcp_m(RobotServerSettings(), FrankaConfig())] == [
        0.307,
        0.0,
        0.487,
    ]


def test_the_example_file_is_sane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CONFIG_FILE, str(REPO_ROOT / "config" / "robot.example.toml"))
    assert cell_problems(RobotServerSettings(backend="franka"), FrankaConfig()) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"backend": "franka", "heartbeat_timeout_s": 0.0},
            "heartbeat_timeout_s = 0.0 s: on the FR3 the watchdog must be on",
        ),
        ({"backend": "franka", "heartbeat_timeout_s": 5.0}, "and at most 1.0 s"),
        ({"backend": "franka", "pacing": "fast"}, "pacing = fast on the FR3"),
        ({"heartbeat_timeout_s": 0.05}, "not longer than one control period (0.1 s)"),
        (
            {"workspace_min_m": (0.15, -0.5, -0.05)},
            "workspace_min_m z = -0.05 m is below the table top (z = 0.0 m in the base frame)",
        ),
        (
            {"workspace_max_m": (1.2, 0.5, 0.55)},
            "workspace_max_m x = 1.2 m: no point of that wall is within the FR3's reach",
        ),
        (
            {"workspace_min_m": (0.15, -1.5, 0.015), "workspace_max_m": (0.75, -1.0, 0.55)},
            "workspace_max_m y = -1.0 m: no point of that wall is within the FR3's reach",
        ),
        (  # the box: top below the home TCP, so every episode starts 37 mm outside
            {"workspace_max_m": (0.75, 0.5, 0.45)},
            "the home pose's TCP (0.307, -0.000, 0.487) m is outside the workspace box: z = 0.487 m not in",
        ),
    ],
)
def test_each_insane_cell_is_refused_with_what_to_change(settings: dict[str, Any], message: str) -> None:
    problems = cell_problems(RobotServerSettings(**settings), FrankaConfig())
    assert any(message in p for p in problems), problems


def test_the_home_pose_is_the_franka_sections_on_the_arm() -> None:
    # A home pose moved out of the box (its TCP at z 0.582 m, over the 0.55 m top) is refused on the arm;
    # the sim homes to its own fixed pose.
    franka = FrankaConfig(home_joints_rad=(0.0, 0.3, 0.0, -1.0, 0.0, 1.3, 0.785))
    assert "the home pose's TCP" in " ".join(cell_problems(RobotServerSettings(backend="franka"), franka))
    assert cell_problems(RobotServerSettings(backend="sim"), franka) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_step_translation_m", 0.5), ("max_step_rotation_rad", 1.0), ("joint_margin_rad", 0.5)],
)
def test_per_step_limits_have_a_ceiling(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        kwargs: dict[str, Any] = {field: value}
        RobotServerSettings(**kwargs)


def test_print_config_and_doctor_refuse_the_same_box(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = "[robot]\nworkspace_max_m = [0.75, 0.5, 0.45]\n"
    done = _run(["robot-server", "--print-config", "--backend", "franka"], _env(tmp_path, toml))
    assert (
        done.returncode == 2 and "the home pose's TCP (0.307, -0.000, 0.487) m is outside" in done.stderr
    ), done
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_CONFIG_FILE, str(tmp_path / "robot.toml"))
        assert doctor_main([], system=ready_robot_pc()) == 2
    assert "the home pose's TCP (0.307, -0.000, 0.487) m is outside" in capsys.readouterr().err


def test_the_sim_backend_checks_and_shows_the_franka_section(tmp_path: Path) -> None:
    bad = _run(
        ["robot-server", "--print-config"], _env(tmp_path, "[franka]\nrelative_dynamics_factor = 2.0\n")
    )
    assert bad.returncode == 2 and "relative_dynamics_factor" in bad.stderr, bad
    toml = "[robot]\nsim_layout_spread = 0.5\n[franka]\nrelative_dynamics_factor = 0.1\n"
    done = _run(["robot-server", "--print-config"], _env(tmp_path, toml, PDE_ROBOT_SIM_LAYOUT_SPREAD="0.2"))
    assert done.returncode == 0, done
    assert "[franka] relative_dynamics_factor = 0.1  (file)" in done.stdout
    # A compose stack's variable beating the file is said on its line.
    assert "[robot] sim_layout_spread = 0.2  (environment, over the file's 0.5)" in done.stdout


def test_a_start_failure_names_the_port_only_when_the_bind_failed(tmp_path: Path) -> None:
    # franka backend against a loopback address where no FCI listens: no MuJoCo, no arm, ~1 s.
    env = _env(
        tmp_path, PDE_ROBOT_CAMERAS="[]", PDE_FRANKA_HOST=unused_loopback(), PDE_FRANKA_REALTIME="ignore"
    )
    cmd_port, obs_port = free_port(), free_port()
    argv = ["robot-server", "--backend", "franka", "--cmd-port", str(cmd_port), "--obs-port", str(obs_port)]
    refused = _run(argv, env)
    assert refused.returncode == 1 and "refused the FCI connection" in refused.stderr, refused
    assert "port" not in refused.stderr.rpartition("could not start")[2].lower()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", obs_port))
        taken.listen()
        busy = _run(argv, env)
    assert busy.returncode == 1, busy
    assert f"cannot bind tcp://127.0.0.1:{obs_port} (obs_port): Address already in use" in busy.stderr
