"""PNG pictures of both camera views per task at its start and after the expert's episode, so a
person can see the scene: OUT/<task>_start.png and OUT/<task>_end.png (external | wrist)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from robot_server.robots.sim import SimRobot
from robot_server.sim.rollout import run_expert_episode
from robot_server.sim.tasks import TASK_NAMES
from robot_server.sim.world import CAMERA_NAMES, SimWorld, SimWorldConfig


def _views(world: SimWorld, label: str) -> np.ndarray:
    rgb = np.hstack([world.render(name) for name in CAMERA_NAMES])
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    cv2.putText(bgr, label, (8, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 255), 2, cv2.LINE_AA)
    cv2.putText(bgr, label, (8, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (20, 20, 20), 1, cv2.LINE_AA)
    return bgr


def make_pictures(
    out_dir: str | Path, tasks: Sequence[str] = TASK_NAMES, seed: int = 0, size_px: int = 448
) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = SimWorld(SimWorldConfig(image_width=size_px, image_height=size_px))
    robot = SimRobot(world)
    robot.connect()
    written: list[Path] = []
    try:
        for task in tasks:
            robot.home(task=task, seed=seed)
            start = out / f"{task}_start.png"
            cv2.imwrite(str(start), _views(world, f"{task} seed {seed}: start"))
            ep = run_expert_episode(robot, task, seed)
            end = out / f"{task}_end.png"
            verdict = "success" if ep.success else "FAILED"
            cv2.imwrite(str(end), _views(world, f"{task} seed {seed}: end ({verdict})"))
            written += [start, end]
    finally:
        world.close()
    return written
