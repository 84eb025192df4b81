"""FakeRealSense: a stand-in for the ``pyrealsense2`` module at the USB boundary (no camera exists
in CI). It mimics the calls RealSenseCamera makes, and lets a test plug and unplug devices, hold
frames back (stale) and choose the timestamp domain."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np


class _Enum(enum.Enum):
    def __repr__(self) -> str:
        return self.name


class camera_info(_Enum):
    serial_number = 1
    name = 2  # type: ignore[assignment]  # pyrealsense2 really has camera_info.name
    usb_type_descriptor = 3


class stream(_Enum):
    color = 1
    depth = 2


class format(_Enum):
    bgr8 = 1
    z16 = 2


class option(_Enum):
    global_time_enabled = 1
    frames_queue_size = 2
    enable_auto_exposure = 3
    exposure = 4
    enable_auto_white_balance = 5
    white_balance = 6
    auto_exposure_priority = 7


class timestamp_domain(_Enum):
    hardware_clock = 0
    system_time = 1
    global_time = 2


@dataclass
class FakeSensor:
    options: dict[Any, float] = field(default_factory=dict)

    def supports(self, opt: Any) -> bool:
        return True

    def set_option(self, opt: Any, value: float) -> None:
        self.options[opt] = value


@dataclass
class FakeDevice:
    serial: str
    plugged: bool = True
    # Frame stamps lag the host clock by this much (simulates a backlog of old frames).
    lag_s: float = 0.0
    domain: timestamp_domain = timestamp_domain.global_time
    hardware_resets: int = 0
    # A wedged device enumerates but delivers nothing until a hardware reset.
    wedged: bool = False
    frame_number: int = 0
    usb_type: str = "3.2"  # what librealsense reports for the link the camera enumerated on
    sensors: list[FakeSensor] = field(default_factory=lambda: [FakeSensor()])

    def supports(self, info: camera_info) -> bool:
        return True

    def get_info(self, info: camera_info) -> str:
        if info is camera_info.usb_type_descriptor:
            return self.usb_type
        return self.serial if info is camera_info.serial_number else "Intel RealSense D435 (fake)"

    def query_sensors(self) -> list[FakeSensor]:
        return self.sensors

    def hardware_reset(self) -> None:
        self.hardware_resets += 1
        self.wedged = False


class FakeFrame:
    def __init__(self, device: FakeDevice, width: int, height: int) -> None:
        device.frame_number += 1
        self._number = device.frame_number
        self._domain = device.domain
        host_ms = (time.time() - device.lag_s) * 1000.0
        self._stamp_ms = host_ms if device.domain is not timestamp_domain.hardware_clock else 12345.0
        self._data = np.full((height, width, 3), self._number % 255, dtype=np.uint8)

    def __bool__(self) -> bool:
        return True

    def get_data(self) -> np.ndarray:
        return self._data

    def get_timestamp(self) -> float:
        return self._stamp_ms

    def get_frame_timestamp_domain(self) -> timestamp_domain:
        return self._domain

    def get_frame_number(self) -> int:
        return self._number


class FakeConfig:
    def __init__(self) -> None:
        self.serial = ""
        self.streams: list[tuple[Any, ...]] = []

    def enable_device(self, serial: str) -> None:
        self.serial = serial

    def enable_stream(self, kind: stream, width: int, height: int, fmt: format, fps: int) -> None:
        self.streams.append((kind, width, height, fmt, fps))


class FakeRealSense:
    """Use an instance as the ``rs`` module: ``RealSenseCamera(..., rs=FakeRealSense(devices))``."""

    camera_info = camera_info
    stream = stream
    format = format
    option = option
    timestamp_domain = timestamp_domain

    def __init__(self, *serials: str) -> None:
        self.devices = {s: FakeDevice(s) for s in serials}
        self.pipeline_starts = 0
        self.blocking_starts = 0  # starts for a device that was not there (15 s on real hardware)
        fake = self

        class _Pipeline:
            def __init__(self) -> None:
                self.device: FakeDevice | None = None
                self.size = (0, 0)
                self.running = False

            def start(self, cfg: FakeConfig) -> Any:
                device = fake.devices.get(cfg.serial)
                if device is None or not device.plugged:
                    fake.blocking_starts += 1
                    raise RuntimeError("No device connected")
                fake.pipeline_starts += 1
                self.device, self.running = device, True
                _, w, h, _, _ = next(s for s in cfg.streams if s[0] is stream.color)
                self.size = (w, h)
                intr = SimpleNamespace(
                    width=w,
                    height=h,
                    fx=615.0,
                    fy=615.5,
                    ppx=w / 2 - 1.5,
                    ppy=h / 2 + 2.0,
                    coeffs=[0.01, -0.02, 0.0, 0.0, 0.003],
                )
                video = SimpleNamespace(get_intrinsics=lambda: intr)
                return SimpleNamespace(
                    get_stream=lambda kind: SimpleNamespace(as_video_stream_profile=lambda: video)
                )

            def try_wait_for_frames(self, timeout_ms: int) -> tuple[bool, Any]:
                d = self.device
                if d is None or not self.running or not d.plugged or d.wedged:
                    return False, None
                frame = FakeFrame(d, *self.size)
                return True, SimpleNamespace(get_color_frame=lambda: frame)

            def stop(self) -> None:
                if not self.running:
                    raise RuntimeError("stop() cannot be called before start()")
                self.running = False

        self._pipeline_cls = _Pipeline

    def context(self) -> Any:
        plugged = [d for d in self.devices.values() if d.plugged]
        return SimpleNamespace(query_devices=lambda: plugged)

    def pipeline(self) -> Any:
        return self._pipeline_cls()

    def config(self) -> FakeConfig:
        return FakeConfig()
