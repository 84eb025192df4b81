"""The episode runtime's parts (learner/episode/): the row-wait rule a takeover and the recorder
share, the clock each timing mode gets, and the size rule of issue 37 (the actor a thin facade,
no function on the episode's route over 80 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from learner.actor import ActorSettings
from learner.episode.clock import OverlappedClock, StreamClock, SyncClock, episode_clock
from learner.episode.session import RobotSession
from pde_contract.messages import ActionChunk, ChunkAccepted, Counters, Status
from teleop.held import HeldRows
from tests.learner.test_actor import FakeRobotClient, fake_info

ROOT = Path(__file__).resolve().parents[2]


class TickingServer:
    """Accepts each chunk to start at ``next_tick`` (a fake of the server's reply, nothing runs)."""

    def __init__(self) -> None:
        self.next_tick = 40

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted:
        return ChunkAccepted(seq=chunk.seq, steps=len(chunk.actions), start_tick=self.next_tick)


def status(tick: int, executing: int = -1, remaining: int = 0) -> Status:
    return Status(
        backend="fake", connected=True, estopped=False, estop_reason="", episode_id="",
        executing_chunk_seq=executing, steps_remaining=remaining, holding=executing < 0,
        counters=Counters(), tick=tick,
    )  # fmt: skip


def test_a_person_s_row_has_run_once_the_server_s_tick_is_past_its_own() -> None:
    server = TickingServer()
    rows = HeldRows(server, "ep", 10.0, hold=2)
    row = np.zeros(7)
    rows.send(row, seq=1)
    due = rows.sent[-1][0]
    assert not rows.has_run(status(due, executing=1, remaining=3), due)
    assert rows.has_run(status(due + 1, executing=1, remaining=2), due)
    # a change of the device sent in its place before that tick: the same tick is waited for
    rows.send(row + 0.01, seq=2)
    assert not rows.has_run(status(due, executing=2, remaining=3), due)
    # one sent for a later tick is not waited for: the row for ``due`` ran (its copies replaced)
    server.next_tick = due + 1
    rows.send(row + 0.02, seq=3)
    assert rows.has_run(status(due + 1, executing=3, remaining=3), due)


def test_a_server_that_does_not_count_ticks_runs_the_newest_row_once_only_copies_are_left() -> None:
    server = TickingServer()
    server.next_tick = -1
    rows = HeldRows(server, "ep", 10.0, hold=2)
    rows.send(np.zeros(7), seq=5)
    assert not rows.has_run(status(-1, executing=5, remaining=3), -1)
    assert rows.has_run(status(-1, executing=5, remaining=2), -1)  # row 0 ran: its copies are left
    assert rows.has_run(status(-1, executing=-1), -1)  # nothing runs any more


@pytest.mark.parametrize(
    ("pacing", "timing", "person", "clock"),
    [
        ("realtime", "overlapped", False, OverlappedClock),
        ("realtime", "overlapped", True, OverlappedClock),
        ("realtime", "sync", False, SyncClock),
        ("fast", "overlapped", False, StreamClock),  # the sim: rows outpace any inference
        ("fast", "sync", False, StreamClock),
        ("fast", "sync", True, SyncClock),  # a takeover is asked at every status poll
    ],
)
def test_each_timing_mode_gets_its_clock(pacing: str, timing: str, person: bool, clock: type) -> None:
    client = FakeRobotClient()
    client.info = fake_info("fast" if pacing == "fast" else "realtime")
    settings = ActorSettings(chunk_timing="sync" if timing == "sync" else "overlapped")
    chosen = episode_clock(RobotSession(client, settings), settings, lambda: False, person)
    assert type(chosen) is clock


def _functions_over(path: Path, max_lines: int) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(ROOT)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > max_lines
    ]


def test_the_episode_runtime_stays_in_small_functions() -> None:
    """Issue 37: learner/actor.py a facade of at most 250 lines, and no function of the episode
    runtime (nor of teleop/held.py and teleop/recorder.py, whose rows a takeover shares) over 80
    lines."""
    assert len((ROOT / "learner/actor.py").read_text().splitlines()) <= 250
    files = [
        *sorted((ROOT / "learner/episode").glob("*.py")),
        ROOT / "teleop/held.py",
        ROOT / "teleop/recorder.py",
    ]
    assert [f for path in files for f in _functions_over(path, 80)] == []
