"""The robot configuration file: one TOML file for every FR3, safety, camera and reset setting.

    [robot]   RobotServerSettings (robot_server/settings.py): box, limits, cameras, RT priority
    [franka]  FrankaConfig (robot_server/robots/franka/config.py): dynamics, collision, load, home

The file is one more source of those same settings classes, not a copy of them: a flag beats an
environment variable (``PDE_ROBOT_<KEY>``, ``PDE_FRANKA_<KEY>``), which beats the file, which beats
the class default. ``PDE_ROBOT_CONFIG`` (or ``pde robot-server --config``) names the file; the
compose stacks mount it read-only at ``/config/robot.toml``. config/robot.example.toml lists every
key. An unknown section or key stops the start with the known ones.
"""

from __future__ import annotations

import enum
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
)

ENV_CONFIG_FILE = "PDE_ROBOT_CONFIG"
SECTIONS = ("robot", "franka")
EXAMPLE = "config/robot.example.toml"

# Where a value came from: "default", "file", "environment", "flag" (or the setting that passed it
# as an argument, e.g. "[robot] fci_host" for the FR3's host).
Source = str


class ConfigFileError(ValueError):
    """The robot configuration file cannot be used; the message says what to change."""


def config_file_path() -> Path | None:
    """The file ``PDE_ROBOT_CONFIG`` names (None: no file, defaults and environment only)."""
    value = os.environ.get(ENV_CONFIG_FILE, "").strip()
    return Path(value) if value else None


def read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """The file's sections, checked for unknown sections (keys are checked per section)."""
    if path.is_dir():
        raise ConfigFileError(
            f"the robot configuration {path} is a directory, not a file (Docker creates an empty "
            f"directory when the file to mount does not exist): cp {EXAMPLE} to the file that "
            "ROBOT_CONFIG names, edit it, and start again"
        )
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigFileError(
            f"the robot configuration {path} ({ENV_CONFIG_FILE}) does not exist: cp {EXAMPLE} {path} "
            "and edit it"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"the robot configuration {path} is not valid TOML: {e}") from None
    for key, value in data.items():
        if key not in SECTIONS:
            raise ConfigFileError(
                f"{path}: unknown section or key {key!r} at the top level; known sections: "
                f"{', '.join(f'[{s}]' for s in SECTIONS)}"
            )
        if not isinstance(value, dict):
            raise ConfigFileError(f"{path}: {key!r} must be a section ([{key}]), not a value")
    return data


class ConfigFileSource(PydanticBaseSettingsSource):
    """One section of the robot configuration file as a pydantic-settings source."""

    def __init__(self, settings_cls: type[FileSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.section = settings_cls.config_section
        self.path = path

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the whole section at once

    def __call__(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        values = read_config_file(self.path).get(self.section, {})
        cls: type[FileSettings] = self.settings_cls  # type: ignore[assignment]
        for key in values:
            if key in cls.refused_in_file:
                raise ConfigFileError(f"{self.path}: [{self.section}] {key}: {cls.refused_in_file[key]}")
            if key not in cls.model_fields:
                known = ", ".join(sorted(set(cls.model_fields) - set(cls.refused_in_file)))
                raise ConfigFileError(
                    f"{self.path}: unknown key {key!r} in [{self.section}]; known keys: {known}"
                )
        return dict(values)


class FileSettings(BaseSettings):
    """Settings that also read their section of the robot configuration file: flags (init
    arguments) > environment > file > defaults."""

    config_section: ClassVar[str]
    # Keys the file must not hold, with what to do instead (secrets: a file path, never inline).
    refused_in_file: ClassVar[dict[str, str]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file_settings = ConfigFileSource(cls, config_file_path())
        return (init_settings, env_settings, dotenv_settings, file_settings, file_secret_settings)


@dataclass(frozen=True, slots=True)
class EffectiveSetting:
    """One setting as the server runs with it, and where its value came from."""

    section: str
    name: str
    value: Any
    source: Source


def effective_settings(
    settings: FileSettings, flags: dict[str, Any] | None = None, flag_source: Source = "flag"
) -> list[EffectiveSetting]:
    """Every field of ``settings`` with its value and source (``flags``: the init arguments it
    was built with, shown as ``flag_source``). Secret values print masked (pydantic's SecretStr)."""
    cls = type(settings)
    flags = flags or {}
    from_env = EnvSettingsSource(cls)()
    from_file = ConfigFileSource(cls, config_file_path())()
    out = []
    for name in cls.model_fields:
        source: Source = (
            flag_source
            if name in flags
            else "environment"
            if name in from_env
            else "file"
            if name in from_file
            else "default"
        )
        if source != "file" and name in from_file:
            # Said on the line: a compose stack's variable silently beating the file is a surprise.
            source += f", over the file's {_show(from_file[name])}"
        out.append(EffectiveSetting(cls.config_section, name, getattr(settings, name), source))
    return out


def format_settings(rows: list[EffectiveSetting]) -> list[str]:
    """One line per setting: ``[section] name = value  (source)``."""
    return [f"[{r.section}] {r.name} = {_show(r.value)}  ({r.source})" for r in rows]


def _show(value: Any) -> str:
    """TOML-like: what a line in the file would say."""
    if isinstance(value, SecretStr):
        return '"**********"' if value.get_secret_value() else '""'
    if isinstance(value, BaseModel):
        return _show(value.model_dump())
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, enum.Enum):
        return _show(value.value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    return "none" if value is None else str(value)
