"""A 3Dconnexion SpaceMouse over raw HID: six axes and buttons become ee_delta commands.

HID reports (facts as pyspacemouse and spacenavd read them): report 1 carries the translation as
three little-endian int16 (bytes 1..6); report 2 the rotation, the same way; report 3 the buttons
as a bit mask from byte 1. Newer devices (SpaceMouse Wireless, Compact) send all six axes in one
13-byte report 1. Axis values reach about +-350 at full deflection.

The device is the boundary: ``HidDevice`` is what the source needs of it, ``open_hid_spacemouse``
opens a real one through hidapi (``pip install -e .[teleop]``; the udev rule in docs/teleop.md),
and tests hand in a fake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from teleop.base import GripperToggle, TeleopCommand, TeleopError, TeleopSource, remove_deadband
from teleop.settings import TeleopSettings

# 3Dconnexion's USB vendor ids: its own, and Logitech's for the older devices.
SPACEMOUSE_VENDOR_IDS = (0x256F, 0x046D)
_REPORT_TRANSLATION, _REPORT_ROTATION, _REPORT_BUTTONS = 1, 2, 3
_MAX_REPORTS_PER_READ = 256  # a read drains what queued since the last tick, up to this many
_REPORT_BYTES = 64


class HidDevice(Protocol):
    """What the source needs of a HID device (hidapi's ``hid.device`` has these)."""

    def read(self, max_length: int, timeout_ms: int = 0) -> Sequence[int]: ...

    def close(self) -> None: ...


def open_hid_spacemouse() -> HidDevice:
    """The first 3Dconnexion device hidapi finds, opened non-blocking."""
    try:
        import hid  # hidapi (cython-hidapi)
    except ImportError as e:
        raise TeleopError(
            f"hidapi is not installed ({e}): pip install -e '.[teleop]' on the machine the SpaceMouse "
            "is plugged into"
        ) from e
    found = [d for d in hid.enumerate() if d.get("vendor_id") in SPACEMOUSE_VENDOR_IDS]
    if not found:
        raise TeleopError(
            "no 3Dconnexion device found: plug the SpaceMouse (or its receiver) in, and check that "
            "your user may read /dev/hidraw* (the udev rule in docs/teleop.md)"
        )
    dev = hid.device()
    try:
        dev.open_path(found[0]["path"])
    except OSError as e:
        raise TeleopError(
            f"cannot open {found[0].get('product_string', 'the SpaceMouse')} ({e}): another program "
            "(spacenavd, 3DxWare) may hold it, or /dev/hidraw* needs the udev rule in docs/teleop.md"
        ) from e
    dev.set_nonblocking(1)
    return dev


def _int16s(report: Sequence[int], first: int, count: int) -> list[int]:
    out = []
    for i in range(count):
        lo, hi = report[first + 2 * i], report[first + 2 * i + 1]
        v = lo | (hi << 8)
        out.append(v - 0x10000 if v >= 0x8000 else v)
    return out


def shape_axes(raw: np.ndarray, settings: TeleopSettings) -> np.ndarray:
    """Raw axis values -> [-1, 1] per robot axis: full-scale normalised, deadband removed (the rest
    rescaled to start at 0), reordered and signed into the base frame."""
    v = remove_deadband(np.asarray(raw, dtype=np.float64) / settings.spacemouse_full_scale, settings.deadband)
    return v[list(settings.spacemouse_axis_order)] * np.asarray(settings.spacemouse_axis_signs)


class SpaceMouseSource(TeleopSource):
    """Deflection is speed: a full push moves the TCP at ``max_speed_m_s`` (turns at
    ``max_rotation_rad_s``); one button toggles the gripper, another ends the take."""

    name = "spacemouse"
    rereadable = True  # read() is the axes' state now; button presses toggle or end

    def __init__(
        self,
        settings: TeleopSettings | None = None,
        open_device: Callable[[], HidDevice] = open_hid_spacemouse,
    ) -> None:
        self.settings = settings or TeleopSettings()
        self._open_device = open_device
        self._dev: HidDevice | None = None
        self._axes = np.zeros(6)  # raw, HID order
        self._buttons = 0
        self._pressed = 0  # buttons pressed (rising edges) since the last read
        self._gripper = GripperToggle(self.settings.gripper_open_m, self.settings.gripper_closed_m)

    def _open(self) -> None:
        self._dev = self._open_device()

    def _close(self) -> None:
        if self._dev is not None:
            self._dev.close()
            self._dev = None

    def start_take(self, gripper_width_m: float) -> None:
        self._require_connected()
        self._drain()
        self._pressed = 0
        self._gripper.start(gripper_width_m)

    def _drain(self) -> None:
        assert self._dev is not None
        for _ in range(_MAX_REPORTS_PER_READ):
            try:
                report = self._dev.read(_REPORT_BYTES, 0)
            except OSError as e:
                raise TeleopError(
                    f"the SpaceMouse stopped answering ({e}): check its cable or receiver"
                ) from e
            if not report:
                return
            self._apply(report)

    def _apply(self, report: Sequence[int]) -> None:
        kind = report[0]
        if kind == _REPORT_TRANSLATION and len(report) >= 13:
            self._axes[:] = _int16s(report, 1, 6)
        elif kind == _REPORT_TRANSLATION and len(report) >= 7:
            self._axes[:3] = _int16s(report, 1, 3)
        elif kind == _REPORT_ROTATION and len(report) >= 7:
            self._axes[3:] = _int16s(report, 1, 3)
        elif kind == _REPORT_BUTTONS and len(report) >= 2:
            mask = 0
            for i, byte in enumerate(report[1:5]):
                mask |= byte << (8 * i)
            self._pressed |= mask & ~self._buttons
            self._buttons = mask

    def wants_control(self) -> bool:
        """Any axis past the deadband (buttons pressed meanwhile are forgotten at ``start_take``)."""
        self._require_connected()
        self._drain()
        return bool(np.any(shape_axes(self._axes, self.settings)))

    def read(self, period_s: float) -> TeleopCommand:
        self._require_connected()
        self._drain()
        s = self.settings
        pressed, self._pressed = self._pressed, 0
        if pressed >> s.spacemouse_gripper_button & 1:
            self._gripper.toggle()
        twist = shape_axes(self._axes, s)
        return TeleopCommand(
            gripper_width_m=self._gripper.width_m,
            translation_m=twist[:3] * s.max_speed_m_s * period_s,
            rotation_rad=twist[3:] * s.max_rotation_rad_s * period_s,
            end=bool(pressed >> s.spacemouse_end_button & 1),
        )
