"""The control loop against a FakeRobot (kinematic, test-only): rows one per tick, preemption,
hold, stale chunks, watchdog, e-stop latch, reset, backend errors."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np
import pytest

from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode, RobotFault
from robot_server.executor import ChunkExecutor
from robot_server.robots.base import FaultReport, RobotNotConnectedError
from robot_server.safety import SafetyError
from tests.robot_server.fakes import HOME_POS, FakeRobot

CLIENT = b"client-1"


def wait_for(cond: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.002)


def ee_chunk(
    seq: int, rows: int = 5, dx: float = 0.01, rate_hz: float = 50.0, episode: str = "e"
) -> ActionChunk:
    a = np.zeros((rows, 7))
    a[:, 0] = dx
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id=episode, action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=rate_hz
    )


def test_rows_execute_one_per_tick_then_hold(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make()
    acc, notes = ex.submit(ee_chunk(0, rows=5), CLIENT)
    assert acc.steps == 5 and acc.steps_clipped == 0 and notes == []
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)
    n_after = len(robot.commands)
    time.sleep(0.1)
    snap = ex.snapshot()
    assert snap.executing_chunk_seq == -1 and snap.steps_remaining == 0 and snap.last_chunk_seq == 0
    np.testing.assert_allclose(robot.pos, HOME_POS + np.array([0.05, 0, 0]))
    # holding: the last target keeps being commanded, the arm does not move
    assert len(robot.commands) > n_after
    np.testing.assert_allclose(robot.commands[-1][1].ee_position_m, HOME_POS + np.array([0.05, 0, 0]))  # type: ignore[arg-type]
    rows = [r for r in ex.tick_log if r.chunk_seq == 0]
    assert [r.row for r in rows] == [0, 1, 2, 3, 4]
    # one row per 20 ms tick, not all at once: each row has its own tick slot, at least a period
    # after the last one (more after an overrun). The schedule, not the wall clock: a tick that
    # starts late on a loaded machine catches up with the next ones.
    slots = np.array([r.scheduled_s for r in rows])
    assert np.all(np.diff(slots) >= 0.02 - 1e-6), np.diff(slots)


def test_each_row_names_the_next_and_the_last_row_none(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    # A backend that feeds velocity forward brings the arm to rest where no row follows (the
    # chunk's last, and the hold after it); rows before it name where the stream goes next.
    ex, robot = make()
    ex.submit(ee_chunk(0, rows=4), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)
    time.sleep(0.06)
    sent = [t for _, t in robot.commands]
    first = next(
        i for i, t in enumerate(sent) if t.ee_position_m is not None and t.ee_position_m[0] > HOME_POS[0]
    )
    rows = sent[first : first + 4]
    for row, following in itertools.pairwise(rows):
        assert row.next_target is not None
        np.testing.assert_allclose(row.next_target.ee_position_m, following.ee_position_m)  # type: ignore[arg-type]
    assert rows[3].next_target is None
    assert all(t.next_target is None for t in sent[first + 4 :])  # holding


def test_newer_chunk_preempts_the_rest(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make(control_rate_hz=20.0)
    ex.submit(ee_chunk(0, rows=20, dx=0.01, rate_hz=20.0), CLIENT)
    wait_for(lambda: ex.snapshot().counters.steps_executed >= 3)
    ex.submit(ee_chunk(1, rows=2, dx=-0.01, rate_hz=20.0), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 2)
    c = ex.snapshot().counters
    assert c.chunks_preempted == 1
    assert c.steps_executed < 20
    seqs = [r.chunk_seq for r in ex.tick_log if r.chunk_seq >= 0]
    assert seqs[-2:] == [1, 1] and seqs.count(0) < 20
    # the new chunk continued from the last commanded target: it undoes its last two rows
    executed_0 = seqs.count(0)
    np.testing.assert_allclose(robot.pos[0], HOME_POS[0] + 0.01 * (executed_0 - 2), atol=1e-12)


def test_a_chunk_says_how_many_rows_the_one_before_it_ran(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    # Preempted, finished, or of another episode: what the recorder puts a take together from.
    ex, _ = make(control_rate_hz=20.0)
    first, _ = ex.submit(ee_chunk(0, rows=20, rate_hz=20.0), CLIENT)
    assert first.previous_rows_run == -1  # none before it
    wait_for(lambda: ex.snapshot().counters.steps_executed >= 3)
    second, _ = ex.submit(ee_chunk(1, rows=2, rate_hz=20.0), CLIENT)
    ran_0 = [r.chunk_seq for r in ex.tick_log].count(0)
    assert second.previous_rows_run == ran_0 and 3 <= ran_0 < 20
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 2)
    third, _ = ex.submit(ee_chunk(2, rows=2, rate_hz=20.0), CLIENT)
    assert third.previous_rows_run == 2  # it ran to its end
    other, _ = ex.submit(ee_chunk(0, rows=2, rate_hz=20.0, episode="other"), CLIENT)
    assert other.previous_rows_run == -1  # the chunk before was another episode's


def test_stale_chunk_is_dropped(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, _ = make()
    ex.submit(ee_chunk(5), CLIENT)
    for seq in (5, 4):
        with pytest.raises(SafetyError, match="not newer") as ei:
            ex.submit(ee_chunk(seq), CLIENT)
        assert ei.value.code is ErrorCode.STALE
    assert ex.snapshot().counters.chunks_stale == 2
    ex.submit(ee_chunk(0, episode="next"), CLIENT)  # a new episode starts its own sequence


def test_invalid_chunk_moves_nothing(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make()
    bad = ee_chunk(0)
    bad.actions[2, 1] = np.nan
    with pytest.raises(SafetyError) as ei:
        ex.submit(bad, CLIENT)
    assert ei.value.code is ErrorCode.INVALID_ACTION
    time.sleep(0.05)
    np.testing.assert_allclose(robot.pos, HOME_POS)
    assert ex.snapshot().counters.chunks_rejected == 1


def test_watchdog_drops_the_chunk_and_holds(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make(control_rate_hz=20.0, heartbeat_timeout_s=0.2)
    t0 = time.monotonic()
    ex.submit(ee_chunk(0, rows=100, dx=0.0005, rate_hz=20.0), CLIENT)  # 5 s of motion
    wait_for(lambda: ex.snapshot().counters.watchdog_trips == 1, timeout_s=2.0)
    tripped_after = time.monotonic() - t0
    assert tripped_after >= 0.19
    snap = ex.snapshot()
    # Late by the executor's own count, not this thread's clock (a loaded machine wakes it late):
    # 0.2 s at 20 Hz is 4 rows; a late ticker only runs fewer, a late watchdog more.
    assert snap.counters.steps_executed <= 6, snap.counters.steps_executed
    assert snap.executing_chunk_seq == -1 and "watchdog" in snap.last_error
    wait_for(lambda: robot.holds >= 1)
    pos = robot.pos.copy()
    time.sleep(0.15)
    np.testing.assert_allclose(robot.pos, pos)


def test_heartbeats_keep_the_chunk_running(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    # A long timeout: a busy machine may pause this whole process, and the control thread that
    # wakes first trips the watchdog before this thread feeds it (with 0.5 s: tripped after one row,
    # one CPU hog beside a load average of ~15).
    ex, _ = make(control_rate_hz=20.0, heartbeat_timeout_s=1.5)
    ex.submit(ee_chunk(0, rows=60, dx=0.001, rate_hz=20.0), CLIENT)  # 3 s, twice the timeout
    while ex.snapshot().executing_chunk_seq == 0:
        ex.note_activity(CLIENT)
        time.sleep(0.02)
    c = ex.snapshot().counters
    assert c.watchdog_trips == 0 and c.steps_executed == 60


def test_estop_latches_until_released(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make()
    ex.submit(ee_chunk(0, rows=50), CLIENT)
    ex.estop("operator")
    wait_for(lambda: robot.holds >= 1)
    pos = robot.pos.copy()
    for call in (
        lambda: ex.submit(ee_chunk(1), CLIENT),
        lambda: ex.gripper(0.02),
        lambda: ex.reset("", None, 1.0),
    ):
        with pytest.raises(SafetyError, match="release_estop") as ei:
            call()
        assert ei.value.code is ErrorCode.ESTOPPED
    time.sleep(0.1)
    np.testing.assert_allclose(robot.pos, pos)
    snap = ex.snapshot()
    assert snap.estopped and snap.estop_reason == "operator" and snap.counters.estops == 1
    ex.release_estop()
    ex.submit(ee_chunk(1, rows=2), CLIENT)
    wait_for(lambda: [r.row for r in ex.tick_log if r.chunk_seq == 1] == [0, 1])


def test_stop_holds_without_latching(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make()
    ex.submit(ee_chunk(0, rows=50), CLIENT)
    ex.stop()
    wait_for(lambda: robot.holds >= 1)
    assert ex.snapshot().executing_chunk_seq == -1
    ex.submit(ee_chunk(1, rows=1), CLIENT)


def test_a_stop_says_the_tick_it_took_effect_at_and_the_chunk_ran_its_rows_before_it(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    ex, _ = make()
    # 5 s of rows: the stop comes mid-chunk however late a loaded machine runs this thread
    accepted, _ = ex.submit(ee_chunk(0, rows=250, dx=0.0005), CLIENT)
    wait_for(lambda: len([r for r in ex.tick_log if r.chunk_seq == 0]) >= 3)
    tick = ex.stop()
    ran = [r.row for r in ex.tick_log if r.chunk_seq == 0]
    assert tick - accepted.start_tick == len(ran) and ran == list(range(len(ran)))
    wait_for(lambda: ex.snapshot().tick > tick + 2)  # holding now: no later row of the chunk runs
    assert [r.row for r in ex.tick_log if r.chunk_seq == 0] == ran


def test_reset_homes_and_restarts_sequences(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make(home_time_s=0.2)
    ex.submit(ee_chunk(3, rows=2), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)
    ex.reset("pick", 7, timeout_s=5.0)
    assert robot.homes == [("pick", 7)]
    np.testing.assert_allclose(robot.pos, HOME_POS)
    assert ex.snapshot().task == "pick"
    ex.submit(ee_chunk(0, rows=1), CLIENT)  # seq restarts after a reset


def test_gripper_when_idle_busy_when_moving(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make()
    ex.gripper(0.02)
    wait_for(lambda: robot.width == 0.02)
    ex.submit(ee_chunk(0, rows=50), CLIENT)
    with pytest.raises(SafetyError) as ei:
        ex.gripper(0.05)
    assert ei.value.code is ErrorCode.BUSY
    with pytest.raises(SafetyError, match="outside"):
        ex.stop()
        ex.gripper(0.5)


def test_fast_pacing_runs_rows_back_to_back(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, _ = make(control_rate_hz=10.0, realtime=False)
    t0 = time.monotonic()
    ex.submit(ee_chunk(0, rows=50, dx=0.001, rate_hz=10.0), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)
    assert time.monotonic() - t0 < 2.5  # paced in real time it would take 5 s


def ticks_later(ex: ChunkExecutor, n: int) -> None:
    """Wait until ``n`` more control ticks have run (the snapshot's tick: state stored)."""
    tick = ex.snapshot().tick
    wait_for(lambda: ex.snapshot().tick >= tick + n)


def test_fast_pacing_idle_ticks_move_nothing_but_a_gripper_command(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    """Fast pacing: simulated time passes with chunk rows only, so an idle tick (the policy
    inferring) commands nothing; it still runs (the tick count, observations). A GripperCommand
    moves the world outside a chunk until the next one; realtime pacing commands every tick."""
    ex, robot = make(control_rate_hz=50.0, realtime=False)
    ex.submit(ee_chunk(0, rows=3), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)
    ticks_later(ex, 2)  # past the last row's tick: its command is in
    n_commands = len(robot.commands)
    ticks_later(ex, 5)  # idle ticks run at the control rate
    assert len(robot.commands) == n_commands
    idle = [r for r in ex.tick_log if r.chunk_seq < 0]
    assert idle and not any(r.commanded for r in idle[-5:])
    assert all(r.commanded for r in ex.tick_log if r.chunk_seq >= 0)
    ex.gripper(0.02)
    wait_for(lambda: robot.width == 0.02)
    ex.submit(ee_chunk(1, rows=2), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 2)
    ticks_later(ex, 2)
    n_commands = len(robot.commands)
    ticks_later(ex, 5)
    assert len(robot.commands) == n_commands  # the chunk ended the gripper's idle motion
    realtime, robot_rt = make(control_rate_hz=50.0)
    n_rt = len(robot_rt.commands)
    tick = realtime.snapshot().tick  # >= n_rt - 1: a tick's state is stored right after its command
    wait_for(lambda: realtime.snapshot().tick >= tick + 6)
    assert len(robot_rt.commands) >= n_rt + 5


def test_backend_error_is_counted_and_recovered(make: Callable[..., tuple[ChunkExecutor, FakeRobot]]) -> None:
    ex, robot = make(reconnect_period_s=0.05)
    robot.fail_next_command = True
    wait_for(lambda: ex.snapshot().counters.backend_errors == 1)
    wait_for(lambda: ex.snapshot().counters.backend_recoveries == 1)
    snap = ex.snapshot()
    assert snap.connected and "fake network drop" in snap.last_error
    ex.submit(ee_chunk(0, rows=2), CLIENT)
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)


def test_backend_error_mid_chunk_holds_where_the_arm_is(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    ex, robot = make(control_rate_hz=20.0)
    ex.submit(ee_chunk(0, rows=20, dx=0.005, rate_hz=20.0), CLIENT)
    wait_for(lambda: ex.snapshot().counters.steps_executed >= 5)
    robot.fail_keeps_connection = True
    robot.fail_next_command = True
    wait_for(lambda: ex.snapshot().counters.backend_errors == 1)
    wait_for(lambda: robot.holds >= 1)
    time.sleep(0.15)
    pos = robot.pos.copy()
    assert pos[0] > HOME_POS[0] + 0.02  # it had moved
    time.sleep(0.15)
    # it holds there: it neither continues the chunk nor goes back to the pre-chunk target
    np.testing.assert_allclose(robot.pos, pos)
    assert ex.snapshot().executing_chunk_seq == -1


def test_a_hold_outside_the_box_is_reported_and_chunks_bring_the_arm_back(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    ex, robot = make()
    limits = ex.config.limits
    with robot.lock:
        robot.pos = np.array([0.45, 0.0, limits.workspace_max_m[2] + 0.2])  # pushed up by hand
    ex.stop()  # hold where it is now
    wait_for(lambda: "outside the workspace box" in ex.snapshot().last_error)
    assert "200 mm" in ex.snapshot().last_error
    n = len(robot.commands)
    ex.submit(ee_chunk(0, rows=6, dx=0.0), CLIENT)  # "stay": planned from the held pose
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 1)
    zs = [t.ee_position_m[2] for _, t in robot.commands[n:] if t.ee_position_m is not None]
    assert zs[-1] < zs[0]  # moving back in
    assert all(a - b <= limits.max_step_translation_m + 1e-9 for a, b in itertools.pairwise(zs))


def test_a_latched_fault_drops_the_chunk_sends_nothing_and_a_reset_acknowledges_it(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    ex, robot = make()
    ex.submit(ee_chunk(0, rows=200, dx=0.001), CLIENT)
    wait_for(lambda: ex.snapshot().steps_remaining < 195)
    robot.fault_report = FaultReport(RobotFault.REFLEX, "cartesian_reflex", "check the cell, then reset")
    wait_for(lambda: ex.snapshot().executing_chunk_seq == -1)
    snap = ex.snapshot()
    assert snap.fault is not None and snap.fault.kind is RobotFault.REFLEX and "reflex" in snap.last_error
    n = len(robot.commands)
    with pytest.raises(SafetyError, match="reflex fault: cartesian_reflex check the cell") as ei:
        ex.submit(ee_chunk(1), CLIENT)
    assert ei.value.code is ErrorCode.BACKEND_ERROR
    time.sleep(0.1)  # about five ticks: none of them may send a target
    assert len(robot.commands) == n
    ex.reset("", None, timeout_s=5.0)  # the operator's acknowledgement
    wait_for(lambda: len(robot.commands) > n)  # commanding the held pose again
    assert ex.snapshot().fault is None
    assert ex.submit(ee_chunk(2), CLIENT)[0].steps == 5


def test_a_stop_keeps_the_gripper_width_the_chunk_commanded(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    ex, robot = make()
    chunk = ee_chunk(0, rows=200, dx=0.0)
    chunk.actions[:, 6] = 0.01  # closing on an object
    ex.submit(chunk, CLIENT)
    wait_for(lambda: ex.snapshot().steps_remaining < 195)
    ex.stop()
    wait_for(lambda: ex.snapshot().executing_chunk_seq == -1)
    n = len(robot.commands)
    wait_for(lambda: len(robot.commands) > n + 2)
    assert robot.commands[-1][1].gripper_width_m == pytest.approx(0.01)  # not back open at 0.08


def test_a_lost_connection_is_reported_while_disconnected(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ex, robot = make()

    def refuse() -> None:
        raise RobotNotConnectedError("fake: the controller does not answer")

    monkeypatch.setattr(robot, "connect", refuse)
    robot.fault_report = FaultReport(RobotFault.CONNECTION_LOST, "FCI connection lost")
    robot.fail_next_command = True  # drops the connection
    wait_for(lambda: not ex.snapshot().connected)
    wait_for(lambda: (f := ex.snapshot().fault) is not None and f.kind is RobotFault.CONNECTION_LOST)
    assert not ex.snapshot().connected


def test_a_chunk_skips_its_rows_meant_for_ticks_that_ran_and_the_last_one_ran_until_it_took_over(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    """Overlapped inference: the second chunk was computed from the state at tick t0 and arrives
    some ticks later; it starts with its row meant for the tick it takes over at."""
    ex, robot = make()
    first, _ = ex.submit(ee_chunk(0, rows=200, dx=0.0), CLIENT)
    assert first.rows_skipped == 0 and first.start_tick >= 0
    wait_for(lambda: ex.snapshot().tick >= first.start_tick + 2)
    t0 = ex.snapshot().tick  # what Observation.tick says
    wait_for(lambda: ex.snapshot().tick >= t0 + 3)  # "inference" takes at least 3 ticks
    a = np.zeros((40, 7))
    a[:, 1] = 1e-4 * np.arange(1, 41)  # row r moves y by (r + 1) x 0.1 mm: which rows ran shows
    a[:, 6] = 0.08
    second_chunk = ActionChunk(
        seq=1, episode_id="e", action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=50.0,
        first_row_tick=t0,
    )  # fmt: skip
    y_before = float(robot.pos[1])
    second, _ = ex.submit(second_chunk, CLIENT)
    assert second.rows_skipped == second.start_tick - t0 >= 3
    assert second.steps == 40 - second.rows_skipped
    wait_for(lambda: ex.snapshot().counters.chunks_executed == 2)
    log = list(ex.tick_log)
    ran_first = [r.row for r in log if r.chunk_seq == 0]
    assert ran_first == list(range(second.start_tick - first.start_tick))  # until the seam, no more
    assert [r.row for r in log if r.chunk_seq == 1] == list(range(second.steps))
    # no hold tick at the seam: the second chunk's first row is the tick after the first's last
    seam = [r.chunk_seq for r in log if r.chunk_seq in (0, 1)]
    assert seam == [0] * len(ran_first) + [1] * second.steps
    # only the rows not in the past moved the arm
    np.testing.assert_allclose(robot.pos[1] - y_before, a[second.rows_skipped :, 1].sum(), atol=1e-9)


def test_a_chunk_whose_rows_are_all_past_or_whose_tick_is_ahead_is_refused(
    make: Callable[..., tuple[ChunkExecutor, FakeRobot]],
) -> None:
    ex, _ = make()
    wait_for(lambda: ex.snapshot().tick >= 6)
    t0 = ex.snapshot().tick
    wait_for(lambda: ex.snapshot().tick >= t0 + 5)
    past = ee_chunk(0, rows=4)
    past.first_row_tick = t0
    with pytest.raises(SafetyError, match="all 4 rows are in the past") as e:
        ex.submit(past, CLIENT)
    assert e.value.code is ErrorCode.STALE
    ahead = ee_chunk(1, rows=4)
    ahead.first_row_tick = ex.snapshot().tick + 1000
    with pytest.raises(SafetyError, match="ahead of the server's next tick") as e:
        ex.submit(ahead, CLIENT)
    assert e.value.code is ErrorCode.INVALID_ACTION
    snap = ex.snapshot()
    assert snap.executing_chunk_seq == -1 and snap.counters.chunks_stale == 1
