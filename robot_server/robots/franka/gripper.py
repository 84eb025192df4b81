"""The Franka Hand on its own worker thread: the latest requested width wins.

Every libfranka gripper call blocks until the previous one has finished (0.4-1.2 s), far longer
than a 100 ms control tick. The control loop only records the newest request; the worker executes
it when the hand is free and drops the ones that were overtaken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from robot_server.robots.franka.deadline import call_with_deadline

logger = logging.getLogger(__name__)


class GripperWorker:
    """``make_gripper`` builds a franky ``Gripper`` (a new one after a network failure)."""

    def __init__(
        self,
        make_gripper: Callable[[], Any],
        connect_timeout_s: float,
        speed_m_s: float,
        force_n: float,
        deadband_m: float,
        max_width_m: float,
    ) -> None:
        self._make_gripper = make_gripper
        self._connect_timeout_s = connect_timeout_s
        self.speed_m_s = speed_m_s
        self.force_n = force_n
        self.deadband_m = deadband_m
        self.max_width_m = max_width_m
        self._gripper: Any = None
        self._cond = threading.Condition()
        self._request: float | None = None
        self._busy = False
        self._stopping = False
        self._last_commanded_m: float | None = None
        self.width_m = 0.0
        self.commands_executed = 0
        self.commands_dropped = 0
        self.errors = 0
        self.last_error = ""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Connect (with the deadline) and start the worker. Raises on failure."""
        self._connect()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="franka-gripper", daemon=True)
        self._thread.start()

    def _connect(self) -> None:
        self._gripper = call_with_deadline(
            self._make_gripper, self._connect_timeout_s, "franka-gripper-connect"
        )
        self.width_m = float(self._gripper.width)
        max_width = float(self._gripper.max_width)
        if max_width > 0.0:
            self.max_width_m = max_width

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=3.0)
        self._thread = None
        self._gripper = None

    def request(self, width_m: float) -> None:
        """Non-blocking. Replaces any request not yet started."""
        width_m = min(max(float(width_m), 0.0), self.max_width_m)
        with self._cond:
            reference = self._request if self._request is not None else self._last_commanded_m
            if reference is not None and abs(width_m - reference) < self.deadband_m:
                return
            if self._request is not None:
                self.commands_dropped += 1
            self._request = width_m
            self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._request is not None or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0.0:
                    return False
                self._cond.wait(remaining)
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._request is None and not self._stopping:
                    # Refresh the measured width while idle (reading it takes ~1 ms).
                    if not self._cond.wait(0.1):
                        break
                if self._stopping:
                    return
                width = self._request
                self._request = None
                self._busy = width is not None
            try:
                if width is None:
                    if self._gripper is not None:
                        self.width_m = float(self._gripper.width)
                    continue
                self._execute(width)
            except Exception as e:  # the worker must survive any franky error
                self.errors += 1
                what = "reading the width" if width is None else f"moving to {width:.3f} m"
                self.last_error = f"Franka Hand: {what} failed ({type(e).__name__}: {e}); reconnecting"
                logger.warning("%s", self.last_error)
                if type(e).__name__ == "NetworkException":
                    self._gripper = None
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _execute(self, width_m: float) -> None:
        if self._gripper is None:
            self._connect()
        current = float(self._gripper.width)
        if width_m < current:
            # Closing: grasp with force and wide tolerances so an object in the way is held (a plain
            # move stops with an error when it meets one).
            self._gripper.grasp(width_m, self.speed_m_s, self.force_n, 1.0, 1.0)
        else:
            self._gripper.move(width_m, self.speed_m_s)
        self._last_commanded_m = width_m
        self.commands_executed += 1
        self.width_m = float(self._gripper.width)
