"""Shared state of the PDE system (tasks, prompts, episodes, labels, checkpoints, metrics) in
SQLite or PostgreSQL, plus the episode files and videos under a media folder.

    store = Store.open(url="sqlite:///data/pde.db", media_dir="data/media")
"""

from pde_storage.errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    StoredValueError,
    StoreError,
)
from pde_storage.rows import (
    CANONICAL_SUCCESS_WINDOW,
    CheckpointRow,
    ChunkInfo,
    EpisodeRow,
    FailedIntentRow,
    IntentRow,
    LabelRow,
    PromptRow,
    ServiceStateRow,
    SupervisorCallRow,
    TaskRow,
    TaskState,
)
from pde_storage.store import Store

__all__ = [
    "CANONICAL_SUCCESS_WINDOW",
    "CheckpointRow",
    "ChunkInfo",
    "ConflictError",
    "EpisodeRow",
    "FailedIntentRow",
    "IntentRow",
    "InvalidArgumentError",
    "LabelRow",
    "NotFoundError",
    "PromptRow",
    "ServiceStateRow",
    "Store",
    "StoreError",
    "StoredValueError",
    "SupervisorCallRow",
    "TaskRow",
    "TaskState",
]
