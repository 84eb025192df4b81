"""The scripted expert's chunks, sent through the real server path (client → ROUTER → safety layer
→ executor → SimRobot), still solve every task: the default safety envelope holds the simulated
tabletop, and ee_delta rows mean the same thing to the server as to the recorder."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from pde_contract.client import RobotClient
from pde_contract.messages import ActionChunk, ActionSpace
from robot_server.robots.sim import SimRobot
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from robot_server.sim.expert import CONTROL_RATE_HZ, Expert
from robot_server.sim.rollout import expert_rng
from robot_server.sim.tasks import TASK_NAMES, load
from robot_server.sim.tasks.tabletop import TabletopTask
from robot_server.sim.world import SimWorld, SimWorldConfig
from tests.helpers import free_port

SEED = 11


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[SimRobot, RobotServer]]:
    robot = SimRobot(SimWorld(SimWorldConfig(image_width=32, image_height=32)))
    robot.connect()
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        pacing="fast",
        control_rate_hz=CONTROL_RATE_HZ,
        heartbeat_timeout_s=2.0,
    )
    server = RobotServer(robot, [], settings)
    server.start()
    try:
        yield robot, server
    finally:
        server.close()


def _wait_done(client: RobotClient, seq: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.status()
        if status.executing_chunk_seq != seq or status.steps_remaining == 0:
            return
        time.sleep(0.005)
    raise TimeoutError(f"chunk {seq} still executing after {timeout_s} s")


@pytest.mark.parametrize("task_name", TASK_NAMES)
def test_expert_solves_task_through_the_server(served: tuple[SimRobot, RobotServer], task_name: str) -> None:
    robot, server = served
    task = load(task_name)
    assert isinstance(task, TabletopTask)
    endpoint = f"tcp://127.0.0.1:{server.settings.cmd_port}"
    with RobotClient(cmd_endpoint=endpoint, name="expert", timeout_s=5.0) as client:
        client.connect()
        client.reset(task=task_name, seed=SEED)
        before = client.status().counters
        assert robot.task_success() is False
        pos, quat = robot.home_pose
        expert = Expert(robot.world, task, expert_rng(SEED), pos, quat)
        episode_id = uuid.uuid4().hex
        for seq in range(80):
            actions = expert.next_chunk(10).astype(np.float32)
            client.submit_chunk(
                ActionChunk(
                    seq=seq,
                    episode_id=episode_id,
                    action_space=ActionSpace.EE_DELTA,
                    actions=actions,
                    control_rate_hz=CONTROL_RATE_HZ,
                )
            )
            _wait_done(client, seq)
            if expert.done:
                break
        after = client.status().counters
    assert expert.done, "the expert's script did not finish within 80 chunks"
    assert robot.task_success() is True
    assert after.chunks_rejected == before.chunks_rejected
    # the expert stays inside the default safety envelope: nothing it asks for is clipped
    assert after.steps_clipped == before.steps_clipped
