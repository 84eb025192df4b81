"""Test-only stand-ins for the Robot and Camera boundaries: a kinematic arm that reaches every
commanded target within one tick (unless told to lag), and a camera that serves a fixed JPEG."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import cv2
import numpy as np

from pde_contract.messages import CameraFrame, RobotState
from robot_server.cameras.base import Camera
from robot_server.robots.base import FaultReport, Robot, RobotError, RobotTarget

HOME_Q = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
HOME_POS = np.array([0.45, 0.0, 0.35])
HOME_QUAT = np.array([1.0, 0.0, 0.0, 0.0])  # tool pointing down


class FakeRobot(Robot):
    name = "fake"

    def __init__(self, home_time_s: float = 0.0) -> None:
        self.home_time_s = home_time_s
        self.home_gate: threading.Event | None = None  # when set by a test, homing waits for it
        self._connected = False
        self.pos = HOME_POS.copy()
        self.quat = HOME_QUAT.copy()
        self.q = HOME_Q.copy()
        self.width = 0.08
        self.sim_time_s = 0.0
        self.commands: list[tuple[float, RobotTarget]] = []  # (monotonic time, target)
        self.holds = 0
        self.homes: list[tuple[str, int | None]] = []
        self.home_poses: list[tuple[float, ...] | None] = []  # each home's joints_rad (None: home)
        self.fail_next_command = False
        self.fail_keeps_connection = False  # a failure like a simulator's IK error, not a drop
        self.fault_report: FaultReport | None = None  # what fault() says; home() clears a latched one
        self.lock = threading.Lock()

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    def read_state(self) -> RobotState:
        with self.lock:
            return RobotState(
                joint_positions_rad=self.q.copy(),
                joint_velocities_rad_s=np.zeros(7),
                ee_position_m=self.pos.copy(),
                ee_quat_xyzw=self.quat.copy(),
                gripper_width_m=self.width,
                robot_time_s=self.sim_time_s,
            )

    def command(self, target: RobotTarget, period_s: float) -> None:
        if self.fail_next_command:
            self.fail_next_command = False
            if self.fail_keeps_connection:
                raise RobotError("fake target refused")
            self._connected = False
            raise RobotError("fake network drop: reconnect")
        with self.lock:
            self.commands.append((time.monotonic(), target))
            if target.ee_position_m is not None and target.ee_quat_xyzw is not None:
                self.pos = target.ee_position_m.copy()
                self.quat = target.ee_quat_xyzw.copy()
            if target.joint_positions_rad is not None:
                self.q = target.joint_positions_rad.copy()
            self.width = target.gripper_width_m
            self.sim_time_s += period_s

    def hold(self) -> None:
        self.holds += 1

    def home(
        self, task: str = "", seed: int | None = None, joints_rad: Sequence[float] | None = None
    ) -> None:
        time.sleep(self.home_time_s)
        if self.home_gate is not None:
            assert self.home_gate.wait(30.0), "the test never opened the home gate"
        with self.lock:
            self.homes.append((task, seed))
            self.home_poses.append(None if joints_rad is None else tuple(joints_rad))
            self.pos, self.quat, self.q, self.width = HOME_POS.copy(), HOME_QUAT.copy(), HOME_Q.copy(), 0.08
            if joints_rad is not None:
                self.q = np.asarray(joints_rad, dtype=float)
            self.fault_report = None

    def fault(self) -> FaultReport | None:
        return self.fault_report

    def task_success(self) -> bool | None:
        return bool(self.pos[2] < 0.1)


def jpeg_bytes(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    img = (rng.random((height // 8, width // 8, 3)) * 255).astype(np.uint8)
    big = cv2.resize(img, (width, height), interpolation=cv2.INTER_LINEAR)
    ok, buf = cv2.imencode(".jpg", big, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


class FakeCamera(Camera):
    """Serves one fixed JPEG, stamped with the host clock at read time."""

    def __init__(self, name: str, width: int = 224, height: int = 224, fail: bool = False) -> None:
        self.name = name
        self.width, self.height = width, height
        self.jpeg = jpeg_bytes(width, height, seed=hash(name) % 100)
        self.fail = fail
        self._connected = False
        self._index = 0

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    def read(self, timeout_s: float = 0.5) -> CameraFrame:
        from robot_server.cameras.base import CameraError

        if self.fail:
            time.sleep(0.05)
            raise CameraError(f"fake camera {self.name} unplugged")
        self._index += 1
        return CameraFrame(
            name=self.name,
            jpeg=self.jpeg,
            width=self.width,
            height=self.height,
            capture_time_s=time.time(),
            frame_index=self._index,
        )
