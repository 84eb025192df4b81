"""Teleoperation from the operator page: its keys and a gamepad (the browser's Gamepad API).

While the page holds control (a take of a `pde record` page session, or a takeover during RL with
``PDE_TELEOP_PERSON=page``), it sends its input state every ``page_send_period_ms`` as a
``PageCommand``: six deflections in [-1, 1] in the base frame (a held key is a full deflection, a
stick what it reads), and two counters, the gripper presses and the "hand back" presses since the
page loaded. The page maps keys and buttons (``operator_ui/static/app.js``, shown in its help);
this source applies the one configuration (``TeleopSettings``: deadband, speeds) as the SpaceMouse
does: deflection is speed. Counters instead of events make a lost or repeated command harmless:
a take toggles the gripper once per press counted past its start, and ends when the hand-back
count moves.

Watchdog: a command older than ``page_watchdog_ms`` (a closed tab, a lost network) gives zero
motion until the next one. Where the commands come from is a callable (``latest``): a
``PageCommandBox`` the page's server fills (a record session runs in that process), or the
learner's read of the page's newest command from the database (a takeover).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from teleop.base import GripperToggle, TeleopCommand, TeleopError, TeleopSource, remove_deadband
from teleop.settings import TeleopSettings

AXES = 6  # x, y, z, rx, ry, rz in the robot base frame


@dataclass(frozen=True, slots=True)
class PageCommand:
    """The page's input state as sent (``axes`` in [-1, 1]; counters never decrease within a page
    load), with the wall-clock time it arrived at the page's server."""

    axes: tuple[float, float, float, float, float, float]
    gripper_presses: int
    end_presses: int
    device: str  # "keyboard", or "gamepad: <the browser's id of the pad>"
    received_unix_s: float

    @staticmethod
    def checked(
        axes: list[float] | tuple[float, ...],
        gripper_presses: int,
        end_presses: int,
        device: str,
        received_unix_s: float | None = None,
    ) -> PageCommand:
        """Refuses what the page never sends (the route answers 422 with the message)."""
        if len(axes) != AXES or not all(np.isfinite(a) and -1.0 <= a <= 1.0 for a in axes):
            raise TeleopError(f"axes {list(axes)} must be {AXES} numbers in [-1, 1] (x, y, z, rx, ry, rz)")
        if gripper_presses < 0 or end_presses < 0:
            raise TeleopError(f"press counters ({gripper_presses}, {end_presses}) must not be negative")
        a = tuple(float(x) for x in axes)
        return PageCommand(
            (a[0], a[1], a[2], a[3], a[4], a[5]),
            gripper_presses,
            end_presses,
            device,
            time.time() if received_unix_s is None else received_unix_s,
        )


class PageCommandBox:
    """The newest command from the page, shared between the server's request threads and the
    recorder's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: PageCommand | None = None

    def put(self, command: PageCommand) -> None:
        with self._lock:
            self._latest = command

    def latest(self) -> PageCommand | None:
        with self._lock:
            return self._latest


class PageSource(TeleopSource):
    name = "page"

    def __init__(
        self,
        latest: Callable[[], PageCommand | None],
        settings: TeleopSettings | None = None,
        clock_unix_s: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or TeleopSettings()
        self._latest = latest
        self._clock = clock_unix_s
        self._gripper = GripperToggle(self.settings.gripper_open_m, self.settings.gripper_closed_m)
        self._gripper_seen = 0
        self._end_seen = 0
        self._before_take: PageCommand | None = None
        self._end_requested = threading.Event()
        self.watchdog_stops = 0  # ticks of a take held because the page went silent in it

    def _fresh(self) -> PageCommand | None:
        cmd = self._latest()
        if cmd is None:
            return None
        if self._clock() - cmd.received_unix_s > self.settings.page_watchdog_ms / 1000.0:
            return None
        return cmd

    def start_take(self, gripper_width_m: float) -> None:
        """Presses counted before the take are not part of it (the newest command's counters are
        the take's zero, however old it is)."""
        self._require_connected()
        cmd = self._latest()
        self._gripper_seen = cmd.gripper_presses if cmd else 0
        self._end_seen = cmd.end_presses if cmd else 0
        self._before_take = cmd
        self._end_requested.clear()
        self._gripper.start(gripper_width_m)
        self.watchdog_stops = 0

    def request_end(self) -> None:
        """End the take at the next read, whatever the page sends meanwhile (the page's stop
        button, through its server)."""
        self._end_requested.set()

    def read(self, period_s: float) -> TeleopCommand:
        self._require_connected()
        if self._end_requested.is_set():
            return TeleopCommand(gripper_width_m=self._gripper.width_m, end=True)
        cmd = self._fresh()
        if cmd is None:
            # counted once the page spoke during the take (not while it has yet to start sending)
            latest = self._latest()
            self.watchdog_stops += latest is not None and latest is not self._before_take
            return TeleopCommand(gripper_width_m=self._gripper.width_m)
        # a counter that went back is a reloaded page: its count starts again from there
        toggles = cmd.gripper_presses - self._gripper_seen if cmd.gripper_presses >= self._gripper_seen else 0
        self._gripper_seen = cmd.gripper_presses
        for _ in range(toggles % 2):
            self._gripper.toggle()
        end = cmd.end_presses > self._end_seen
        self._end_seen = cmd.end_presses
        s = self.settings
        twist = remove_deadband(np.asarray(cmd.axes), s.deadband)
        return TeleopCommand(
            gripper_width_m=self._gripper.width_m,
            translation_m=twist[:3] * s.max_speed_m_s * period_s,
            rotation_rad=twist[3:] * s.max_rotation_rad_s * period_s,
            end=end,
        )
