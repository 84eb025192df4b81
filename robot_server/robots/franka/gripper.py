"""The Franka Hand on its own worker thread: the latest requested width wins.

Every libfranka gripper call blocks until the previous one has finished (0.4-1.2 s), far longer
than a 100 ms control tick. The control loop only records the newest request; the worker executes
it when the hand is free and drops the ones that were overtaken. ``halt()`` (arm hold, e-stop)
drops the waiting request and stops the fingers where they are.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from robot_server.robots.franka.deadline import call_with_deadline

logger = logging.getLogger(__name__)

# Homing closes and opens the fingers once: ~1.5 s on franky-sim, a few seconds on a hand.
HOMING_TIMEOUT_S = 20.0


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
        epsilon_inner_m: float = 0.005,
        epsilon_outer_m: float = 0.07,
        empty_width_m: float = 0.003,
        stop_on_halt: bool = False,
    ) -> None:
        self._make_gripper = make_gripper
        self._connect_timeout_s = connect_timeout_s
        self.speed_m_s = speed_m_s
        self.force_n = force_n
        self.deadband_m = deadband_m
        self.max_width_m = max_width_m
        # A grasp succeeds when the fingers stop within [width - inner, width + outer] of the
        # commanded width: closing to 0 holds anything up to 7 cm, and an object wider than that,
        # or no object at all, is reported. Fingers shut below empty_width_m hold nothing.
        self.epsilon_inner_m = epsilon_inner_m
        self.epsilon_outer_m = epsilon_outer_m
        self.empty_width_m = empty_width_m
        self.object_held = False
        # halt() also stops a running call (libfranka stop). Off by default: franky-sim 1.0.4 never
        # answers a stopped call, after which franky's Gripper blocks every later call and
        # segfaults when freed; a real hand reports the call aborted.
        self.stop_on_halt = stop_on_halt
        self._ignore_m: float | None = None  # the width halt() stopped: not re-sent until it changes
        self._gripper: Any = None
        self._cond = threading.Condition()
        self._request: float | None = None
        self._busy = False
        self._running_m: float | None = None  # width of the call in progress
        self._halt = threading.Event()  # halt(): the worker stops the call in progress
        self._stopping = False
        self._last_commanded_m: float | None = None
        self.width_m = 0.0
        self.commands_executed = 0
        self.commands_dropped = 0
        self.errors = 0
        self.halts = 0  # calls stopped by halt()
        self.homed = False  # homing ran (home(): at the first reset, never at start)
        self._home_wanted = False
        self.last_error = ""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Connect (with the deadline) and start the worker; the fingers do not move. Raises on
        failure."""
        self._connect()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="franka-gripper", daemon=True)
        self._thread.start()

    def _connect(self) -> None:
        self._gripper = call_with_deadline(
            self._make_gripper, self._connect_timeout_s, "franka-gripper-connect"
        )
        self._read_widths()

    def _read_widths(self) -> None:
        self.width_m = float(self._gripper.width)
        max_width = float(self._gripper.max_width)
        if max_width > 0.0:
            self.max_width_m = max_width

    def home(self, timeout_s: float) -> bool:
        """Blocking: the hand learns its finger width (libfranka homing: it closes, then opens
        fully), on the worker after the call in progress; the waiting request is dropped. False
        (``last_error`` says why) when it failed or did not finish within ``timeout_s``."""
        with self._cond:
            if self._request is not None:
                self.commands_dropped += 1
                self._request = None
            self._home_wanted = True
            self._cond.notify_all()
        if not self.wait_idle(timeout_s):
            self.last_error = f"the Franka Hand's homing did not finish within {timeout_s:.0f} s"
            return False
        return self.homed

    def _home(self) -> None:
        try:
            ok = call_with_deadline(self._gripper.homing, HOMING_TIMEOUT_S, "franka-gripper-homing")
        except Exception as e:
            ok = False
            self.last_error = f"the Franka Hand's homing failed ({type(e).__name__}: {e})"
        else:
            self.last_error = "" if ok else "the Franka Hand's homing failed"
        if not ok:
            self.errors += 1
            self.last_error += (
                ": make sure nothing is between or against the fingers and reset again "
                "(gripper_homing = false in the robot configuration skips it)"
            )
            return
        self.homed = True
        self._last_commanded_m = None
        self._read_widths()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=3.0)
        self._thread = None
        self._gripper = None

    def request(self, width_m: float, held: bool = False) -> None:
        """Non-blocking. Replaces any request not yet started. ``held``: the width the arm's hold
        keeps commanding, not a new request: after ``halt()`` the halted width is not sent again
        for it (a new request, e.g. a chunk closing the hand again, is)."""
        width_m = min(max(float(width_m), 0.0), self.max_width_m)
        with self._cond:
            if held and self._request is None and self._last_commanded_m is None:
                # Nothing asked of the hand since the server started: a hold keeps whatever the
                # fingers do (a move to the measured width would end a grasp's force).
                return
            if self._ignore_m is not None:
                if held and abs(width_m - self._ignore_m) < self.deadband_m:
                    return
                self._ignore_m = None
            reference = self._request if self._request is not None else self._last_commanded_m
            if reference is not None and abs(width_m - reference) < self.deadband_m:
                return
            if self._request is not None:
                self.commands_dropped += 1
            self._request = width_m
            self._cond.notify_all()

    def halt(self) -> None:
        """Non-blocking: forget the waiting request and, with ``stop_on_halt``, stop a running move
        or grasp (libfranka ``stop``, sent by the worker, which waits on the running call's future).
        The hold's own requests for the halted width are ignored, so no gripper motion starts after
        a hold until a chunk or command asks for a width."""
        with self._cond:
            halted = self._request if self._request is not None else self._running_m
            if self._request is not None:
                self.commands_dropped += 1
                self._request = None
            self._ignore_m = halted
            if self._busy and self.stop_on_halt:
                self._halt.set()

    def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._request is not None or self._home_wanted or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0.0:
                    return False
                self._cond.wait(remaining)
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._request is None and not self._home_wanted and not self._stopping:
                    # Refresh the measured width while idle (reading it takes ~1 ms).
                    if not self._cond.wait(0.1):
                        break
                if self._stopping:
                    return
                homing, self._home_wanted = self._home_wanted, False
                width = None if homing else self._request
                if not homing:
                    self._request = None
                self._busy = homing or width is not None
                self._running_m = width
                self._halt.clear()
            if homing:
                try:
                    if self._gripper is None:
                        self._connect()
                    self._home()
                except Exception as e:  # the connection: the worker must survive it
                    self.errors += 1
                    self.last_error = f"Franka Hand: homing failed ({type(e).__name__}: {e})"
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                continue
            try:
                if width is None:
                    if self._gripper is not None:
                        self.width_m = float(self._gripper.width)
                        self.object_held = self.object_held and self._still_held()
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
                    self._running_m = None
                    self._cond.notify_all()

    def _execute(self, width_m: float) -> None:
        if self._gripper is None:
            self._connect()
        current = float(self._gripper.width)
        # Set before the call: a halted or failed command is not re-sent for the same width.
        self._last_commanded_m = width_m
        gripper = self._gripper
        if width_m < current:
            # Closing: grasp with force (a plain move stops with an error when it meets an object).
            grasped = self._finish(
                gripper,
                gripper.grasp_async(
                    width_m, self.speed_m_s, self.force_n, self.epsilon_inner_m, self.epsilon_outer_m
                ),
            )
            self.width_m = float(gripper.width)
            self.object_held = bool(grasped) and self.width_m > self.empty_width_m
        else:
            self._finish(gripper, gripper.move_async(width_m, self.speed_m_s))
            self.width_m = float(gripper.width)
            self.object_held = False
        self.commands_executed += 1

    def _finish(self, gripper: Any, future: Any) -> bool | None:
        """The call's result, or None when halt() stopped it first. A stopped call's own answer is
        not awaited: franky-sim never sends one (a real hand reports it aborted)."""
        while not future.wait(0.05):
            if self._halt.is_set():
                self._halt.clear()
                gripper.stop()
                self.halts += 1
                return None
        return bool(future.get())

    def _still_held(self) -> bool:
        """The hand still reports the grasp (a dropped object clears ``is_grasped``)."""
        return bool(getattr(self._gripper, "is_grasped", True)) and self.width_m > self.empty_width_m
