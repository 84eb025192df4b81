"""One RealSense camera, opened by serial number, delivering JPEG colour frames on the host clock.

- Devices are enumerated first (a few ms): starting a pipeline for a device that is not there
  blocks ~15 s inside librealsense before failing.
- Timestamps: with ``global_time_enabled`` the device clock is mapped onto the host clock
  (domain ``global_time``); ``system_time`` is the host's arrival time; a bare ``hardware_clock``
  stamp is replaced by the host time the frame arrived.
- Frames older than ``max_age_s`` are refused: a policy must not act on a stale picture.
- After an unplug (``try_wait_for_frames`` keeps failing) the pipeline is stopped and restarted
  once the serial shows up again; repeated failed restarts trigger a hardware reset.
- After every (re)start the first ``settle_frames`` frames are dropped: auto exposure and white
  balance take that long to converge, and a policy must not act on a dark or tinted picture.
- The USB link the camera enumerated on is read at start (``usb_type``): on USB 2 its bandwidth is
  a fraction of USB 3's and frames arrive late or not at all; that is logged, or refused with
  ``require_usb3``.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from pde_contract.messages import CameraFrame, CameraIntrinsics
from robot_server.cameras.base import Camera, CameraError

logger = logging.getLogger(__name__)


class RealSenseStream(BaseModel):
    """What a lab sets per camera in the robot configuration file ([robot.realsense.<camera>])."""

    model_config = {"extra": "forbid"}

    width: int = Field(default=640, gt=0)
    height: int = Field(default=480, gt=0)
    fps: int = Field(default=30, gt=0)
    depth: bool = False
    # Manual exposure of the colour sensor in microseconds (None: auto exposure).
    exposure_us: float | None = Field(default=None, gt=0)
    # Manual white balance in kelvin (None: auto white balance).
    white_balance_k: float | None = Field(default=None, ge=2800, le=6500)
    # Auto exposure may lower the frame rate in dim light (librealsense's default on some models):
    # False keeps the configured fps. None: leave the camera's own setting.
    auto_exposure_priority: bool | None = None


class RealSenseConfig(RealSenseStream):
    name: str = Field(description='camera name in observations ("external", "wrist")')
    serial: str = Field(
        min_length=1, description="serial number printed on the camera / rs-enumerate-devices"
    )
    max_age_s: float = Field(default=0.2, gt=0.0, description="older frames are refused as stale")
    jpeg_quality: int = Field(default=90, ge=1, le=100)
    frame_queue_size: int = Field(default=2, ge=1)
    failures_before_restart: int = Field(default=3, ge=1)
    restarts_before_hardware_reset: int = Field(default=2, ge=1)
    reconnect_interval_s: float = Field(default=1.0, ge=0.0)
    settle_frames: int = Field(
        default=15, ge=0, description="frames dropped after each (re)start while auto exposure settles"
    )
    require_usb3: bool = Field(default=False, description="refuse to start on a USB 2 link")


def _import_pyrealsense() -> ModuleType:
    try:
        import pyrealsense2
    except ImportError as e:
        raise CameraError(
            f"pyrealsense2 cannot be imported ({e}): install the robot extra (`pip install -e .[robot]`) "
            "and the Debian package libusb-1.0-0"
        ) from e
    return pyrealsense2


class RealSenseCamera(Camera):
    def __init__(
        self,
        name: str | None = None,
        serial: str | None = None,
        config: RealSenseConfig | None = None,
        rs: Any = None,
        **overrides: Any,
    ) -> None:
        if config is None:
            config = RealSenseConfig(name=name or "", serial=serial or "", **overrides)
        self.config = config
        self.name = config.name
        self._rs = rs  # the pyrealsense2 module (or a test fake of it); imported on connect
        self._pipeline: Any = None
        self._intrinsics: CameraIntrinsics | None = None
        self._consecutive_failures = 0
        self._restarts_without_frame = 0
        self._next_reconnect_s = 0.0
        self._frame_index = 0
        self.restarts = 0
        self.hardware_resets = 0
        self.stale_frames = 0
        self.settle_frames_dropped = 0
        self.usb_type = ""  # e.g. "3.2" or "2.1", as the device reports it ("" before connect)
        self.last_error = ""

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def rs(self) -> Any:
        if self._rs is None:
            self._rs = _import_pyrealsense()
        return self._rs

    def connected_serials(self) -> list[str]:
        rs = self.rs
        return [str(d.get_info(rs.camera_info.serial_number)) for d in rs.context().query_devices()]

    def _find_device(self) -> Any | None:
        rs = self.rs
        for device in rs.context().query_devices():
            if str(device.get_info(rs.camera_info.serial_number)) == self.config.serial:
                return device
        return None

    def connect(self) -> None:
        if self._pipeline is not None:
            return
        device = self._find_device()
        if device is None:
            raise CameraError(
                f"RealSense camera {self.name!r} (serial {self.config.serial}) is not connected; "
                f"connected serials: {self.connected_serials() or 'none'}. Check the USB3 cable and port "
                "(one controller per camera) or fix the serial in the configuration."
            )
        self._start(device)

    def _start(self, device: Any) -> None:
        rs = self.rs
        self._check_usb(device)
        self._configure_sensors(device)
        cfg = rs.config()
        cfg.enable_device(self.config.serial)
        cfg.enable_stream(
            rs.stream.color, self.config.width, self.config.height, rs.format.bgr8, self.config.fps
        )
        if self.config.depth:
            cfg.enable_stream(
                rs.stream.depth, self.config.width, self.config.height, rs.format.z16, self.config.fps
            )
        pipeline = rs.pipeline()
        try:
            profile = pipeline.start(cfg)
        except RuntimeError as e:
            raise CameraError(
                f"RealSense {self.config.serial} could not start {self.config.width}x{self.config.height}"
                f"@{self.config.fps} ({e}). Is it on a USB3 port, and is no other program using it?"
            ) from e
        intr = profile.get_stream(rs.stream.color).as_video_stream_profile().get_intrinsics()
        self._intrinsics = CameraIntrinsics(
            width=int(intr.width),
            height=int(intr.height),
            fx=float(intr.fx),
            fy=float(intr.fy),
            cx=float(intr.ppx),
            cy=float(intr.ppy),
            distortion=[float(c) for c in intr.coeffs],
        )
        self._pipeline = pipeline
        self._consecutive_failures = 0
        self._settle(pipeline)

    def _check_usb(self, device: Any) -> None:
        rs = self.rs
        info = rs.camera_info.usb_type_descriptor
        self.usb_type = str(device.get_info(info)) if device.supports(info) else ""
        if not self.usb_type.startswith("2"):
            return
        message = (
            f"RealSense {self.name!r} (serial {self.config.serial}) is on USB {self.usb_type}, not USB 3: "
            "frames will be late or missing. Plug it into a USB 3 port (blue) with a USB 3 cable, one "
            "camera per controller (`lsusb -t` shows the speed: 5000M or more)"
        )
        if self.config.require_usb3:
            raise CameraError(message)
        logger.warning(message)

    def _settle(self, pipeline: Any) -> None:
        """Drop the first frames after a start while auto exposure converges. A camera that gives
        no frame within a second is not settling: read() then handles it as any failure."""
        dropped = 0
        while dropped < self.config.settle_frames:
            ok, frames = pipeline.try_wait_for_frames(1000)
            if not ok or not frames.get_color_frame():
                break
            dropped += 1
        self.settle_frames_dropped += dropped

    def _configure_sensors(self, device: Any) -> None:
        rs = self.rs
        for sensor in device.query_sensors():
            if sensor.supports(rs.option.global_time_enabled):
                sensor.set_option(rs.option.global_time_enabled, 1.0)
            if sensor.supports(rs.option.frames_queue_size):
                sensor.set_option(rs.option.frames_queue_size, float(self.config.frame_queue_size))
            self._set_exposure(sensor)

    def _set_exposure(self, sensor: Any) -> None:
        """The configured exposure and white balance, on the sensor that offers them (the colour
        one; the D405's single sensor). A manual value first turns its auto mode off."""
        rs, c = self.rs, self.config
        wanted: list[tuple[Any, float]] = []
        if c.exposure_us is not None:
            wanted += [(rs.option.enable_auto_exposure, 0.0), (rs.option.exposure, c.exposure_us)]
        if c.white_balance_k is not None:
            wanted += [
                (rs.option.enable_auto_white_balance, 0.0),
                (rs.option.white_balance, c.white_balance_k),
            ]
        if c.auto_exposure_priority is not None:
            wanted.append((rs.option.auto_exposure_priority, float(c.auto_exposure_priority)))
        for option, value in wanted:
            if sensor.supports(option):
                sensor.set_option(option, value)

    def disconnect(self) -> None:
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            try:
                pipeline.stop()
            except RuntimeError as e:  # already stopped by an unplug
                logger.debug("stopping RealSense %s: %s", self.config.serial, e)

    @property
    def is_connected(self) -> bool:
        return self._pipeline is not None

    @property
    def intrinsics(self) -> CameraIntrinsics | None:
        return self._intrinsics

    # --- frames ---------------------------------------------------------------------------------

    def read(self, timeout_s: float = 0.5) -> CameraFrame:
        if self._pipeline is None:
            self._try_reconnect()
        ok, frames = self._pipeline.try_wait_for_frames(max(1, int(timeout_s * 1000)))
        color = frames.get_color_frame() if ok else None
        if not color:
            self._on_failure()
            raise CameraError(
                f"RealSense {self.name!r} (serial {self.config.serial}) gave no frame within "
                f"{timeout_s:.2f} s ({self._consecutive_failures} in a row); {self.last_error or 'retrying'}"
            )
        self._consecutive_failures = 0
        self._restarts_without_frame = 0
        capture_time_s = self._host_time_s(color)
        age_s = time.time() - capture_time_s
        if age_s > self.config.max_age_s:
            self.stale_frames += 1
            raise CameraError(
                f"RealSense {self.name!r} frame is {age_s * 1000:.0f} ms old (max "
                f"{self.config.max_age_s * 1000:.0f} ms): the host is too busy reading frames or USB "
                "bandwidth is short; refusing it"
            )
        image = np.asanyarray(color.get_data())
        self._frame_index += 1
        return CameraFrame(
            name=self.name,
            jpeg=self._encode(image),
            width=int(image.shape[1]),
            height=int(image.shape[0]),
            capture_time_s=capture_time_s,
            frame_index=int(color.get_frame_number()),
            intrinsics=self._intrinsics,
        )

    def _host_time_s(self, frame: Any) -> float:
        rs = self.rs
        domain = frame.get_frame_timestamp_domain()
        if domain in (rs.timestamp_domain.global_time, rs.timestamp_domain.system_time):
            return float(frame.get_timestamp()) / 1000.0
        # Device clock only: the best host-side estimate is now (the frame just arrived).
        return time.time()

    def _encode(self, bgr: np.ndarray) -> bytes:
        import cv2

        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.config.jpeg_quality])
        if not ok:
            raise CameraError(f"JPEG encoding failed for a {bgr.shape} frame from {self.name!r}")
        return bytes(buf)

    # --- recovery -------------------------------------------------------------------------------

    def _on_failure(self) -> None:
        self._consecutive_failures += 1
        if self._consecutive_failures < self.config.failures_before_restart:
            return
        self.disconnect()  # the next read() restarts the pipeline when the camera is there
        self._consecutive_failures = 0
        self._restarts_without_frame += 1
        self.last_error = "pipeline stopped; restarting on the next read"

    def _try_reconnect(self) -> None:
        now = time.monotonic()
        if now < self._next_reconnect_s:
            raise CameraError(
                f"RealSense {self.name!r} (serial {self.config.serial}) is disconnected; {self.last_error}"
            )
        self._next_reconnect_s = now + self.config.reconnect_interval_s
        device = self._find_device()
        if device is None:
            self.last_error = "unplugged? it is not enumerated; reconnecting when it is back"
            raise CameraError(
                f"RealSense {self.name!r} (serial {self.config.serial}) is not enumerated (unplugged?). "
                "Reconnecting when it is back; check the USB3 cable."
            )
        if self._restarts_without_frame >= self.config.restarts_before_hardware_reset:
            logger.warning(
                "RealSense %s: no frames after %d restarts, hardware reset",
                self.config.serial,
                self._restarts_without_frame,
            )
            device.hardware_reset()
            self.hardware_resets += 1
            self._restarts_without_frame = 0
            self.last_error = "hardware reset; the camera re-enumerates in a few seconds"
            raise CameraError(f"RealSense {self.name!r}: {self.last_error}")
        self._start(device)
        self.restarts += 1
        self.last_error = ""
        logger.info("RealSense %s restarted", self.config.serial)
