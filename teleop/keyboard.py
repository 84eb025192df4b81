"""Keyboard teleoperation: each key press moves the TCP one step at the next control tick.

A terminal reports presses, not holds (key repeat makes a held key a stream of presses), so a
press is a step: ``keyboard_step_m`` / ``keyboard_step_rad`` per press. Keys (base frame):

    w / s   +x / -x        a / d   +y / -y        r / f   +z / -z
    j / l   +rx / -rx      i / k   +ry / -ry      u / o   +rz / -rz
    space   toggle the gripper                    Enter   end the take

Where the presses come from is the ``KeyInput`` boundary: ``TerminalKeys`` reads the controlling
terminal; ``ScriptedKeys`` replays presses tick by tick (tests, benchmarks). The operator page's
keys have a source of their own (``teleop/page.py``): a browser reports holds, so there a held key
is a speed.
"""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import numpy as np

from teleop.base import GripperToggle, TeleopCommand, TeleopError, TeleopSource
from teleop.settings import TeleopSettings

# key -> (axis 0..5, sign); axes 0..2 translate, 3..5 rotate
MOTION_KEYS: dict[str, tuple[int, float]] = {
    "w": (0, 1.0),
    "s": (0, -1.0),
    "a": (1, 1.0),
    "d": (1, -1.0),
    "r": (2, 1.0),
    "f": (2, -1.0),
    "j": (3, 1.0),
    "l": (3, -1.0),
    "i": (4, 1.0),
    "k": (4, -1.0),
    "u": (5, 1.0),
    "o": (5, -1.0),
}
GRIPPER_KEY = " "
END_KEYS = ("\n", "\r")


class KeyInput(Protocol):
    """Key presses since the previous call, oldest first; never blocks."""

    def presses(self) -> list[str]: ...

    def close(self) -> None: ...


class ScriptedKeys:
    """Presses given per tick: ``ticks[i]`` are the keys of the i-th call (then none)."""

    def __init__(self, ticks: Iterable[Sequence[str]]) -> None:
        self._ticks = iter([list(t) for t in ticks])

    def presses(self) -> list[str]:
        return next(self._ticks, [])

    def close(self) -> None:
        return None


class TerminalKeys:
    """Presses on the controlling terminal, read raw (no Enter needed) by a thread."""

    def __init__(self) -> None:
        import termios
        import tty

        if not sys.stdin.isatty():
            raise TeleopError("keyboard teleoperation reads a terminal: run `pde record` in one")
        self._fd = sys.stdin.fileno()
        self._saved = termios.tcgetattr(self._fd)
        tty.setcbreak(self._fd)
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="terminal-keys", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:
                for ch in os.read(self._fd, 64).decode(errors="ignore"):
                    self._queue.put(ch)

    def presses(self) -> list[str]:
        out = []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out

    def close(self) -> None:
        import termios

        self._stop.set()
        self._thread.join(1.0)
        termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)


class KeyboardSource(TeleopSource):
    name = "keyboard"

    def __init__(self, keys: Callable[[], KeyInput], settings: TeleopSettings | None = None) -> None:
        """``keys`` opens the key input on ``connect`` (``TerminalKeys``: the terminal is raw only
        while the source is connected)."""
        self.settings = settings or TeleopSettings()
        self._keys: KeyInput | None = None
        self._open_keys = keys
        self._gripper = GripperToggle(self.settings.gripper_open_m, self.settings.gripper_closed_m)

    def _open(self) -> None:
        self._keys = self._open_keys()

    def _close(self) -> None:
        if self._keys is not None:
            self._keys.close()
            self._keys = None

    def start_take(self, gripper_width_m: float) -> None:
        self._require_connected()
        assert self._keys is not None
        self._keys.presses()  # presses from before the take are not part of it
        self._gripper.start(gripper_width_m)

    def read(self, period_s: float) -> TeleopCommand:
        self._require_connected()
        assert self._keys is not None
        steps = np.zeros(6)
        end = False
        for key in self._keys.presses():
            if key in MOTION_KEYS:
                axis, sign = MOTION_KEYS[key]
                steps[axis] += sign
            elif key == GRIPPER_KEY:
                self._gripper.toggle()
            elif key in END_KEYS:
                end = True
        s = self.settings
        return TeleopCommand(
            gripper_width_m=self._gripper.width_m,
            translation_m=steps[:3] * s.keyboard_step_m,
            rotation_rad=steps[3:] * s.keyboard_step_rad,
            end=end,
        )
