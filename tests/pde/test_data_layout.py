"""One home per fact: every service, the demo and SFT take their paths from DataLayout(data_dir), and
tools outside the services resolve the database URL one way (pde_contract.settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.main import LearnerSettings
from operator_ui.settings import UISettings
from pde_contract.settings import DEFAULT_DATABASE_URL, DataLayout, resolve_database_url
from supervisor.settings import SupervisorSettings


def test_one_data_layout_for_every_service_the_demo_and_sft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_DATA_DIR", "/data")
    layout = DataLayout(Path("/data"))
    assert UISettings().media_dir == SupervisorSettings().media_dir == layout.media == Path("/data/media")
    # `pde learner sft` in the compose learner container writes where the loop reads (/data, the
    # volume), not under the image's working directory
    learner = LearnerSettings()
    assert learner.checkpoints == str(layout.checkpoints) and learner.demos == "/data/demos"
    monkeypatch.setenv("PDE_LEARNER_CHECKPOINT_DIR", "/elsewhere")
    assert LearnerSettings().checkpoints == "/elsewhere"
    assert layout.sqlite_url == "sqlite:////data/pde.db"


def test_tools_outside_the_services_resolve_the_database_url_one_way() -> None:
    assert resolve_database_url(environ={}) == DEFAULT_DATABASE_URL
    shared = {"PDE_DATABASE_URL": "postgresql+psycopg://db/pde"}
    assert resolve_database_url(environ=shared) == "postgresql+psycopg://db/pde"
    own = {**shared, "PDE_SUPERVISOR_DATABASE_URL": "sqlite:///s.db"}
    assert resolve_database_url(environ=own) == "sqlite:///s.db"
    assert resolve_database_url("sqlite:///x.db", environ=own) == "sqlite:///x.db"
