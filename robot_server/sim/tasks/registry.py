"""Names and canonical prompts, in the paper's order."""

from __future__ import annotations

from collections.abc import Callable

from robot_server.sim.tasks.base import Task

CANONICAL_PROMPTS: dict[str, str] = {
    "put_green_container_in_bowl": "put the green container in the bowl",
    "put_tape_on_top_rack": "put the tape on the top rack",
    "put_bowl_on_top_rack": "put the bowl on the top rack",
    "put_green_container_in_front_of_camera": "put the green container in front of the camera",
    "put_bowl_in_front_of_camera": "put the bowl in front of the camera",
    "open_top_drawer_and_put_bowl_inside": "open the top drawer and put the bowl inside",
    "open_bottom_drawer_and_put_bowl_inside": "open the bottom drawer and put the bowl inside",
    "open_top_drawer_and_put_tape_inside": "open the top drawer and put the tape inside",
    "open_top_drawer_and_put_green_container_inside": (
        "open the top drawer and put the green container inside"
    ),
    "put_green_container_on_bottom_rack": "put the green container on the bottom rack",
}
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
