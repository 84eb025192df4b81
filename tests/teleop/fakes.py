"""The one fake of the teleop tests: the SpaceMouse's HID device (no such device here), and a hand
that jitters on it."""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence


class FakeSpaceMouseHID:
    """A HID device that returns queued reports, one per read, then nothing (non-blocking)."""

    def __init__(self) -> None:
        self.reports: deque[list[int]] = deque()
        self.closed = False

    def read(self, max_length: int, timeout_ms: int = 0) -> Sequence[int]:
        assert not self.closed, "read after close"
        return self.reports.popleft()[:max_length] if self.reports else []

    def close(self) -> None:
        self.closed = True

    # --- what a SpaceMouse sends -------------------------------------------------------------------

    def push_translation(self, x: int, y: int, z: int) -> None:
        self.reports.append([1, *struct.pack("<3h", x, y, z)])

    def push_rotation(self, rx: int, ry: int, rz: int) -> None:
        self.reports.append([2, *struct.pack("<3h", rx, ry, rz)])

    def push_all_axes(self, *axes: int) -> None:
        """One 13-byte report 1 with all six axes (SpaceMouse Wireless, Compact)."""
        self.reports.append([1, *struct.pack("<6h", *axes)])

    def push_buttons(self, mask: int) -> None:
        self.reports.append([3, mask & 0xFF, (mask >> 8) & 0xFF])


class JitteryHand(FakeSpaceMouseHID):
    """A hand holding a push of ``x`` (raw) on the device once ``holding``: it reports x one count
    apart at every read, as a real hand's jitter does, so every read of the source gives a changed
    row. Queued reports (the end button) come first."""

    def __init__(self, x: int) -> None:
        super().__init__()
        self.x = x
        self.holding = False
        self._reads = 0

    def read(self, max_length: int, timeout_ms: int = 0) -> Sequence[int]:
        queued = super().read(max_length, timeout_ms)
        if queued or not self.holding:
            return queued
        self._reads += 1
        if self._reads % 2 == 0:
            return []  # a drain ends here: one new report per read of the source
        return [1, *struct.pack("<3h", self.x + (self._reads // 2) % 2, 0, 0)]
