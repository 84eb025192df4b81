"""The robot configuration file feeds RobotServerSettings and FrankaConfig: precedence (flag >
environment > file > default) with each value's source, the committed example, and bad files
that stop with a message naming what is wrong."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from robot_server.config_file import ENV_CONFIG_FILE, ConfigFileError, effective_settings, format_settings
from robot_server.robots.franka.config import FrankaConfig
from robot_server.settings import RobotServerSettings
from tests.helpers import REPO_ROOT

EXAMPLE = REPO_ROOT / "config" / "robot.example.toml"


@pytest.fixture
def robot_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in (
        "PDE_ROBOT_WORKSPACE_MIN_M",
        "PDE_ROBOT_CONTROL_RATE_HZ",
        "PDE_FRANKA_RELATIVE_DYNAMICS_FACTOR",
    ):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "robot.toml"
    monkeypatch.setenv(ENV_CONFIG_FILE, str(path))
    return path


def test_flag_beats_environment_beats_file_beats_default(
    robot_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    robot_toml.write_text(
        "[robot]\nworkspace_min_m = [0.2, -0.4, 0.03]\ncontrol_rate_hz = 12.0\nheartbeat_timeout_s = 0.5\n"
        "[franka]\nrelative_dynamics_factor = 0.1\n"
    )
    monkeypatch.setenv("PDE_ROBOT_CONTROL_RATE_HZ", "15")
    flags: dict[str, Any] = {"heartbeat_timeout_s": 0.3}
    settings = RobotServerSettings(**flags)
    assert settings.workspace_min_m == (0.2, -0.4, 0.03)
    assert settings.control_rate_hz == 15.0
    assert settings.heartbeat_timeout_s == 0.3
    sources = {r.name: r.source for r in effective_settings(settings, flags)}
    assert sources["workspace_min_m"] == "file"
    # A variable or flag that beats the file says so (a compose stack's variable would otherwise
    # hide the file's value without a word).
    assert sources["control_rate_hz"] == "environment, over the file's 12.0"
    assert sources["heartbeat_timeout_s"] == "flag, over the file's 0.5"
    assert sources["workspace_max_m"] == "default"
    franka = FrankaConfig()
    assert franka.relative_dynamics_factor == 0.1
    lines = format_settings(effective_settings(franka))
    assert "[franka] relative_dynamics_factor = 0.1  (file)" in lines
    monkeypatch.setenv("PDE_FRANKA_RELATIVE_DYNAMICS_FACTOR", "0.2")
    assert FrankaConfig().relative_dynamics_factor == 0.2


def test_the_example_loads_and_names_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CONFIG_FILE, str(EXAMPLE))
    settings = RobotServerSettings(backend="franka")
    franka = FrankaConfig()
    assert franka.relative_dynamics_factor == 0.1  # the first day's value (docs/lab-setup.md)
    assert settings.rt_priority == 40 and set(settings.realsense) == {"external", "wrist"}
    text = EXAMPLE.read_text()
    for cls in (RobotServerSettings, FrankaConfig):
        for name in set(cls.model_fields) - set(cls.refused_in_file):
            key_or_table = rf"^(#? ?{name} = |\[{cls.config_section}\.{name}[.\]])"
            assert re.search(key_or_table, text, re.M), f"{name} is not in {EXAMPLE.name}"


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "[franka]\nrelative_dynamic_factor = 0.1\n",
            r"unknown key 'relative_dynamic_factor' in \[franka\]; ",
        ),
        (
            "[robot]\nworkspace_box = 1\n",
            r"unknown key 'workspace_box' in \[robot\]; known keys: .*workspace_max_m",
        ),
        (
            "[fr3]\nhost = 'x'\n",
            r"unknown section or key 'fr3' at the top level; known sections: \[robot\], \[franka\]",
        ),
        ("relative_dynamics_factor = 0.1\n", r"unknown section or key 'relative_dynamics_factor'"),
        ("[franka]\ndesk_password = 'x'\n", r"desk_password: a password never goes into this file"),
        ("[robot\n", r"is not valid TOML"),
    ],
)
def test_a_bad_file_names_what_is_wrong(robot_toml: Path, text: str, message: str) -> None:
    robot_toml.write_text(text)
    with pytest.raises(ConfigFileError, match=message):
        RobotServerSettings()
        FrankaConfig()


def test_a_bad_value_in_the_file_names_the_field(robot_toml: Path) -> None:
    robot_toml.write_text("[franka]\nrelative_dynamics_factor = 1.5\n")
    with pytest.raises(
        ValueError, match=r"relative_dynamics_factor\n  Input should be less than or equal to 1"
    ):
        FrankaConfig()


def test_a_missing_file_or_a_directory_says_to_copy_the_example(robot_toml: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"does not exist: cp config/robot.example.toml"):
        RobotServerSettings()
    robot_toml.mkdir()  # what Docker leaves when the file to mount does not exist
    with pytest.raises(ConfigFileError, match=r"is a directory, not a file"):
        RobotServerSettings()


def test_the_desk_password_comes_from_a_secrets_file_and_never_prints(
    tmp_path: Path, robot_toml: Path
) -> None:
    secret = tmp_path / "desk_password"
    secret.write_text("s3cret-Desk\n")
    robot_toml.write_text(f'[franka]\ndesk_user = "admin"\ndesk_password_file = "{secret}"\n')
    franka = FrankaConfig()
    assert franka.desk_enabled and franka.desk_password.get_secret_value() == "s3cret-Desk"
    printed = "\n".join(format_settings(effective_settings(franka)))
    assert "s3cret" not in printed and '[franka] desk_password = "**********"' in printed
    robot_toml.write_text(f'[franka]\ndesk_user = "admin"\ndesk_password_file = "{tmp_path / "nope"}"\n')
    with pytest.raises(ValueError, match=r"desk_password_file .*nope cannot be read"):
        FrankaConfig()


def test_cameras_settings_name_known_cameras(robot_toml: Path) -> None:
    robot_toml.write_text("[robot]\ncameras = ['wrist']\n[robot.realsense.external]\nfps = 15\n")
    with pytest.raises(ValueError, match=r"realsense settings for unknown camera\(s\) \['external'\]"):
        RobotServerSettings()
    robot_toml.write_text(
        "[robot.realsense.wrist]\nfps = 15\nexposure_us = 8000\nauto_exposure_priority = false\n"
    )
    wrist = RobotServerSettings().realsense["wrist"]
    assert (wrist.fps, wrist.width, wrist.exposure_us, wrist.auto_exposure_priority) == (15, 640, 8000, False)


def test_rt_priority_defaults_by_backend_and_stays_below_the_irq_threads(robot_toml: Path) -> None:
    robot_toml.write_text("")
    assert RobotServerSettings(backend="sim").rt_priority == 0
    assert RobotServerSettings(backend="franka").rt_priority == 40
    with pytest.raises(ValueError, match="less than or equal to 49"):
        RobotServerSettings(rt_priority=80)
