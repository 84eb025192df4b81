"""Run the scripted expert on a SimRobot, chunk by chunk, optionally recording observations:
the same loop the robot server runs (ee_delta rows applied to the previous commanded target at
10 Hz), without the network in between."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import numpy as np

from pde_contract.episodes import ChunkRecord, EpisodeFile
from pde_contract.messages import ActionSpace, Observation
from robot_server.cameras.sim import SimCamera
from robot_server.robots.base import RobotTarget
from robot_server.robots.sim import SimRobot
from robot_server.sim.expert import CONTROL_RATE_HZ, Expert, apply_ee_delta
from robot_server.sim.tasks import load
from robot_server.sim.tasks.tabletop import TabletopTask

DEFAULT_CHUNK_ROWS = 10
DEFAULT_MAX_CHUNKS = 60  # 60 s at 10 Hz; the longest expert episodes take ~40 s


class EeDeltaDriver:
    """Applies ee_delta rows to the commanded target and tracks it with the robot."""

    def __init__(self, robot: SimRobot, period_s: float = 1.0 / CONTROL_RATE_HZ) -> None:
        self.robot = robot
        self.period_s = period_s
        pos, quat_xyzw = robot.home_pose
        self.pos = pos
        self.quat_xyzw = quat_xyzw
        self.width = float(robot.read_state().gripper_width_m)

    def step(self, row: np.ndarray) -> None:
        self.pos, self.quat_xyzw, self.width = apply_ee_delta(self.pos, self.quat_xyzw, row)
        self.robot.command(
            RobotTarget(gripper_width_m=self.width, ee_position_m=self.pos, ee_quat_xyzw=self.quat_xyzw),
            self.period_s,
        )


def expert_rng(seed: int) -> np.random.Generator:
    # The layout uses default_rng(seed); the expert's style its own stream from the same seed.
    return np.random.default_rng([seed, 7])


def observe(
    robot: SimRobot, cameras: Sequence[SimCamera], seq: int, episode_id: str, chunk_seq: int, tick: int = -1
) -> Observation:
    return Observation(
        seq=seq,
        publish_time_s=time.time(),
        state=robot.read_state(),
        cameras=[c.read() for c in cameras],
        episode_id=episode_id,
        executing_chunk_seq=chunk_seq,
        task_success=robot.task_success(),
        tick=tick,
    )


def run_expert_episode(
    robot: SimRobot,
    task_name: str,
    seed: int,
    cameras: Sequence[SimCamera] = (),
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    episode_id: str | None = None,
) -> EpisodeFile:
    """Reset to ``task_name``/``seed``, run the expert until its script ends (or ``max_chunks``) and
    return the episode. Observations (with camera frames when ``cameras`` are given) are taken at
    the start of every chunk and before each of its later rows (``ChunkRecord.row_observations``:
    each row's own state and frames); ``success`` is the task's check at the end."""
    task = load(task_name)
    if not isinstance(task, TabletopTask):
        raise ValueError(f"the scripted expert only knows tabletop tasks, not {task_name!r}")
    robot.home(task=task_name, seed=seed)
    driver = EeDeltaDriver(robot)
    expert = Expert(robot.world, task, expert_rng(seed), driver.pos, driver.quat_xyzw)
    episode_id = episode_id or uuid.uuid4().hex
    chunks: list[ChunkRecord] = []
    tick = 0  # rows run so far: the tick the next row runs at
    for chunk_seq in range(max_chunks):
        obs = observe(robot, cameras, tick, episode_id, chunk_seq, tick)
        # float32 on the wire and on disk: execute exactly what is recorded
        actions = expert.next_chunk(chunk_rows).astype(np.float32)
        row_observations = {}
        for r, row in enumerate(actions):
            if r > 0:
                row_observations[r] = observe(robot, cameras, tick, episode_id, chunk_seq, tick)
            driver.step(row.astype(np.float64))
            tick += 1
        chunks.append(ChunkRecord(observation=obs, actions=actions, row_observations=row_observations))
        if expert.done:
            break
    return EpisodeFile(
        episode_id=episode_id,
        task=task_name,
        canonical_prompt=task.prompt,
        rollout_prompt=task.prompt,
        action_space=ActionSpace.EE_DELTA,
        control_rate_hz=CONTROL_RATE_HZ,
        chunks=chunks,
        success=bool(robot.task_success()),
        seed=seed,
        source="expert",
    )
