"""The alembic CLI's configuration (alembic.ini at the repository root) on pde_storage's
migrations, as a developer runs it to write a migration: it connects by itself, builds the schema
and finds the models in step with it. Run through alembic's command API (what the CLI calls), with
the URL given as the CLI's ``-x url=...``."""

from __future__ import annotations

import argparse
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect

from pde_storage import Store
from pde_storage.db import make_engine

ROOT = Path(__file__).resolve().parents[2]


def _cli_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.cmd_opts = argparse.Namespace(x=[f"url={url}"])  # as `alembic -x url=...` leaves them
    return cfg


def test_the_cli_builds_the_schema_and_finds_no_model_change(db_url: str, tmp_path: Path) -> None:
    command.upgrade(_cli_config(db_url), "head")
    engine = make_engine(db_url)
    try:
        assert {"episodes", "intents", "service_states"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    # `alembic check` autogenerates against the database and raises on any operation: the models
    # and the migrations agree.
    command.check(_cli_config(db_url))
    # A database the CLI migrated is one the services open as it is.
    with Store.open(db_url, tmp_path / "media") as store:
        assert store.tasks() == []
