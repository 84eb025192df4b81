"""Hand guiding in the sim: a RobotServer in this process (so that a ScriptedHand can push its
limp arm), the recorder sampling the measured state over the real client, and SFT on the takes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pde_contract.client import RobotClient
from pde_contract.messages import ActionSpace
from pde_contract.rotations import quat_from_rotvec, quat_multiply
from pde_contract.tasks import load_tasks
from robot_server.backends import build_backend
from robot_server.robots.sim import SimRobot
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from robot_server.sim.hand import ScriptedHand
from teleop.guiding import HandGuidingSource
from teleop.main import run_session
from teleop.recorder import Recorder
from teleop.takes import counts_per_task
from tests.helpers import free_port
from tests.teleop.tiny_sft import train_tiny_sft

TASK = load_tasks(None).get("put_green_container_in_bowl")
PATH_M = [[0.06, 0.0, 0.0], [0.06, 0.04, -0.03]]  # the hand's path from where it grabs
TICKS = 25


@pytest.fixture
def guided_server() -> Iterator[tuple[str, SimRobot]]:
    settings = RobotServerSettings(
        cmd_port=free_port(), obs_port=free_port(), pacing="fast", image_width=32, image_height=32
    )
    backend = build_backend(settings)
    assert isinstance(backend.robot, SimRobot)
    backend.robot.guiding_hand = ScriptedHand(PATH_M, speed_m_s=0.05)
    server = RobotServer(backend.robot, backend.cameras, settings)
    server.start()
    try:
        yield f"tcp://127.0.0.1:{settings.cmd_port}", backend.robot
    finally:
        server.close()
        backend.close()


@pytest.mark.slow
def test_guided_takes_hold_the_measured_motion_and_train_sft(
    guided_server: tuple[str, SimRobot], tmp_path: Path
) -> None:
    endpoint, robot = guided_server
    with RobotClient(endpoint, name="pde-record", timeout_s=5.0) as client:
        recorder = Recorder(client)
        recorder.reset(TASK, seed=0)
        grabbed_at = robot.read_state().ee_position_m.copy()
        with HandGuidingSource(max_ticks=TICKS) as source:
            take = recorder.record(source, TASK, seed=0)
        assert not client.status().guiding  # the recorder took the arm back
        st = take.stats
        # one row per tick of the take; a tick that neither the status polls nor the observations
        # showed (a starved machine) would be counted as dropped
        assert st.rows_recorded + st.rows_dropped == st.rows_expected <= TICKS
        assert st.rows_recorded > TICKS // 2 and st.rows_executed is None
        ee = take.episodes[ActionSpace.EE_DELTA]
        joint = take.episodes[ActionSpace.JOINT_ABS]
        assert ee.source == "guiding:guiding" and len(ee.chunks) == len(joint.chunks) == st.rows_recorded
        rows = np.concatenate([c.actions for c in ee.chunks]).astype(np.float64)
        # the ee_delta rows, applied one after another as the server would, give the measured
        # pose of the last sample; the hand moved the arm along its path
        first, last = ee.chunks[0].observation.state, robot.read_state()
        pos, quat = first.ee_position_m.copy(), first.ee_quat_xyzw.copy()
        for row in rows:
            pos, quat = pos + row[:3], quat_multiply(quat_from_rotvec(row[3:6]), quat)
        np.testing.assert_allclose(pos, last.ee_position_m, atol=2e-3)  # float32 rows, and a tick more
        # the hand moved the arm along its path during the take (how much of that motion the rows
        # cover depends on when the first sample came: a loaded machine drops early ticks)
        assert np.linalg.norm(last.ee_position_m - grabbed_at) > 0.04
        assert abs(float(np.dot(quat / np.linalg.norm(quat), last.ee_quat_xyzw))) > 0.999
        np.testing.assert_allclose(joint.chunks[-1].actions[0, :7], last.joint_positions_rad, atol=2e-3)

        demos = tmp_path / "demos"
        answers = iter(["", "y", "hand-guided"] * 2)
        guided = HandGuidingSource(max_ticks=TICKS)
        run_session(recorder, guided, TASK, 2, demos, lambda _q: next(answers), lambda _s: None, 1)
    assert counts_per_task(demos) == {TASK.name: (2, 0)}
    train_tiny_sft(demos, tmp_path / "ckpt")
