"""One repository per aggregate of the shared state, each usable alone on a ``Backend``;
``pde_storage.Store`` inherits them all."""

from pde_storage.repos.base import Backend, Repository
from pde_storage.repos.episodes import EpisodeRepository
from pde_storage.repos.intents import IntentRepository
from pde_storage.repos.tasks import TaskRepository
from pde_storage.repos.telemetry import TelemetryRepository

__all__ = [
    "Backend",
    "EpisodeRepository",
    "IntentRepository",
    "Repository",
    "TaskRepository",
    "TelemetryRepository",
]
