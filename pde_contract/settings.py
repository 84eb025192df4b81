"""Settings that several services share, declared once: the database, the data folder (and
``DataLayout``, what lives where inside it), the robot server's command endpoint and the tasks
file. A service's settings class takes each through one of these fields, which reads the
service's own variable first (``PDE_LOOP_DATABASE_URL``) and then the shared one
(``PDE_DATABASE_URL``, as docker-compose.yml sets it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field

DEFAULT_DATABASE_URL = "sqlite:///data/pde.db"
DEFAULT_DATA_DIR = Path("data")
DEFAULT_ROBOT_CMD_ENDPOINT = "tcp://127.0.0.1:5556"
# The rate the robot server runs chunks at unless told otherwise (its PDE_ROBOT_CONTROL_RATE_HZ):
# what SFT assumes a LeRobot dataset's rows are spaced at (`pde learner sft --control-rate-hz`).
DEFAULT_CONTROL_RATE_HZ = 10.0


@dataclass(frozen=True)
class DataLayout:
    """What lives where under the data folder (``PDE_DATA_DIR``; ``/data``, the ``pde-data`` volume, in
    the images). Every service, the demo and SFT build their paths here, so a file one writes is where
    another reads it."""

    root: Path = DEFAULT_DATA_DIR

    @property
    def media(self) -> Path:
        """Episode files and their videos (the store's media folder)."""
        return self.root / "media"

    @property
    def record(self) -> Path:
        """The page's recording session's working files (a take's frames before it is kept)."""
        return self.media / "record"

    @property
    def checkpoints(self) -> Path:
        """Policy versions; version 0 is the SFT policy."""
        return self.root / "checkpoints"

    @property
    def demos(self) -> Path:
        """Demonstration episode files, one folder per task, for SFT."""
        return self.root / "demos"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def runs(self) -> Path:
        """One folder per run of the loop or SFT: TensorBoard event files, ``episodes.jsonl`` and
        ``pde report``'s page (learner/run_log.py); ``tensorboard --logdir`` this."""
        return self.logs / "runs"

    @property
    def sqlite_file(self) -> Path:
        """A SQLite database in the data folder (the demo's; a lab's compose uses PostgreSQL)."""
        return self.root / "pde.db"

    @property
    def sqlite_url(self) -> str:
        return f"sqlite:///{self.sqlite_file}"


# Service prefixes whose DATABASE_URL a tool that belongs to no service (pde health, the migrations)
# accepts, in this order, before the shared PDE_DATABASE_URL.
SERVICE_PREFIXES = ("PDE_LOOP_", "PDE_SUPERVISOR_", "PDE_UI_")


def resolve_database_url(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The database URL for a tool outside the services: ``explicit``, else the first of
    ``<service prefix>DATABASE_URL``, else ``PDE_DATABASE_URL``, else the default. The services read
    theirs through ``database_url_field`` (their own variable, then the shared one)."""
    if explicit:
        return explicit
    env = os.environ if environ is None else environ
    for var in (*(f"{p}DATABASE_URL" for p in SERVICE_PREFIXES), "PDE_DATABASE_URL"):
        if env.get(var):
            return env[var]
    return DEFAULT_DATABASE_URL


def _shared(prefix: str, name: str, default: Any, description: str) -> Any:
    """A field read from ``<prefix><NAME>``, else ``PDE_<NAME>``, else ``default``."""
    if not (prefix.startswith("PDE_") and prefix.endswith("_")):
        raise ValueError(f"a settings prefix looks like 'PDE_LOOP_', got {prefix!r}")
    env = name.upper()
    return Field(
        default,
        # Only these two variables: a bare DATABASE_URL belongs to other software on the machine.
        # The class needs populate_by_name=True to take the field by its name as an argument.
        validation_alias=AliasChoices(f"{prefix}{env}", f"PDE_{env}"),
        description=description,
    )


def database_url_field(prefix: str) -> Any:
    return _shared(
        prefix,
        "database_url",
        DEFAULT_DATABASE_URL,
        "SQLAlchemy URL of the shared database (sqlite:///... or postgresql+psycopg://...)",
    )


def data_dir_field(prefix: str) -> Any:
    return _shared(
        prefix, "data_dir", DEFAULT_DATA_DIR, "episode files and videos under <data_dir>/media, checkpoints"
    )


def robot_cmd_endpoint_field(prefix: str) -> Any:
    return _shared(
        prefix, "robot_cmd_endpoint", DEFAULT_ROBOT_CMD_ENDPOINT, "the robot server's ROUTER socket"
    )


def wandb_project_field(prefix: str) -> Any:
    return _shared(
        prefix,
        "wandb_project",
        "",
        "Weights & Biases project that also gets the run's curves (needs wandb installed); empty: off",
    )


def tasks_file_field() -> Any:
    """``PDE_TASKS_FILE``: the lab's tasks file (TOML, pde_contract/tasks.py); empty: the paper's
    ten only. One variable for every service (no per-service override): the loop, the supervisor,
    the page and SFT must agree on each task's prompt."""
    # The class needs populate_by_name=True to take the field by its name as an argument.
    return Field(
        "",
        validation_alias="PDE_TASKS_FILE",
        description="the lab's tasks file (TOML; example config/tasks.example.toml); empty: the paper's ten",
    )
