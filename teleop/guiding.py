"""Hand guiding (kinesthetic teaching): the arm is in guiding mode and the operator moves it; this
source commands nothing (``guided``), it only says when the take ends: after ``max_ticks``
control ticks, or at an Enter from ``keys`` (``keyboard.TerminalKeys`` in ``pde record``).

The FR3 enters guiding mode through the robot server (``SetGuidingMode``; the pilot's guiding
button then frees the arm); the sim's arm goes limp and something must push it
(``robot_server/sim/hand.py: ScriptedHand`` in tests and benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable

from teleop.base import TeleopCommand, TeleopSource
from teleop.keyboard import END_KEYS, KeyInput


class HandGuidingSource(TeleopSource):
    name = "guiding"
    guided = True

    def __init__(self, keys: Callable[[], KeyInput] | None = None, max_ticks: int | None = None) -> None:
        self._open_keys = keys
        self._input: KeyInput | None = None
        self.max_ticks = max_ticks
        self._ticks = 0
        self._width_m = 0.0

    def _open(self) -> None:
        if self._open_keys is not None:
            self._input = self._open_keys()

    def _close(self) -> None:
        if self._input is not None:
            self._input.close()
            self._input = None

    def start_take(self, gripper_width_m: float) -> None:
        self._require_connected()
        self._ticks = 0
        self._width_m = gripper_width_m
        if self._input is not None:
            self._input.presses()

    def read(self, period_s: float) -> TeleopCommand:
        self._require_connected()
        self._ticks += 1
        end = self.max_ticks is not None and self._ticks > self.max_ticks
        if self._input is not None:
            end |= any(k in END_KEYS for k in self._input.presses())
        return TeleopCommand(gripper_width_m=self._width_m, end=end)
