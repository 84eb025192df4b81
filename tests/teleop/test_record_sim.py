"""Commanded takes against a real `pde robot-server --backend sim` (fast pacing, 32x32 frames):
rows go through the server one chunk each and are counted, five scripted demonstrations train
`pde learner sft`, and `pde record --export-lerobot` writes them as a LeRobotDataset."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pde_contract.client import RobotClient
from pde_contract.episodes import read_episode
from pde_contract.messages import ActionSpace
from pde_contract.tasks import load_tasks
from teleop.base import TeleopCommand, TeleopSource
from teleop.main import main as record_main
from teleop.main import run_session
from teleop.recorder import Recorder
from teleop.scripted import ScriptedSource
from teleop.settings import TeleopSettings
from teleop.takes import LOG_NAME, counts_per_task
from tests.helpers import NotedChunks
from tests.learner.test_actor_sim import (  # noqa: F401  (the fixtures)
    running_sim_server,
    sim_server,
    sim_server_group,
)
from tests.teleop.fakes import FakeSpaceMouseHID
from tests.teleop.mid_tick import (
    SMALL_PUSH,
    Change,
    assert_each_within_a_tick,
    change_mid_tick,
    slow_server_and_spacemouse,
)
from tests.teleop.tiny_sft import train_tiny_sft

TASK = load_tasks(None).get("put_bowl_on_top_rack")


def demo_rows() -> list[np.ndarray]:
    """Forward 6 x 5 mm, down 4 x 5 mm turning about z, close, up 4 x 5 mm: 15 rows."""
    rows = [np.array([0.005, 0, 0, 0, 0, 0, 0.08])] * 6
    rows += [np.array([0, 0, -0.005, 0, 0, 0.02, 0.08])] * 4
    rows += [np.array([0, 0, 0, 0, 0, 0, 0.0])]
    rows += [np.array([0, 0, 0.005, 0, 0, 0, 0.0])] * 4
    return rows


@pytest.fixture
def recorder(sim_server: str) -> Iterator[Recorder]:  # noqa: F811
    with RobotClient(sim_server, name="pde-record", timeout_s=5.0) as client:
        yield Recorder(client)


def test_each_row_runs_once_through_the_server_and_is_counted(recorder: Recorder) -> None:
    recorder.reset(TASK, seed=0)
    with ScriptedSource(demo_rows()) as source:
        take = recorder.record(source, TASK, seed=0)
    rows = demo_rows()
    st = take.stats
    # every row sent was executed once, none preempted another before it ran
    assert st.rows_recorded == len(rows) == st.rows_executed and st.chunks_preempted == 0
    assert st.rows_repeated == 0  # fast pacing: no copies (the server waits for the next row)
    assert st.rows_expected >= st.rows_recorded
    assert st.rows_dropped == st.rows_expected - st.rows_recorded
    assert st.rows_stale_observation <= st.rows_recorded and st.rows_clipped == st.rows_watchdog_dropped == 0
    ee = take.episodes[ActionSpace.EE_DELTA]
    joint = take.episodes[ActionSpace.JOINT_ABS]
    assert [len(c.actions) for c in ee.chunks] == [1] * len(rows)
    np.testing.assert_allclose(np.concatenate([c.actions for c in ee.chunks]), rows, atol=1e-7)
    assert ee.source == "teleop:scripted" and ee.task == TASK.name and ee.control_rate_hz == 10.0
    # each observation is the one the row was chosen from: the previous row had run by then (with
    # fast pacing a row's observation can be one the next row's replaced: then it is a row older,
    # and counted stale)
    start = ee.chunks[0].observation.state.ee_position_m
    at_row_6 = ee.chunks[6].observation.state.ee_position_m
    np.testing.assert_allclose(at_row_6 - start, [0.03, 0.0, 0.0], atol=0.011)
    # the joint_abs twin holds the joints measured right after each row. The observations stored
    # with the rows are sampled on their own clock (under load a row's may be a row old, counted
    # stale), so the twin is checked against the measured path around it: inside the range the
    # joints took over the observations of rows k-1 .. k+3, within 0.01 rad (the last rows have no
    # later observation to bracket them).
    obs = np.array([c.observation.state.joint_positions_rad for c in ee.chunks])
    for k in range(len(rows) - 3):
        near = obs[max(0, k - 1) : k + 4]
        twin = joint.chunks[k].actions[0, :7]
        assert np.all(twin >= near.min(axis=0) - 0.01) and np.all(twin <= near.max(axis=0) + 0.01), k
    assert joint.chunks[-1].actions[0, 7] == pytest.approx(0.0)
    assert all(c.observation.cameras for c in ee.chunks)


def test_a_row_that_comes_late_repeats_the_last_one_and_no_tick_goes_without_a_row(tmp_path: Path) -> None:
    """Realtime pacing, the recorder stalled for more than a tick before one row (a source that
    sleeps): the arm keeps the previous row for the tick it missed, recorded as repeated; every
    tick of the take has a row. The watchdog is set long, so the stall cannot trip it."""
    rows = demo_rows()
    stall_before = 5

    def script() -> Iterator[np.ndarray]:
        for i, row in enumerate(rows):
            if i == stall_before:
                time.sleep(0.15)  # 1.5 ticks: the next tick runs a copy of row 4
            yield row

    with (
        running_sim_server(tmp_path, pacing="realtime", PDE_ROBOT_HEARTBEAT_TIMEOUT_S="2.0") as (endpoint, _),
        RobotClient(endpoint, name="pde-record", timeout_s=5.0) as client,
    ):
        recorder = Recorder(client, TeleopSettings(record_hold_ticks=3))
        recorder.reset(TASK, seed=0)
        with ScriptedSource(script()) as source:
            take = recorder.record(source, TASK, seed=0)
    st = take.stats
    assert st.rows_dropped == 0 and st.rows_expected == st.rows_recorded == st.rows_executed
    assert st.rows_repeated is not None and st.rows_repeated >= 1
    assert st.rows_recorded == len(rows) + st.rows_repeated and st.rows_watchdog_dropped == 0
    sent = np.concatenate([c.actions for c in take.episodes[ActionSpace.EE_DELTA].chunks])
    # the person's rows in order, each once, the copies right after the row they repeat
    deduped = [r for k, r in enumerate(sent) if k == 0 or not np.array_equal(r, sent[k - 1])]
    expected = [r for k, r in enumerate(rows) if k == 0 or not np.array_equal(r, rows[k - 1])]
    np.testing.assert_allclose(deduped, expected, atol=1e-7)
    assert np.array_equal(sent[stall_before], sent[stall_before - 1])  # the tick it missed


class ChangesAfterItsFirstRead(TeleopSource):
    """A fake device read as a SpaceMouse is (``rereadable``: each read is its state now): still
    at the first read, pushed up from the second on (a push just after the recorder's read), the
    take ended after ``reads`` reads."""

    name = "changing"
    rereadable = True

    def __init__(self, reads: int) -> None:
        self.reads, self.n = reads, 0

    def start_take(self, gripper_width_m: float) -> None:
        self.n = 0

    def read(self, period_s: float) -> TeleopCommand:
        self.n += 1
        up = np.array([0.0, 0.0, 0.0 if self.n == 1 else 0.004])
        return TeleopCommand(gripper_width_m=0.08, translation_m=up, end=self.n > self.reads)


def test_a_device_that_moves_after_the_read_replaces_the_row_and_what_ran_is_recorded(tmp_path: Path) -> None:
    """Realtime pacing: the recorder reads a rereadable source again until the row's tick, and
    sends the changed row in place of the still one. Whether it got there before that tick or
    one later (the machine's load decides), every tick has a row, the take records the rows that
    ran, and the replaced row ran at most once, first."""
    with (
        running_sim_server(tmp_path, pacing="realtime", PDE_ROBOT_HEARTBEAT_TIMEOUT_S="2.0") as (endpoint, _),
        RobotClient(endpoint, name="pde-record", timeout_s=5.0) as client,
    ):
        recorder = Recorder(client)
        recorder.reset(TASK, seed=0)
        with ChangesAfterItsFirstRead(reads=300) as source:
            take = recorder.record(source, TASK, seed=0)
    st = take.stats
    assert st.rows_executed is not None and st.rows_executed >= 2
    assert st.rows_dropped == 0 and st.rows_recorded == st.rows_executed
    assert st.chunks_preempted is not None and st.chunks_preempted >= 1
    up = [round(float(c.actions[0, 2]), 6) for c in take.episodes[ActionSpace.EE_DELTA].chunks]
    assert set(up) <= {0.0, 0.004} and up.count(0.0) <= 1 and up[-1] == 0.004
    assert up.count(0.0) == 0 or up[0] == 0.0


@pytest.mark.parametrize("read_margin_s", [None, 0.04], ids=["read-at-once", "read-margin"])
def test_a_push_between_two_reads_is_sent_at_once_and_runs_at_the_next_tick(
    tmp_path: Path, read_margin_s: float | None
) -> None:
    """Realtime pacing: a SpaceMouse (a fake HID device) pushed halfway through a tick, then let go
    halfway through a later one. The recorder follows it the whole tick: each change is sent as
    soon as it is read and runs at the server's next tick. Read right after each row ran (no read
    margin), it used to wait for the next per-tick read, after that tick: a tick later. The take
    keeps one row per tick, and the end button, read between the per-tick reads, ends it."""
    started = threading.Event()
    changes: list[Change] = []

    def hand(hid: FakeSpaceMouseHID, watcher: RobotClient) -> None:
        started.wait(30.0)
        changes.extend(change_mid_tick(hid, watcher, [SMALL_PUSH, 0]))

    with slow_server_and_spacemouse(tmp_path) as (endpoint, watcher, hid, source):
        client = NotedChunks(endpoint, name="pde-record", timeout_s=5.0)
        with client:
            recorder = Recorder(
                client, TeleopSettings(record_read_margin_s=read_margin_s, observation_timeout_s=10.0)
            )
            recorder.reset(TASK, seed=0)
            thread = threading.Thread(target=hand, args=(hid, watcher), daemon=True)
            thread.start()
            take = recorder.record(source, TASK, seed=0, on_row=lambda _n: started.set())
            thread.join(10.0)
    assert len(changes) == 2
    assert_each_within_a_tick(changes)
    ran = {tick: row for tick, (_seq, row) in client.ran_by_tick().items()}
    for c in changes:
        # ``after`` is the next tick to run when the device changed: that tick runs the change
        pushed = c.x > 0
        assert c.after - 1 in ran and c.after in ran, (c.after, sorted(ran))
        assert (ran[c.after - 1][0] > 0) != pushed and (ran[c.after][0] > 0) == pushed, (
            pushed,
            c.after,
            {k: float(r[0]) for k, r in sorted(ran.items())},
        )
    st = take.stats
    assert st.rows_dropped == 0 and st.rows_recorded == st.rows_executed and st.rows_watchdog_dropped == 0
    x = [float(c.actions[0, 0]) for c in take.episodes[ActionSpace.EE_DELTA].chunks]
    assert x[0] == 0.0 and x[-1] == 0.0 and any(v > 0 for v in x)


@pytest.mark.slow
def test_five_scripted_demos_train_sft_and_export_to_lerobot(recorder: Recorder, tmp_path: Path) -> None:
    demos = tmp_path / "demos"
    # six takes: the third discarded with a note
    answers = iter(
        [a for i in range(6) for a in ("", "n" if i == 2 else "y", "bowl slipped" if i == 2 else "")]
    )
    said: list[str] = []
    run_session(
        recorder, ScriptedSource(demo_rows()), TASK, 6, demos, lambda _q: next(answers), said.append, 0
    )
    assert counts_per_task(demos) == {TASK.name: (5, 1)}
    log = [json.loads(line) for line in (demos / LOG_NAME).read_text().splitlines()]
    assert [e["kept"] for e in log] == [True, True, False, True, True, True]
    assert log[2]["note"] == "bowl slipped" and all(e["rows_recorded"] == 15 for e in log)
    kept = sorted((demos / TASK.name).glob("*.episode"))
    assert len(kept) == 5 and all(read_episode(p).success for p in kept)
    twins = sorted((tmp_path / "demos_joint_abs" / TASK.name).glob("*.episode"))
    assert len(twins) == 5 and all(read_episode(p).action_space is ActionSpace.JOINT_ABS for p in twins)
    assert "5 kept, 1 discarded" in said[-1]

    train_tiny_sft(demos, tmp_path / "ckpt")

    out = tmp_path / "lerobot"
    assert record_main(["--export-lerobot", str(out), "--demos", str(demos), "--vcodec", "h264"]) == 0
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 5 and info["total_frames"] == 5 * 15 and info["fps"] == 10


def test_counts_without_takes_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert record_main(["--counts", "--demos", str(tmp_path)]) == 0
    assert "no takes under" in capsys.readouterr().out
