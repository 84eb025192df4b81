"""Names and canonical prompts, in the paper's order, and the task behind each name: a static
table built at import from the task modules' own tables (no registration side effects, no lazy
import)."""

from __future__ import annotations

from collections.abc import Callable

from pde_contract.tasks import PAPER_TASKS
from robot_server.sim.tasks.base import Task
from robot_server.sim.tasks.tabletop import TABLETOP_TASKS, TabletopTask

# The paper's table, shared with every service through the wire contract.
CANONICAL_PROMPTS: dict[str, str] = PAPER_TASKS
TASK_NAMES: tuple[str, ...] = tuple(CANONICAL_PROMPTS)


def _tabletop(name: str, prop: str, destination: str) -> Callable[[], Task]:
    return lambda: TabletopTask(name=name, prop=prop, destination=destination)


_FACTORIES: dict[str, Callable[[], Task]] = {
    name: _tabletop(name, prop, destination) for name, (prop, destination) in TABLETOP_TASKS.items()
}

if set(_FACTORIES) - set(CANONICAL_PROMPTS):
    raise ValueError(
        f"tasks {sorted(set(_FACTORIES) - set(CANONICAL_PROMPTS))} have no canonical prompt: "
        "add them to pde_contract.tasks.PAPER_TASKS"
    )


def load(name: str) -> Task:
    """A fresh task called ``name``. Raises ValueError listing the valid names."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(
            f"unknown task {name!r}: not one of the simulator's built-in tasks "
            f"({', '.join(sorted(_FACTORIES))}); the simulator lays out only these scenes, a lab's "
            "own task (PDE_TASKS_FILE) runs on the franka backend"
        )
    return factory()
