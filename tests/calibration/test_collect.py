"""``collect`` end to end: a real RobotServer driving the MuJoCo FR3 (SimRobot), the planned poses
confirmed by a scripted operator, then hand-eye on what was saved. The wrist camera is the one fake:
a RealSense cannot exist here, so ``FakeBoardWristCamera`` renders the checkerboard from the arm's
measured TCP pose through a known camera pose (the ground truth the calibration must find)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
import pytest

from calibration import collect as collect_module
from calibration.board import detect
from calibration.collect import SAMPLES_FILE, CollectError, collect
from calibration.main import main
from calibration.poses import invert, pose_from_position_quat, rotation_angle_deg
from calibration.results import HandEyeCalibration, SampleSet, load_json
from calibration.synthetic import look_at_board, render_board
from pde_contract.client import RobotClient
from pde_contract.messages import CameraFrame, CameraIntrinsics
from robot_server.robots.base import Robot
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.calibration.scenes import BOARD, CAMERA, T_TCP_CAM
from tests.helpers import free_port
from tests.robot_server.fakes import FakeCamera

PIVOT_M = 0.45
# The server runs in this process: on a loaded machine its observations can be seconds apart.
CLIENT_TIMEOUT_S = 10.0


class FakeBoardWristCamera(FakeCamera):
    """A wrist camera that sees a checkerboard lying still in the robot's base frame."""

    def __init__(self, robot: Robot, T_tcp_cam: np.ndarray, T_base_board: np.ndarray) -> None:
        super().__init__("wrist", CAMERA.width, CAMERA.height)
        self.robot = robot
        self.T_tcp_cam = T_tcp_cam
        self.T_base_board = T_base_board

    @property
    def intrinsics(self) -> CameraIntrinsics:
        return CAMERA

    def read(self, timeout_s: float = 0.5) -> CameraFrame:
        capture_time_s = time.time()
        state = self.robot.read_state()
        T_base_tcp = pose_from_position_quat(state.ee_position_m, state.ee_quat_xyzw)
        image = render_board(CAMERA, BOARD, invert(T_base_tcp @ self.T_tcp_cam) @ self.T_base_board)
        ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 95])
        assert ok
        self._index += 1
        return CameraFrame(
            name=self.name,
            jpeg=bytes(jpeg),
            width=CAMERA.width,
            height=CAMERA.height,
            capture_time_s=capture_time_s,
            frame_index=self._index,
            intrinsics=CAMERA,
        )


@contextmanager
def board_server(heartbeat_timeout_s: float) -> Iterator[RobotServer]:
    from robot_server.robots.sim import SimRobot
    from robot_server.sim.world import SimWorld, SimWorldConfig

    robot = SimRobot(SimWorld(SimWorldConfig(image_width=64, image_height=64, scene="table")))
    robot.connect()
    robot.home()
    state = robot.read_state()
    T_base_home = pose_from_position_quat(state.ee_position_m, state.ee_quat_xyzw)
    # The board lies on the table PIVOT_M in front of the wrist camera at home, where the plan's
    # tilts pivot.
    T_base_board = T_base_home @ T_TCP_CAM @ look_at_board(BOARD, PIVOT_M, np.zeros(3))
    # 25 Hz instead of 10: the same small steps, to keep the test short.
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        camera_fps=10.0,
        control_rate_hz=25.0,
        heartbeat_timeout_s=heartbeat_timeout_s,
    )
    srv = RobotServer(robot, [FakeBoardWristCamera(robot, T_TCP_CAM, T_base_board)], settings)
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture()
def server() -> Iterator[RobotServer]:
    with board_server(heartbeat_timeout_s=1.0) as srv:
        yield srv


def test_planned_collection_then_handeye_finds_the_wrist_camera(server: RobotServer, tmp_path: Path) -> None:
    # Go home; take plan poses 0 and 1, skip 2, take 3 and 4, finish.
    answers = iter(["", "", "", "s", "", "", "q"])
    said: list[str] = []
    endpoint = f"tcp://127.0.0.1:{server.settings.cmd_port}"
    with RobotClient(cmd_endpoint=endpoint, name="calibrate", timeout_s=CLIENT_TIMEOUT_S) as client:
        sample_set = collect(
            client, tmp_path, BOARD, plan=True, pivot_m=PIVOT_M, ask=lambda _: next(answers), say=said.append
        )
    assert len(sample_set.samples) == 4, said
    on_disk = load_json(tmp_path / SAMPLES_FILE, SampleSet)
    assert on_disk == sample_set and on_disk.factory_intrinsics["wrist"] == CAMERA
    for sample in on_disk.samples:
        image = cv2.imread(str(tmp_path / sample.images["wrist"]), cv2.IMREAD_GRAYSCALE)
        assert image is not None and detect(image, BOARD) is not None
    assert all("wrist: board found" in line for line in said if line.startswith("saved sample"))
    # The saved poses are where the plan put the arm (it tilts about a pivot below the TCP).
    poses = [
        pose_from_position_quat(np.array(s.tcp_position_m), np.array(s.tcp_quat_xyzw))
        for s in on_disk.samples
    ]
    tilts = [rotation_angle_deg(poses[0][:3, :3].T @ p[:3, :3]) for p in poses]
    assert tilts[0] < 1.0 and all(12.0 < t < 22.0 for t in tilts[1:]), tilts

    # A second run extends the session (never overwrites) with the rest of the plan.
    answers = iter(["", "s", "s", "s", "s", "s", "", "s", "", "s", "", "s"])  # poses 5, 7, 9
    with RobotClient(cmd_endpoint=endpoint, name="calibrate", timeout_s=CLIENT_TIMEOUT_S) as client:
        collect(
            client, tmp_path, BOARD, plan=True, pivot_m=PIVOT_M, ask=lambda _: next(answers), say=said.append
        )
    sample_set = load_json(tmp_path / SAMPLES_FILE, SampleSet)
    assert [s.index for s in sample_set.samples] == list(range(7)), said

    assert main(["handeye", "--samples", str(tmp_path / SAMPLES_FILE), "--camera", "wrist"]) == 0
    result = load_json(tmp_path / "handeye_wrist.json", HandEyeCalibration)
    assert result.samples_rejected == {} and result.n_samples == 7
    error_mm = 1000 * np.linalg.norm(result.matrix()[:3, 3] - T_TCP_CAM[:3, 3])
    error_deg = rotation_angle_deg(result.matrix()[:3, :3].T @ T_TCP_CAM[:3, :3])
    assert error_mm < 2.0 and error_deg < 0.2, (result.method, error_mm, error_deg)


