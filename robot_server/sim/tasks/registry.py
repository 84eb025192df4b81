"""Names and canonical prompts, in the paper's order."""

from __future__ import annotations

from collections.abc import Callable

from pde_contract.tasks import PAPER_TASKS
from robot_server.sim.tasks.base import Task

# The paper's table, shared with every service through the wire contract.
CANONICAL_PROMPTS: dict[str, str] = PAPER_TASKS
TASK_NAMES: tuple[str, ...] = tuple(CANONICAL_PROMPTS)

# name -> factory; filled by robot_server.sim.tasks.tabletop
_FACTORIES: dict[str, Callable[[], Task]] = {}


def register(name: str, factory: Callable[[], Task]) -> None:
    if name not in CANONICAL_PROMPTS:
        raise ValueError(f"task {name!r} has no canonical prompt: add it to CANONICAL_PROMPTS")
    _FACTORIES[name] = factory


def load(name: str) -> Task:
    """The task called ``name``. Raises ValueError listing the valid names."""
    if not _FACTORIES:
        from robot_server.sim.tasks import tabletop  # noqa: F401 - registers the ten tasks
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(_FACTORIES) or TASK_NAMES)}")
    return factory()
