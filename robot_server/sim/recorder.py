"""Demonstration recorder: N expert episodes per task, one pde_contract EpisodeFile per episode
(observations with both camera frames as JPEG, ee_delta actions, canonical prompt, success).

Layout on disk (what SFT reads):
    OUT/<task>/<task>__seed<seed>.episode     msgpack EpisodeFile (pde_contract.episodes)
    OUT/index.json                            one entry per episode: file, task, seed, success, chunks
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pde_contract.episodes import EPISODE_SUFFIX, write_episode
from robot_server.cameras.sim import SimCamera
from robot_server.robots.sim import SimRobot
from robot_server.sim.rollout import DEFAULT_CHUNK_ROWS, run_expert_episode
from robot_server.sim.tasks import TASK_NAMES
from robot_server.sim.world import CAMERA_NAMES, SimWorld, SimWorldConfig


@dataclass
class RecordConfig:
    tasks: Sequence[str] = TASK_NAMES
    episodes_per_task: int = 40
    image_width: int = 224
    image_height: int = 224
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    base_seed: int = 0
    # Failed expert episodes are not demonstrations: retry new seeds, at most this many per task.
    max_attempts_per_task: int | None = None
    keep_failed: bool = False
    # How far resets scatter the objects (SimWorldConfig.layout_spread): 1 = the whole layout box.
    layout_spread: float = 1.0


@dataclass
class TaskReport:
    task: str
    recorded: int = 0
    attempts: int = 0
    successes: int = 0
    files: list[str] = field(default_factory=list)


def episode_seed(base_seed: int, task: str, attempt: int) -> int:
    """Distinct layouts per task: each task has its own seed block."""
    return base_seed + 100_000 * TASK_NAMES.index(task) + attempt


def record_demos(
    out_dir: str | Path,
    config: RecordConfig,
    progress: Callable[[str, bool], None] | None = None,
) -> dict[str, TaskReport]:
    """Record and write the episodes; ``progress(task, success)`` is called after each attempt."""
    unknown = [t for t in config.tasks if t not in TASK_NAMES]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; valid tasks: {', '.join(TASK_NAMES)}")
    if config.episodes_per_task < 1:
        raise ValueError(f"episodes_per_task={config.episodes_per_task}: must be at least 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = SimWorld(
        SimWorldConfig(
            image_width=config.image_width,
            image_height=config.image_height,
            layout_spread=config.layout_spread,
        )
    )
    robot = SimRobot(world)
    robot.connect()
    cameras = [SimCamera(world, name) for name in CAMERA_NAMES]
    for c in cameras:
        c.connect()
    max_attempts = config.max_attempts_per_task or 2 * config.episodes_per_task
    reports: dict[str, TaskReport] = {}
    index: list[dict[str, object]] = []
    try:
        for task in config.tasks:
            report = reports[task] = TaskReport(task)
            while report.recorded < config.episodes_per_task and report.attempts < max_attempts:
                seed = episode_seed(config.base_seed, task, report.attempts)
                report.attempts += 1
                ep = run_expert_episode(robot, task, seed, cameras, chunk_rows=config.chunk_rows)
                report.successes += bool(ep.success)
                if ep.success or config.keep_failed:
                    rel = f"{task}/{task}__seed{seed}{EPISODE_SUFFIX}"
                    write_episode(out / rel, ep)
                    report.recorded += 1
                    report.files.append(rel)
                    index.append(
                        {
                            "file": rel,
                            "task": task,
                            "seed": seed,
                            "success": ep.success,
                            "chunks": len(ep.chunks),
                        }
                    )
                if progress is not None:
                    progress(task, bool(ep.success))
    finally:
        world.close()
        (out / "index.json").write_text(
            json.dumps(
                {
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "config": {k: v for k, v in asdict(config).items() if k != "tasks"}
                    | {"tasks": list(config.tasks)},
                    "episodes": index,
                },
                indent=1,
            )
        )
    return reports