def test_moving_robot_is_not_sampled(server: RobotServer, tmp_path: Path) -> None:
    """While the arm moves, Enter saves nothing and says why."""
    endpoint = f"tcp://127.0.0.1:{server.settings.cmd_port}"
    said: list[str] = []
    # Another program moves the arm while the operator confirms.
    with (
        RobotClient(cmd_endpoint=endpoint, name="mover", timeout_s=CLIENT_TIMEOUT_S) as other,
        RobotClient(cmd_endpoint=endpoint, name="calibrate", timeout_s=CLIENT_TIMEOUT_S) as client,
    ):
        other.connect()
        other.start_heartbeat()
        obs = other.latest_observation(CLIENT_TIMEOUT_S)
        home = pose_from_position_quat(obs.state.ee_position_m, obs.state.ee_quat_xyzw)
        far = collect_module.plan_targets(home, PIVOT_M)[3]
        done = threading.Event()

        def back_and_forth() -> None:
            # Until the operator is done: one move could end before a starved test thread looks.
            seq, a, b = int(time.time() * 1000), home, far
            while not done.is_set():
                seq = collect_module.move_by(other, other.latest_observation(CLIENT_TIMEOUT_S), a, b, seq) + 1
                a, b = b, a

        mover = threading.Thread(target=back_and_forth)
        answers = iter(["", "q"])

        def ask(_: str) -> str:
            if not mover.is_alive() and "started" not in said:
                said.append("started")
                mover.start()
                deadline = time.monotonic() + CLIENT_TIMEOUT_S
                while client.status().steps_remaining == 0:
                    assert time.monotonic() < deadline, "the mover never moved the arm"
                    time.sleep(0.02)
            return next(answers)

        try:
            sample_set = collect(client, tmp_path, BOARD, ask=ask, say=said.append)
        finally:
            done.set()
            mover.join(60)
    assert sample_set.samples == []
    assert any("still moving" in line for line in said), said


def test_collect_without_a_server_exits_1_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    assert main(["collect", "--endpoint", endpoint, "--out", str(tmp_path), "--timeout-s", "0.3"]) == 1
    assert "is `pde robot-server` running" in capsys.readouterr().err
    assert not (tmp_path / SAMPLES_FILE).exists()


def test_a_move_cut_short_by_the_watchdog_is_resumed() -> None:
    """No heartbeat and a 0.3 s watchdog: a ~1 s planned move is stopped part way, every time."""
    with (
        board_server(heartbeat_timeout_s=0.3) as srv,
        RobotClient(
            cmd_endpoint=srv.settings.cmd_endpoint, name="calibrate", timeout_s=CLIENT_TIMEOUT_S
        ) as c,
    ):
        c.connect()
        obs = c.latest_observation(CLIENT_TIMEOUT_S)
        home = pose_from_position_quat(obs.state.ee_position_m, obs.state.ee_quat_xyzw)
        target = collect_module.plan_targets(home, PIVOT_M)[3]
        seq = int(time.time() * 1000)
        with pytest.raises(CollectError, match="watchdog stopped the move 1 times"):
            collect_module.move_by(c, obs, home, target, seq, resumes=0)
        obs = c.latest_observation(CLIENT_TIMEOUT_S)
        here = pose_from_position_quat(obs.state.ee_position_m, obs.state.ee_quat_xyzw)
        assert np.linalg.norm(here[:3, 3] - target[:3, 3]) > 0.02, "the move was not cut short"
        trips = c.status().counters.watchdog_trips
        # Resumed as often as it takes (each resume runs until the next trip).
        collect_module.move_by(c, obs, here, target, seq + 1, resumes=50)
        assert c.status().counters.watchdog_trips > trips
        time.sleep(0.3)  # settled
        obs = c.latest_observation(CLIENT_TIMEOUT_S)
        here = pose_from_position_quat(obs.state.ee_position_m, obs.state.ee_quat_xyzw)
    assert np.linalg.norm(here[:3, 3] - target[:3, 3]) < 0.005
    assert rotation_angle_deg(here[:3, :3].T @ target[:3, :3]) < 1.0
