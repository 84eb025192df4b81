"""Backend factory: ``sim`` (MuJoCo FR3 + rendered cameras) or ``franka`` (franky-control +
RealSense). Imported lazily so the sim never needs franky/pyrealsense2 and the robot PC never
needs MuJoCo."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from robot_server.cameras.base import Camera
from robot_server.cameras.realsense.camera import RealSenseStream
from robot_server.robots.base import Robot
from robot_server.robots.franka.config import FrankaConfig
from robot_server.settings import RobotServerSettings


class BackendUnavailableError(RuntimeError):
    """The backend's packages are missing or it could not be built; the message says what to do."""


@dataclass
class Backend:
    robot: Robot
    cameras: list[Camera]
    # Frees what the robot and cameras share (the sim's GL contexts); call after the server closed.
    close: Callable[[], None] = field(default=lambda: None)


def build_backend(settings: RobotServerSettings, franka: FrankaConfig | None = None) -> Backend:
    """``franka``: the FR3's settings (default: ``franka_config(settings)``)."""
    if settings.backend == "sim":
        return _build_sim(settings)
    if settings.backend == "franka":
        return _build_franka(settings, franka or franka_config(settings))
    raise BackendUnavailableError(f"unknown backend {settings.backend!r}: use 'sim' or 'franka'")


def _build_sim(settings: RobotServerSettings) -> Backend:
    try:
        from robot_server.cameras.sim import SimCamera
        from robot_server.robots.sim import SimRobot
        from robot_server.sim.profile import load_profile
        from robot_server.sim.world import SimWorld, SimWorldConfig
    except ImportError as e:
        raise BackendUnavailableError(
            f"the sim backend cannot be imported ({e}): install the robot extra "
            "(`pip install -e .[robot]`) and set MUJOCO_GL=egl (or osmesa) on a headless machine"
        ) from e
    world = SimWorld(
        SimWorldConfig(
            image_width=settings.image_width,
            image_height=settings.image_height,
            layout_spread=settings.sim_layout_spread,
            profile=load_profile(settings.sim_profile),
        )
    )
    try:
        robot = SimRobot(
            world,
            max_tcp_step_m=settings.max_step_translation_m,
            workspace_m=(settings.workspace_min_m, settings.workspace_max_m),
        )
        cameras: list[Camera] = [SimCamera(world, name) for name in settings.cameras]
    except Exception:
        world.close()
        raise
    return Backend(robot=robot, cameras=cameras, close=world.close)


def franka_config(settings: RobotServerSettings) -> FrankaConfig:
    """The FR3's settings: the file's [franka] section and PDE_FRANKA_* variables; the server's
    fci_host (PDE_ROBOT_FCI_HOST), if set, overrides the host as a flag would."""
    return FrankaConfig(**franka_flags(settings))


def franka_flags(settings: RobotServerSettings) -> dict[str, Any]:
    return {"host": settings.fci_host} if settings.fci_host else {}


def _build_franka(settings: RobotServerSettings, franka: FrankaConfig) -> Backend:
    try:
        from robot_server.robots.franka import FrankaRobot
    except ImportError as e:
        raise BackendUnavailableError(
            f"the franka backend cannot be imported ({e}): install franky-control==2.0.0 (the robot extra)"
        ) from e
    robot: Robot = FrankaRobot(franka)
    missing = [n for n in settings.cameras if n not in settings.realsense_serials]
    if missing:
        raise BackendUnavailableError(
            f"no RealSense serial for camera(s) {missing}: set them in the robot configuration file's "
            '[robot.realsense_serials] table (e.g. external = "123456789012"), or PDE_ROBOT_REALSENSE_SERIALS'
        )
    try:
        from robot_server.cameras.realsense import RealSenseCamera
    except ImportError as e:
        raise BackendUnavailableError(
            f"the RealSense cameras cannot be imported ({e}): install pyrealsense2 and libusb-1.0-0"
        ) from e
    cameras: list[Camera] = [
        RealSenseCamera(
            name=n,
            serial=settings.realsense_serials[n],
            **settings.realsense.get(n, RealSenseStream()).model_dump(),
        )
        for n in settings.cameras
    ]
    return Backend(robot=robot, cameras=cameras)
