"""pde_storage.heartbeat: the one heartbeat thread of the loop and the supervisor."""

from __future__ import annotations

import threading

import pytest

from pde_storage.heartbeat import Heartbeat


def test_beats_until_stopped_and_survives_a_failing_beat(caplog: pytest.LogCaptureFixture) -> None:
    beats: list[int] = []
    third = threading.Event()

    def beat() -> None:
        beats.append(len(beats))
        if len(beats) == 1:
            raise RuntimeError("database is locked")
        if len(beats) >= 3:
            third.set()

    with Heartbeat("test heartbeat", 0.01, beat) as hb:
        assert third.wait(30), "the heartbeat stopped after a failed beat"
    assert not hb._thread.is_alive()  # stop() ended the thread
    assert "test heartbeat not written: database is locked" in caplog.text


def test_a_period_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="heartbeat period must be > 0 s, got 0"):
        Heartbeat("x", 0, lambda: None)
