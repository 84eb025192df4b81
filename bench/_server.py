"""Run a RobotServer in a child process for the benchmarks.

backend "fake": the test-only kinematic FakeRobot and FakeCameras serving a fixed JPEG (transport
benchmarks: what is measured is the server's threads and sockets, not rendering). backend "sim":
the MuJoCo SimRobot and SimCameras. The child sends its tick log back when told to stop.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any

import _common  # noqa: F401  (sets sys.path)


@dataclass
class ServerSpec:
    backend: str = "fake"  # "fake" | "sim"
    width: int = 224
    height: int = 224
    cameras: tuple[str, ...] = ("external", "wrist")
    control_rate_hz: float = 10.0
    camera_fps: float = 30.0
    pacing: str = "realtime"
    rt_priority: int = 0
    capture_threads: str = ""  # "" = the backend's default
    heartbeat_timeout_s: float = 0.2
    # A `pde keys init` folder: the server uses its robot-pc/ keys (CURVE on both sockets); "" plain.
    link_keys_dir: str = ""
    # sim: a ScriptedHand (robot_server/sim/hand.py) pushes the arm along this path while guiding
    guiding_hand_path_m: tuple[tuple[float, float, float], ...] = ()


def sim_result_header(spec: ServerSpec, task: str) -> dict[str, Any]:
    """What a benchmark against the sim server records first: the server's pacing and cameras, the
    task, and the machine's load when it started."""
    return {
        "control_rate_hz": spec.control_rate_hz,
        "pacing": spec.pacing,
        "camera_fps": spec.camera_fps,
        "image_size": f"{spec.width}x{spec.height}",
        "task": task,
        "load_average_1_5_15_at_start": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }


def _child(spec: ServerSpec, cmd_port: int, obs_port: int, conn: Any) -> None:
    import sys

    from _common import jpeg_frame

    sys.setswitchinterval(0.001)  # as `pde robot-server` does

    from robot_server.server import RobotServer
    from robot_server.settings import RobotServerSettings

    settings = RobotServerSettings(
        cmd_port=cmd_port,
        obs_port=obs_port,
        control_rate_hz=spec.control_rate_hz,
        camera_fps=spec.camera_fps,
        pacing=spec.pacing,  # type: ignore[arg-type]
        image_width=spec.width,
        image_height=spec.height,
        cameras=list(spec.cameras),
        rt_priority=spec.rt_priority,
        capture_threads=spec.capture_threads,  # type: ignore[arg-type]
        heartbeat_timeout_s=spec.heartbeat_timeout_s,
    )
    if spec.link_keys_dir:
        from pathlib import Path

        keys = Path(spec.link_keys_dir) / "robot-pc"
        settings = settings.model_copy(
            update={"link_secret_key": keys / "server.key_secret", "link_clients_dir": keys / "clients"}
        )
    if spec.backend == "sim":
        from robot_server.backends import build_backend

        backend = build_backend(settings)
        robot, cameras, close_backend = backend.robot, backend.cameras, backend.close
        if spec.guiding_hand_path_m:
            from robot_server.robots.sim import SimRobot
            from robot_server.sim.hand import ScriptedHand

            assert isinstance(robot, SimRobot)
            robot.guiding_hand = ScriptedHand(spec.guiding_hand_path_m)
    else:
        from tests.robot_server.fakes import FakeCamera, FakeRobot

        robot = FakeRobot()
        fakes = [FakeCamera(n, spec.width, spec.height) for n in spec.cameras]
        for i, cam in enumerate(fakes):
            cam.jpeg = jpeg_frame(spec.width, spec.height, i + 1)  # the bytes the raw reference sends
        cameras = list(fakes)
        close_backend = None
    server = RobotServer(robot, cameras, settings)
    server.start()
    conn.send("ready")
    conn.recv()  # stop
    log = [(r.start_s, r.scheduled_s, r.chunk_seq, r.row) for r in server.executor.tick_log]
    counters = server.executor.snapshot().counters
    server.close()
    if close_backend is not None:
        close_backend()
    conn.send({"tick_log": log, "counters": {f: getattr(counters, f) for f in counters.__struct_fields__}})


class ServerProcess:
    def __init__(self, spec: ServerSpec) -> None:
        from tests.helpers import free_port

        self.spec = spec
        self.cmd_port, self.obs_port = free_port(), free_port()
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(
            target=_child, args=(spec, self.cmd_port, self.obs_port, child_conn), daemon=True
        )
        self.result: dict[str, Any] = {}

    @property
    def cmd_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.cmd_port}"

    def __enter__(self) -> ServerProcess:
        self._proc.start()
        if not self._conn.poll(60):
            raise RuntimeError("benchmark server did not start within 60 s")
        assert self._conn.recv() == "ready"
        time.sleep(0.2)  # let the first frames flow
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        if self._conn.poll(30):
            self.result = self._conn.recv()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
