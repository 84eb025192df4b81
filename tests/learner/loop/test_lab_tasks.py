"""A lab's own task from a tasks file through the episode loop: its canonical prompt goes to the
store, its episode length to the actor, and its reset pose over the wire (RobotClient, a real
RobotServer) to the robot's home(). The robot behind the server is the test FakeRobot (no arm
here); the store is real."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.loop.core import EpisodeLoop
from learner.loop.service import sim_cannot_run
from learner.loop.settings import LoopSettings
from pde_contract.client import RobotClient, RobotServerError
from pde_contract.messages import ErrorCode
from pde_storage import Store
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.contract.test_tasks import LAB_TASK, tasks_file
from tests.helpers import free_port
from tests.learner.loop.doubles import FakeActor
from tests.learner.loop.test_loop import _settings as loop_settings
from tests.robot_server.fakes import FakeCamera, FakeRobot

POSE = (0.0, -0.6, 0.0, -2.3, 0.0, 1.7, 0.785)  # LAB_TASK's reset_joints_rad


def test_a_lab_task_runs_through_the_loop_with_its_prompt_length_and_reset_pose(
    store: Store, tmp_path: Path
) -> None:
    path = str(tasks_file(tmp_path))
    settings = loop_settings(tasks=["stack_cups"], tasks_file=path, max_episodes=2, max_chunks=30)
    robot = FakeRobot()
    server_settings = RobotServerSettings(cmd_port=free_port(), obs_port=free_port())
    actor = FakeActor(n_chunks=50)
    with (
        RobotServer(robot, [FakeCamera("external")], server_settings),
        RobotClient(server_settings.cmd_endpoint, name="learner", timeout_s=10.0) as client,
    ):
        client.connect()
        assert EpisodeLoop(store, client, actor, settings).run() == 2
    assert [t.canonical_prompt for t in store.tasks()] == ["stack the blue cup on the red cup"]
    assert [e.rollout_prompt for e in store.episodes()] == ["stack the blue cup on the red cup"] * 2
    assert [c["max_chunks"] for c in actor.calls] == [12, 12]  # the file's, not PDE_LOOP_MAX_CHUNKS
    assert [task for task, _ in robot.homes] == ["stack_cups", "stack_cups"]
    assert robot.home_poses == [POSE, POSE]


def test_a_reset_pose_outside_the_box_is_refused_and_nothing_moves() -> None:
    robot = FakeRobot()
    settings = RobotServerSettings(cmd_port=free_port(), obs_port=free_port())
    with (
        RobotServer(robot, [], settings),
        RobotClient(settings.cmd_endpoint, name="t", timeout_s=10.0) as client,
    ):
        client.connect()
        far = (0.0, 1.2, 0.0, -0.8, 0.0, 2.5, 0.785)  # stretched out: the TCP at x 0.89 m, box to 0.75
        with pytest.raises(RobotServerError, match=r"outside the workspace box.*reset_joints_rad") as info:
            client.reset("stack_cups", reset_joints_rad=far)
        assert info.value.code is ErrorCode.UNSAFE
        with pytest.raises(RobotServerError, match=r"joint 4 = 0\.0000 rad is outside") as info:
            client.reset("stack_cups", reset_joints_rad=(0.0, -0.6, 0.0, 0.0, 0.0, 1.7, 0.785))
        assert info.value.code is ErrorCode.UNSAFE
        for bad in ((0.0,) * 6, (*POSE[:6], float("nan"))):
            with pytest.raises(RobotServerError, match="reset pose must be 7 finite joint positions") as info:
                client.reset("stack_cups", reset_joints_rad=bad)
            assert info.value.code is ErrorCode.INVALID_ACTION
        assert robot.homes[1:] == []  # only the server's own home at start
        client.reset("stack_cups", reset_joints_rad=POSE)
    assert robot.home_poses[-1] == POSE


def test_the_loop_refuses_a_lab_task_on_the_sim_backend(tmp_path: Path) -> None:
    path = str(tasks_file(tmp_path, LAB_TASK))
    lab = LoopSettings.model_validate({"tasks": ["stack_cups", "put_tape_on_top_rack"], "tasks_file": path})
    msg = sim_cannot_run(lab, "sim")
    assert "['stack_cups']" in msg and "franka backend" in msg and path in msg
    assert sim_cannot_run(lab, "franka") == ""
    paper = LoopSettings.model_validate({"tasks": ["put_tape_on_top_rack"], "tasks_file": path})
    assert sim_cannot_run(paper, "sim") == ""
