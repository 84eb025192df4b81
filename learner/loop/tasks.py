"""The paper's ten tasks (App. C.2) with their canonical prompts. Same names as the simulator's
registry (robot_server.sim.tasks), kept here so the learner never imports the robot server."""

from __future__ import annotations

PAPER_TASKS: dict[str, str] = {
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
# The headline experiment's tasks (1, 8, 10).
HEADLINE_TASKS: tuple[str, ...] = (
    "put_green_container_in_bowl",
    "open_top_drawer_and_put_tape_inside",
    "put_green_container_on_bottom_rack",
)


def canonical_prompt(task: str) -> str:
    try:
        return PAPER_TASKS[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; valid tasks: {', '.join(PAPER_TASKS)}") from None
