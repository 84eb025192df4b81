"""pde_contract.settings: the database, data folder and robot endpoint, declared once for every
service's settings class."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_settings import BaseSettings, SettingsConfigDict

from pde_contract.settings import (
    DEFAULT_DATABASE_URL,
    data_dir_field,
    database_url_field,
    robot_cmd_endpoint_field,
)


class ExampleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_EXAMPLE_", populate_by_name=True)

    database_url: str = database_url_field("PDE_EXAMPLE_")
    data_dir: Path = data_dir_field("PDE_EXAMPLE_")
    robot_cmd_endpoint: str = robot_cmd_endpoint_field("PDE_EXAMPLE_")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "DATA_DIR", "ROBOT_CMD_ENDPOINT"):
        for var in (f"PDE_EXAMPLE_{name}", f"PDE_{name}", name):
            monkeypatch.delenv(var, raising=False)


def test_own_variable_then_shared_variable_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ExampleSettings().database_url == DEFAULT_DATABASE_URL
    monkeypatch.setenv("DATABASE_URL", "sqlite:///someone-elses.db")  # not ours: ignored
    assert ExampleSettings().database_url == DEFAULT_DATABASE_URL
    monkeypatch.setenv("PDE_DATABASE_URL", "sqlite:///shared.db")
    monkeypatch.setenv("PDE_DATA_DIR", "/shared")
    monkeypatch.setenv("PDE_ROBOT_CMD_ENDPOINT", "tcp://10.0.0.2:5556")
    s = ExampleSettings()
    assert (s.database_url, s.data_dir, s.robot_cmd_endpoint) == (
        "sqlite:///shared.db",
        Path("/shared"),
        "tcp://10.0.0.2:5556",
    )
    monkeypatch.setenv("PDE_EXAMPLE_DATABASE_URL", "sqlite:///mine.db")
    assert ExampleSettings().database_url == "sqlite:///mine.db"
    assert ExampleSettings(database_url="sqlite:///given.db").database_url == "sqlite:///given.db"


def test_a_prefix_must_look_like_one() -> None:
    with pytest.raises(ValueError, match="a settings prefix looks like 'PDE_LOOP_', got 'LOOP'"):
        database_url_field("LOOP")
