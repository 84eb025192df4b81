"""Task registry: the paper's ten tabletop tasks (App. C.2), each with its canonical prompt, a
seeded initial layout and a success check on simulator state.

    from robot_server.sim.tasks import load, TASK_NAMES
    task = load("put_green_container_in_bowl")
"""

from __future__ import annotations

from robot_server.sim.tasks.base import Task
from robot_server.sim.tasks.registry import CANONICAL_PROMPTS, TASK_NAMES, load

__all__ = ["CANONICAL_PROMPTS", "TASK_NAMES", "Task", "load"]
