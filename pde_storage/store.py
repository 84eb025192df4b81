"""The Store: the one place where the learner's loop, the supervisor and the operator page read
and write shared state. Every method is one short transaction and returns plain rows.

``Store`` is a facade over one repository per aggregate (``pde_storage.repos``), all on one
backend: tasks with their prompts and state (``TaskRepository``), episodes with their labels and
files (``EpisodeRepository``), telemetry (``TelemetryRepository``: checkpoints, supervisor calls,
metrics) and the message tables (``IntentRepository``: intents, service states). A service that
uses only part of it states which part with the Protocols in ``pde_storage.protocols``."""

from __future__ import annotations

from pathlib import Path

from pde_contract.settings import DEFAULT_DATABASE_URL, DataLayout
from pde_storage.repos.base import Backend
from pde_storage.repos.episodes import EpisodeRepository
from pde_storage.repos.intents import IntentRepository
from pde_storage.repos.tasks import TASK_STATE_FIELDS, TaskRepository
from pde_storage.repos.telemetry import TelemetryRepository

DEFAULT_URL = DEFAULT_DATABASE_URL
DEFAULT_MEDIA_DIR = str(DataLayout().media)

__all__ = ["DEFAULT_MEDIA_DIR", "DEFAULT_URL", "TASK_STATE_FIELDS", "Store"]


class Store(TaskRepository, EpisodeRepository, TelemetryRepository, IntentRepository):
    """All four repositories on one backend (the repositories share no state but the backend,
    and no method name, so inheriting them all is the whole facade)."""

    def __init__(self, url: str, media_dir: str | Path, *, migrate: bool = True) -> None:
        super().__init__(Backend(url, media_dir, migrate=migrate))
        self.url = self.backend.url

    @classmethod
    def open(cls, url: str = DEFAULT_URL, media_dir: str | Path = DEFAULT_MEDIA_DIR) -> Store:
        """Connect and bring the schema to the newest Alembic revision."""
        return cls(url, media_dir)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self.backend.write_engine.dialect.name
