"""A source that replays ee_delta rows from a script: what tests and benchmarks demonstrate with
(a sim expert's rows, a fixed path), and the person who takes over from a policy in tests. It ends
the take when the script runs out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from teleop.base import TeleopCommand, TeleopSource

# A script: rows given up front, or a function asked once per tick (None: the take ends).
RowScript = Iterable[np.ndarray] | Callable[[], np.ndarray | None]


def _asked(script: Callable[[], np.ndarray | None]) -> Iterator[np.ndarray]:
    # Not iter(script, None): it compares each row with None (ambiguous for an array).
    while (row := script()) is not None:
        yield row


class ScriptedSource(TeleopSource):
    name = "scripted"

    def __init__(self, script: RowScript, wants_control: Callable[[], bool] | None = None) -> None:
        """``wants_control``: when the scripted person takes over from a policy (asked between
        takes; None: never by itself). Each take replays ``script`` from its start (a callable
        one goes on where it is)."""
        self._script = script
        self._wants_control = wants_control
        self._rows: Iterator[np.ndarray] | None = None

    def wants_control(self) -> bool:
        self._require_connected()
        return self._wants_control is not None and self._wants_control()

    def start_take(self, gripper_width_m: float) -> None:
        self._require_connected()
        script = self._script
        self._rows = _asked(script) if callable(script) else iter(script)
        self._last_width = gripper_width_m

    def read(self, period_s: float) -> TeleopCommand:
        self._require_connected()
        row = None if self._rows is None else next(self._rows, None)
        if row is None:
            return TeleopCommand(gripper_width_m=self._last_width, end=True)
        row = np.asarray(row, dtype=np.float64).reshape(7)
        self._last_width = float(row[6])
        return TeleopCommand(gripper_width_m=self._last_width, translation_m=row[:3], rotation_rad=row[3:6])
