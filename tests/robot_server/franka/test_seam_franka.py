"""Overlapped inference's seam on the FR3 backend: the real executor, safety layer, FrankaRobot and
franky against franky-sim (its own process, slowed as in test_chunk_end_franka.py). A chunk
computed from the state some ticks ago takes over at the next tick with its rows in the past
skipped: no tick without a chunk row at the seam, the arm keeps moving through it, and it ends
where the rows that ran (and only those) put it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from pde_contract.messages import ActionChunk, ActionSpace
from robot_server.executor import ChunkExecutor, ExecutorConfig
from robot_server.robots import chunk_end as ce
from robot_server.robots.franka import FrankaRobot
from robot_server.safety import SafetyLimits
from tests.robot_server.franka.conftest import sim_config

SPEED = 0.25  # franky-sim's pace (x real time); the executor runs at 10 Hz x this
STEP_M = 0.005  # per row along +y: 5 cm/s in robot time
ROWS = 12


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _y_at_rest(ex: ChunkExecutor) -> float:
    """The TCP's y once two readings half a second apart agree within 0.1 mm."""
    deadline = time.monotonic() + 60.0
    while True:
        state = ex.snapshot().state
        assert state is not None
        y = float(state.ee_position_m[1])
        time.sleep(0.5)
        state = ex.snapshot().state
        assert state is not None
        if abs(float(state.ee_position_m[1]) - y) < 1e-4:
            return float(state.ee_position_m[1])
        assert time.monotonic() < deadline, "the arm did not come to rest"


@pytest.fixture(scope="module")
def rig() -> Iterator[tuple[ChunkExecutor, ce.TickStates]]:
    with ce.FciSimProcess(SPEED) as sim:
        arm = FrankaRobot(
            sim_config(sim.host, gripper=False, stall_timeout_s=2.0 / SPEED, home_timeout_s=30.0 / SPEED)
        )
        arm.connect()
        try:
            arm.home()
            limits = SafetyLimits(joint_velocity_fraction=SafetyLimits().joint_velocity_fraction * SPEED)
            ticks = ce.TickStates()
            config = ExecutorConfig(control_rate_hz=10.0 * SPEED, heartbeat_timeout_s=0, limits=limits)
            ex = ChunkExecutor(ce.SlowedSimRobot(arm, SPEED), config, ticks)
            ex.start()
            try:
                yield ex, ticks
            finally:
                ex.close()
        finally:
            arm.disconnect()


def _chunk(seq: int, first_row_tick: int = -1) -> ActionChunk:
    a = np.zeros((ROWS, 7))
    a[:, 1] = STEP_M
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id="seam", action_space=ActionSpace.EE_DELTA, actions=a,
        control_rate_hz=10.0 * SPEED, first_row_tick=first_row_tick,
    )  # fmt: skip


def test_a_late_chunk_takes_over_without_a_hold_and_skips_its_past_rows(rig) -> None:
    ex, ticks = rig
    _wait(lambda: ex.snapshot().executing_chunk_seq == -1, "the arm is not idle")
    ex.tick_log.clear()
    ticks.states.clear()
    y0 = _y_at_rest(ex)
    first, _ = ex.submit(_chunk(0), b"test")
    _wait(lambda: ex.snapshot().tick >= first.start_tick + 3, "the first chunk did not run")
    t0 = ex.snapshot().tick  # the observation the second chunk is "computed" from
    _wait(lambda: ex.snapshot().tick >= t0 + 3, "no ticks ran")  # its "inference" takes 3+ ticks
    second, _ = ex.submit(_chunk(1, first_row_tick=t0), b"test")
    assert second.rows_skipped == second.start_tick - t0 >= 3
    _wait(lambda: ex.snapshot().counters.chunks_executed >= 2, "the second chunk did not finish")
    _wait(lambda: ex.snapshot().executing_chunk_seq == -1, "the second chunk did not finish")
    log = list(ex.tick_log)
    seqs = [r.chunk_seq for r in log]
    ran_first = second.start_tick - first.start_tick
    start = seqs.index(0)
    # commanded: the first chunk's rows until the seam, then the second's, not one hold tick between
    assert seqs[start : start + ran_first + second.steps] == [0] * ran_first + [1] * second.steps
    # measured: the arm still moves along +y over the two ticks across the seam (a stop there would
    # show as a step of ~0 on the measured TCP)
    y = np.array([float(s.ee_position_m[1]) for s in ticks.states])
    seam = start + ran_first  # the tick that commanded the second chunk's first row
    assert y[seam] - y[seam - 2] > 0.5 * STEP_M, np.diff(y[start : seam + 3])
    # at rest where the rows that ran put it: the skipped rows were not replayed (3+ rows = 15+ mm)
    y_end = _y_at_rest(ex)
    expected = (ran_first + second.steps) * STEP_M
    assert abs((y_end - y0) - expected) < 0.002, (y_end - y0, expected)
