"""RealSenseCamera logic through FakeRealSense (no camera in CI), and the real import."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest

from robot_server.cameras.base import CameraError
from robot_server.cameras.realsense import RealSenseCamera, RealSenseConfig
from robot_server.cameras.realsense.camera import RealSenseStream
from tests.robot_server.realsense.fake_realsense import FakeRealSense, timestamp_domain


def test_pyrealsense2_imports() -> None:
    import pyrealsense2 as rs

    assert hasattr(rs, "pipeline") and hasattr(rs, "context")


def test_opens_by_serial_and_publishes_intrinsics_and_host_timestamps() -> None:
    rs = FakeRealSense("111", "222")
    cam = RealSenseCamera(name="wrist", serial="222", rs=rs)
    cam.connect()
    before = time.time()
    frame = cam.read()
    assert frame.name == "wrist" and (frame.width, frame.height) == (640, 480)
    assert before - 0.05 <= frame.capture_time_s <= time.time()
    image = cv2.imdecode(np.frombuffer(frame.jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image.shape == (480, 640, 3)
    assert frame.intrinsics is not None and frame.intrinsics.fx == pytest.approx(615.0)
    assert frame.intrinsics.cx == pytest.approx(318.5) and len(frame.intrinsics.distortion) == 5
    assert cam.intrinsics == frame.intrinsics
    # Global time was switched on so stamps land on the host clock.
    sensor = rs.devices["222"].sensors[0]
    assert sensor.options[rs.option.global_time_enabled] == 1.0
    assert cam.read().frame_index == frame.frame_index + 1


def test_device_clock_stamps_are_replaced_by_host_arrival_time() -> None:
    rs = FakeRealSense("111")
    rs.devices["111"].domain = timestamp_domain.hardware_clock
    cam = RealSenseCamera(name="external", serial="111", rs=rs)
    cam.connect()
    # Bracketed by the host clock, not within a fixed margin of it: the JPEG encoding after the
    # stamp can take longer than any margin on a loaded machine (a device stamp reads 12.345 s).
    before = time.time()
    capture_time_s = cam.read().capture_time_s
    assert before <= capture_time_s <= time.time()


def test_missing_serial_is_reported_without_starting_a_pipeline() -> None:
    rs = FakeRealSense("111")
    cam = RealSenseCamera(name="wrist", serial="999", rs=rs)
    with pytest.raises(CameraError, match=r"serial 999\) is not connected; connected serials: \['111'\]"):
        cam.connect()
    assert rs.blocking_starts == 0  # never the 15-s block of starting with no device


def test_stale_frames_are_refused() -> None:
    rs = FakeRealSense("111")
    cam = RealSenseCamera(name="wrist", serial="111", rs=rs, max_age_s=0.1)
    cam.connect()
    rs.devices["111"].lag_s = 0.5
    with pytest.raises(CameraError, match=r"\d+ ms old \(max 100 ms\)"):
        cam.read()
    assert cam.stale_frames == 1
    rs.devices["111"].lag_s = 0.0
    cam.read()


def test_unplug_then_replug_restarts_the_pipeline() -> None:
    rs = FakeRealSense("111")
    cam = RealSenseCamera(name="wrist", serial="111", rs=rs, reconnect_interval_s=0.0)
    cam.connect()
    cam.read()
    rs.devices["111"].plugged = False
    errors = []
    for _ in range(5):
        with pytest.raises(CameraError) as info:
            cam.read(timeout_s=0.01)
        errors.append(str(info.value))
    assert not cam.is_connected
    assert "unplugged" in errors[-1]
    assert rs.blocking_starts == 0
    rs.devices["111"].plugged = True
    frame = cam.read()
    assert frame.width == 640 and cam.is_connected and cam.restarts == 1


def test_repeated_failed_restarts_trigger_a_hardware_reset() -> None:
    rs = FakeRealSense("111")
    cam = RealSenseCamera(
        name="wrist",
        serial="111",
        rs=rs,
        reconnect_interval_s=0.0,
        failures_before_restart=2,
        restarts_before_hardware_reset=2,
    )
    cam.connect()
    rs.devices["111"].wedged = True  # enumerates, never delivers
    for _ in range(12):
        with pytest.raises(CameraError):
            cam.read(timeout_s=0.01)
        if rs.devices["111"].hardware_resets:
            break
    assert rs.devices["111"].hardware_resets == 1 and cam.hardware_resets == 1
    frame = None
    for _ in range(3):
        try:
            frame = cam.read()
            break
        except CameraError:
            continue
    assert frame is not None


def test_bad_configuration_names_the_field() -> None:
    with pytest.raises(ValueError, match="serial"):
        RealSenseCamera(name="wrist", serial="")
    with pytest.raises(ValueError, match="max_age_s"):
        RealSenseCamera(name="wrist", serial="1", max_age_s=-1.0)


def test_frames_are_dropped_while_exposure_settles_after_each_start() -> None:
    rs = FakeRealSense("111")
    cam = RealSenseCamera(name="wrist", serial="111", rs=rs, settle_frames=15, reconnect_interval_s=0.0)
    cam.connect()
    assert cam.read().frame_index == 16 and cam.settle_frames_dropped == 15
    rs.devices["111"].plugged = False
    while cam.is_connected:
        with pytest.raises(CameraError):
            cam.read(timeout_s=0.01)
    rs.devices["111"].plugged = True
    before = rs.devices["111"].frame_number
    assert cam.read().frame_index == before + 16 and cam.settle_frames_dropped == 30
    # a wedged camera gives nothing to drop: the start does not wait for it
    rs.devices["111"].wedged = True
    cam.disconnect()
    cam.connect()
    assert cam.is_connected and cam.settle_frames_dropped == 30


def test_usb2_link_is_reported_or_refused(caplog: pytest.LogCaptureFixture) -> None:
    rs = FakeRealSense("111")
    cam = RealSenseCamera(name="wrist", serial="111", rs=rs)
    cam.connect()
    assert cam.usb_type == "3.2" and "USB" not in caplog.text
    cam.disconnect()
    rs.devices["111"].usb_type = "2.1"
    cam.connect()
    assert cam.usb_type == "2.1" and "is on USB 2.1, not USB 3" in caplog.text
    strict = RealSenseCamera(name="wrist", serial="111", rs=FakeRealSense("111"), require_usb3=True)
    strict.rs.devices["111"].usb_type = "2.1"
    with pytest.raises(CameraError, match="USB 3 port"):
        strict.connect()
    assert not strict.is_connected


def test_configured_exposure_and_white_balance_turn_the_auto_modes_off() -> None:
    rs = FakeRealSense("111")
    stream = RealSenseStream(exposure_us=8000.0, white_balance_k=4600.0, auto_exposure_priority=False)
    RealSenseCamera(
        config=RealSenseConfig(name="wrist", serial="111", **stream.model_dump()), rs=rs
    ).connect()
    options = rs.devices["111"].sensors[0].options
    assert options[rs.option.enable_auto_exposure] == 0.0 and options[rs.option.exposure] == 8000.0
    assert options[rs.option.enable_auto_white_balance] == 0.0 and options[rs.option.white_balance] == 4600.0
    assert options[rs.option.auto_exposure_priority] == 0.0
    # Not configured: the camera's own (auto) settings stay untouched.
    rs2 = FakeRealSense("222")
    RealSenseCamera(name="external", serial="222", rs=rs2).connect()
    assert set(rs2.devices["222"].sensors[0].options) == {
        rs2.option.global_time_enabled,
        rs2.option.frames_queue_size,
    }
