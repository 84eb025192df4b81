"""SimCamera: renders a SimWorld camera on demand and encodes it as JPEG (OpenCV, quality 90).
Each ``read()`` shows the world as it is at that moment, stamped with the host clock."""

from __future__ import annotations

import threading
import time

import cv2
import numpy as np

from pde_contract.messages import CameraFrame, CameraIntrinsics
from robot_server.cameras.base import Camera, CameraError
from robot_server.sim.world import SimWorld


class SimCamera(Camera):
    def __init__(
        self,
        world: SimWorld,
        name: str,
        width: int | None = None,
        height: int | None = None,
        jpeg_quality: int = 90,
    ) -> None:
        if name not in world.camera_ids:
            raise ValueError(f"unknown sim camera {name!r}: the world has {sorted(world.camera_ids)}")
        if not 1 <= jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality={jpeg_quality} must be within 1..100")
        self.world = world
        self.name = name
        self.width = width or world.config.image_width
        self.height = height or world.config.image_height
        self.jpeg_quality = jpeg_quality
        self._connected = False
        self._frame_index = 0
        self._lock = threading.Lock()
        fx, fy, cx, cy = world.camera_intrinsics(name, self.width, self.height)
        self._intrinsics = CameraIntrinsics(width=self.width, height=self.height, fx=fx, fy=fy, cx=cx, cy=cy)

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def intrinsics(self) -> CameraIntrinsics:
        return self._intrinsics

    def read_rgb(self) -> tuple[np.ndarray, float]:
        """(RGB uint8 [H, W, 3], capture time) of the current state."""
        capture_time_s = time.time()
        return self.world.render(self.name, self.width, self.height), capture_time_s

    def read(self, timeout_s: float = 0.5) -> CameraFrame:
        if not self._connected:
            raise CameraError(f"sim camera {self.name!r} is not connected: call connect() first")
        rgb, capture_time_s = self.read_rgb()
        ok, buf = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
        if not ok:
            raise CameraError(f"sim camera {self.name!r}: JPEG encoding failed")
        with self._lock:
            self._frame_index += 1
            index = self._frame_index
        return CameraFrame(
            name=self.name,
            jpeg=buf.tobytes(),
            width=self.width,
            height=self.height,
            capture_time_s=capture_time_s,
            frame_index=index,
            intrinsics=self._intrinsics,
        )
