"""The paper's ten real-world tasks (App. C.2): names every service uses and their canonical
prompts, worded exactly as the paper lists them. The simulator's registry, the loop and the
supervisor all read this one table."""

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

# The headline experiment's tasks (paper tasks 1, 8, 10).
HEADLINE_TASKS: tuple[str, ...] = (
    "put_green_container_in_bowl",
    "open_top_drawer_and_put_tape_inside",
    "put_green_container_on_bottom_rack",
)
