"""UISettings takes the database URL, data folder and robot endpoint from pde_contract.settings, as
the loop and the supervisor do."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from operator_ui.settings import UISettings
from pde_contract import settings as shared


@pytest.mark.parametrize(
    ("name", "declared"),
    [
        ("database_url", shared.database_url_field("PDE_UI_")),
        ("data_dir", shared.data_dir_field("PDE_UI_")),
        ("robot_cmd_endpoint", shared.robot_cmd_endpoint_field("PDE_UI_")),
    ],
)
def test_shared_fields_are_the_contracts(name: str, declared: FieldInfo) -> None:
    field = UISettings.model_fields[name]
    assert field.default == declared.default
    assert field.validation_alias == declared.validation_alias
    assert field.description == declared.description


def test_own_variable_wins_over_the_shared_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_DATA_DIR", "/shared")
    monkeypatch.setenv("PDE_ROBOT_CMD_ENDPOINT", "tcp://10.0.0.2:5556")
    monkeypatch.setenv("PDE_UI_ROBOT_CMD_ENDPOINT", "tcp://10.0.0.3:5556")
    monkeypatch.delenv("PDE_UI_DATA_DIR", raising=False)
    s = UISettings()
    assert (s.data_dir, s.robot_cmd_endpoint, s.media_dir) == (
        Path("/shared"),
        "tcp://10.0.0.3:5556",
        Path("/shared/media"),
    )
