"""The e-stop latch kept on disk (robot_server/latch_file.py) by the executor: written before
``estop()`` returns, restored by an executor built on the same file (a restarted server), no target
at all -- arm or gripper -- while it is set, released only explicitly, and an unreadable file
latched rather than ignored. Against the FakeRobot (kinematic, test-only; the real backends across
a kill -9: test_server_sim.py and franka/test_latch_restart_franka.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode
from robot_server.executor import ChunkExecutor
from robot_server.latch_file import LatchFile, LatchRecord
from robot_server.safety import SafetyError
from tests.robot_server.fakes import FakeRobot

CLIENT = b"client-1"
RATE_HZ = 50.0  # the rate of the `make` fixture (tests/robot_server/conftest.py)


def _wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.002)


def _chunk(seq: int, rows: int = 5) -> ActionChunk:
    a = np.zeros((rows, 7))
    a[:, 0] = 0.01
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id="e", action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=RATE_HZ
    )


Make = Callable[..., tuple[ChunkExecutor, FakeRobot]]


def _ticks_pass(ex: ChunkExecutor, n: int) -> None:
    """Wait until the control thread has run ``n`` more ticks (commanded or stood down)."""
    start = ex.snapshot().tick
    _wait_for(lambda: ex.snapshot().tick >= start + n)


def _assert_refused(ex: ChunkExecutor, seq: int) -> None:
    for call in (lambda: ex.submit(_chunk(seq), CLIENT), lambda: ex.gripper(0.02)):
        with pytest.raises(SafetyError) as info:
            call()
        assert info.value.code is ErrorCode.ESTOPPED


def test_an_estop_is_on_disk_when_acknowledged_and_a_restart_restores_it(make: Make, tmp_path: Path) -> None:
    path = tmp_path / "state" / "robot_estop.json"
    ex, _ = make(estop_state_file=path)
    ex.submit(_chunk(0, rows=50), CLIENT)
    assert ex.estop("operator pressed e-stop on the page") == ""
    record = LatchFile(path, "").load()  # on disk when estop() returns: before the Ack goes out
    assert record is not None and record.kind == "estop" and "operator pressed" in record.detail
    ex.close()  # the server dies (the file is all that is left of it)

    after, robot2 = make(estop_state_file=path)
    snap = after.snapshot()
    assert snap.estopped
    assert "operator pressed e-stop on the page" in snap.estop_reason
    assert "before the robot server restarted" in snap.estop_reason
    _ticks_pass(after, 10)
    _assert_refused(after, 1)
    assert robot2.commands == [] and robot2.holds == 0, "a target went to the arm while e-stopped"
    after.release_estop()  # the explicit release: the file goes
    assert not path.exists() and not after.snapshot().estopped
    after.submit(_chunk(1, rows=2), CLIENT)
    _wait_for(lambda: [r.row for r in after.tick_log if r.chunk_seq == 1] == [0, 1])


def test_nothing_is_commanded_while_estopped_after_the_hold(make: Make, tmp_path: Path) -> None:
    ex, robot = make(estop_state_file=tmp_path / "robot_estop.json")
    ex.submit(_chunk(0, rows=50), CLIENT)
    _wait_for(lambda: len(robot.commands) >= 3)
    ex.estop("test")
    _wait_for(lambda: robot.holds >= 1)
    _ticks_pass(ex, 2)
    sent = len(robot.commands)
    _ticks_pass(ex, 10)
    # Before, the held pose (and the gripper width) went to the backend every tick while latched.
    assert len(robot.commands) == sent, "targets went to the arm while the e-stop was latched"


@pytest.mark.parametrize("bad", ["corrupt", "folder"])
def test_an_unreadable_latch_file_latches_and_says_which_file_and_what_to_do(
    make: Make, tmp_path: Path, bad: str
) -> None:
    path = tmp_path / "robot_estop.json"
    if bad == "corrupt":
        path.write_bytes(b'{"kind": "estop", "detail": "trunc')
    else:
        path.mkdir()  # cannot be read, nor removed by a release
    ex, robot = make(estop_state_file=path)
    snap = ex.snapshot()
    assert snap.estopped and str(path) in snap.estop_reason and "cannot be read" in snap.estop_reason
    assert "release the e-stop" in snap.estop_reason
    _ticks_pass(ex, 5)
    _assert_refused(ex, 0)
    assert robot.commands == []
    if bad == "corrupt":
        ex.release_estop()
        assert not path.exists() and not ex.snapshot().estopped
        return
    with pytest.raises(SafetyError, match=f"could not remove the latch file {path}.*Delete it by hand"):
        ex.release_estop()
    assert ex.snapshot().estopped, "a release whose file stays would come back at a restart"
    path.rmdir()
    ex.release_estop()
    assert not ex.snapshot().estopped


def test_an_estop_that_cannot_be_kept_still_latches_and_says_so(make: Make, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    ex, _ = make(estop_state_file=blocker / "robot_estop.json")
    message = ex.estop("test")
    assert "could not keep the latch" in message and "a restart would clear it" in message
    assert ex.snapshot().estopped
    _assert_refused(ex, 0)


def test_latch_records_round_trip_and_files_are_replaced_whole(tmp_path: Path) -> None:
    f = LatchFile(tmp_path / "x.json", "release it")
    assert f.load() is None
    f.save(LatchRecord("estop", "one", "do this"))
    f.save(LatchRecord("estop", "two", "do that"))
    got = f.load()
    assert got is not None and (got.kind, got.detail, got.action) == ("estop", "two", "do that")
    assert got.latched_at.endswith("UTC")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]  # no temporary left behind
    f.clear()
    f.clear()  # already gone: fine
    assert f.load() is None
