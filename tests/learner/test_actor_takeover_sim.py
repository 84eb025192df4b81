"""A person takes over twice during an RL episode on the sim robot server (realtime pacing, in this
process so that its tick log can be read), with a scripted teleop source as the person: the episode
records the person's rows, one per tick they ran at (a row held over a stall as a repeat), the
server's ticks show the policy's chunk stopped where the person's first row ran, and the PPO batch
holds none of the person's rows. And a SpaceMouse (on the fake HID device) taking over on a
`pde robot-server` process at 1 Hz: each change of the device runs at the next tick. Counted in
ticks, never timed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from learner.actor import Actor, ActorSettings
from learner.policies.vla import make_test_policy
from learner.rewards import reward_from_label
from learner.trainer import Trainer, build_rollout_batch
from pde_contract.client import RobotClient
from pde_contract.episodes import EpisodeFile, read_episode, rows_commanded_by
from robot_server.executor import ChunkExecutor, TickRecord
from robot_server.server import RobotServer
from teleop.base import TeleopSource
from teleop.scripted import ScriptedSource
from teleop.settings import TeleopSettings
from teleop.spacemouse import SpaceMouseSource
from tests.helpers import NotedChunks
from tests.learner.test_actor_overlap_sim import sim_server  # noqa: F401  (a fixture)
from tests.teleop.fakes import FakeSpaceMouseHID, JitteryHand
from tests.teleop.mid_tick import (
    SMALL_PUSH,
    Change,
    assert_each_within_a_tick,
    change_mid_tick,
    slow_server_and_spacemouse,
)

CHUNK_LEN = 10
PERSON_ROWS = 3
TASK = "put_green_container_in_bowl"


class ScriptedTrigger:
    """The scripted person's urge to take over: once the server has run ``after_ticks[k]`` ticks of
    the log, early in a policy chunk (5 rows or more still to run: the actor has 4 ticks to send
    the person's first row before the chunk would end by itself). Notes, per takeover, how many
    ticks the log held when it fired (the index of the next tick)."""

    def __init__(self, executor: ChunkExecutor, after_ticks: list[int]) -> None:
        self.executor = executor
        self.pending = list(after_ticks)
        self.fired_at: list[int] = []

    def __call__(self) -> bool:
        log = self.executor.tick_log
        n = len(log)
        snap = self.executor.snapshot()
        # The chunk has run a row already: a chunk accepted but not yet ticked (a loaded machine
        # widens that window) would be stopped before any of its rows ran.
        started = n > 0 and log[-1].chunk_seq == snap.executing_chunk_seq >= 0
        if self.pending and n >= self.pending[0] and started and snap.steps_remaining >= 5:
            self.pending.pop(0)
            self.fired_at.append(n)
            return True
        return False


def ticks_by_chunk(log: list[TickRecord], seqs: set[int] | None = None) -> list[tuple[int, list[int]]]:
    """(chunk seq, the log indices of its ticks), chunks in the order they first ran; only those
    in ``seqs`` when given."""
    out: list[tuple[int, list[int]]] = []
    for i, r in enumerate(log):
        if r.chunk_seq < 0 or (seqs is not None and r.chunk_seq not in seqs):
            continue
        if not out or out[-1][0] != r.chunk_seq:
            out.append((r.chunk_seq, []))
        out[-1][1].append(i)
    return out


def run_with_person(
    server: RobotServer,
    endpoint: str,
    policy: Any,
    person: TeleopSource,
    settings: ActorSettings,
    episode_id: str,
    max_chunks: int,
    teleop: TeleopSettings | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[EpisodeFile, dict[int, np.ndarray]]:
    """One episode of ``policy`` on the server with ``person`` able to take over, its tick log
    cleared first (so that it holds this episode's ticks); and the chunks sent, by seq."""
    client = NotedChunks(cmd_endpoint=endpoint, name="learner", timeout_s=5.0)
    with client, person:
        client.connect()  # the server's control rate and pacing, for the actor
        actor = Actor(policy, client, settings, teleop)
        server.executor.tick_log.clear()
        episode = actor.run_episode(
            episode_id=episode_id,
            task=TASK,
            canonical_prompt="put the green container in the bowl",
            rollout_prompt="put the green container in the bowl",
            max_chunks=max_chunks,
            seed=3,
            person=person,
            should_stop=should_stop,
        )
        return episode, client.sent


def person_ticks(episode: EpisodeFile, log: list[TickRecord], sent: dict[int, np.ndarray]) -> list[list[int]]:
    """Per intervention, the log indices of the ticks its person's rows ran at, checked: they
    follow each other with no tick between (none without a row), and the episode records, in
    order, exactly the rows the server ran at them (a copy run for a late row as a repeat). A
    person's chunk is a row and its copies (CHUNK_LEN rows: the policy's); the still row that
    ends a take moves nothing."""
    person = {seq for seq, rows in sent.items() if len(rows) != CHUNK_LEN and np.any(rows[0, :6])}
    runs: list[list[int]] = []
    for i, r in enumerate(log):
        if r.chunk_seq in person:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
    assert len(runs) == len(episode.interventions), "a tick without a person's row split a take"
    for iv, ticks in zip(episode.interventions, runs, strict=True):
        recorded = episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows]
        assert all(c.commanded_by == "person" and c.trace is None and c.rows_run == (0, 1) for c in recorded)
        ran = [sent[log[i].chunk_seq][log[i].row] for i in ticks]
        np.testing.assert_array_equal(np.concatenate([c.actions for c in recorded]), np.array(ran))
    return runs


def test_two_takeovers_record_person_rows_that_ppo_leaves_out(
    sim_server: tuple[str, RobotServer],  # noqa: F811
    tmp_path: Path,
) -> None:
    endpoint, server = sim_server
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    trigger = ScriptedTrigger(server.executor, after_ticks=[6, 18])
    row = np.array([0.0, 0.0, 0.005, 0.0, 0.0, 0.0, 0.08])  # 5 mm up per tick, gripper open
    person = ScriptedSource([row] * PERSON_ROWS, wants_control=trigger)
    settings = ActorSettings(obs_timeout_s=10.0, intervention_demos=True, data_dir=tmp_path)
    episode, sent = run_with_person(server, endpoint, policy, person, settings, "ep-takeover", max_chunks=8)
    log = list(server.executor.tick_log)

    # the episode file: two interventions of the person's rows, marked as theirs, one per tick
    # they ran at (on a loaded machine a row may run again for a tick while the next comes late)
    assert len(episode.interventions) == 2 == len(trigger.fired_at)
    taken = person_ticks(episode, log, sent)
    n_person = sum(iv.n_rows for iv in episode.interventions)
    person_chunks = [i for i, c in enumerate(episode.chunks) if c.commanded_by == "person"]
    assert len(person_chunks) == n_person >= 2 * PERSON_ROWS
    for iv in episode.interventions:
        assert iv.trigger == "device" and iv.n_rows >= PERSON_ROWS
        assert person_chunks.count(iv.first_chunk) == 1 and iv.first_chunk > 0
        for c in episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows]:
            np.testing.assert_allclose(c.actions, row[None], atol=1e-6)
    assert sum(c.commanded_by == "policy" for c in episode.chunks) == 8

    # the server's ticks: the policy's chunks that ran are the records that say they ran rows (a
    # policy chunk taken over before its first tick ran none), each for the rows its record says
    ran = ticks_by_chunk(log, {seq for seq, rows in sent.items() if len(rows) == CHUNK_LEN})
    ran_records = [
        i
        for i, c in enumerate(episode.chunks)
        if c.commanded_by == "policy" and c.rows_run and c.rows_run[1] > c.rows_run[0]
    ]
    ticks_of = dict(zip(ran_records, (ticks for _seq, ticks in ran), strict=True))
    for i, ticks in ticks_of.items():
        first_row, end_row = episode.chunks[i].rows_run or (0, 0)
        assert end_row - first_row == len(ticks), f"chunk {i}"
    policy_rows_after_fire = []
    for iv, fired, ticks in zip(episode.interventions, trigger.fired_at, taken, strict=True):
        first_person_tick = ticks[0]
        # the policy's chunk was preempted mid-way: a policy row ran at the tick before the
        # person's first row (the arm never held between them), none after it
        before = max(i for i in ticks_of if i < iv.first_chunk)
        assert ticks_of[before][-1] == first_person_tick - 1
        assert all(t < first_person_tick or t > ticks[-1] for tt in ticks_of.values() for t in tt)
        taken_over = episode.chunks[iv.first_chunk - 1]
        assert taken_over.commanded_by == "policy" and taken_over.rows_run is not None
        assert taken_over.rows_run[1] < CHUNK_LEN
        assert fired <= first_person_tick and iv.start_tick >= 0
        policy_rows_after_fire.append(first_person_tick - fired)
        # takeover -> the policy's chunk stopped within 1 tick, in the server's ticks: the actor
        # polls every 5 ms and sends the person's row at once, a tick (100 ms) is its margin
        assert first_person_tick - fired <= 1
    print(f"policy rows run after the takeover fired, per takeover: {policy_rows_after_fire}")

    # PPO: the batch holds the policy's chunks only, with the rows they ran before each takeover
    rb = build_rollout_batch(policy, [(episode, reward_from_label(False))])
    assert len(rb) == 8 and rb.person_rows_left_out == rows_commanded_by(episode, "person") == n_person
    assert int(rb.rows_ran.sum()) == rows_commanded_by(episode, "policy")
    stats = Trainer(policy).update([(episode, reward_from_label(False))])
    assert stats["person_rows_left_out"] == n_person and np.isfinite(stats["pg_loss"])

    # the option beyond the paper: each takeover also became a demonstration of the task
    demos = sorted((tmp_path / "demos" / TASK).glob("*.episode"))
    assert [p.name for p in demos] == [f"ep-takeover-intervention-{k}.episode" for k in (0, 1)]
    for path, iv in zip(demos, episode.interventions, strict=True):
        demo = read_episode(path)
        assert demo.success is True and len(demo.chunks) == iv.n_rows and not demo.interventions


def test_a_stalled_takeover_repeats_the_late_row_and_no_tick_goes_without_one(
    sim_server: tuple[str, RobotServer],  # noqa: F811
) -> None:
    """The person's side stalls 150 ms (1.5 ticks) before its fourth row: the arm keeps the third
    row for the ticks it missed (its copies), every tick of the take has a person's row, and the
    episode records each tick with the row the server ran at it, the repeats included."""
    endpoint, server = sim_server
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    trigger = ScriptedTrigger(server.executor, after_ticks=[6])
    rows = [np.array([0.0, 0.0, 0.002 * (k + 1), 0.0, 0.0, 0.0, 0.08]) for k in range(6)]  # each its own
    stall_before = 3

    def script() -> Iterator[np.ndarray]:
        for k, row in enumerate(rows):
            if k == stall_before:
                time.sleep(0.15)
            yield row

    person = ScriptedSource(script(), wants_control=trigger)
    settings = ActorSettings(obs_timeout_s=10.0)
    # 3 copies: the stall plus a loaded machine's lateness stay within them
    teleop = TeleopSettings(record_hold_ticks=3)
    episode, sent = run_with_person(server, endpoint, policy, person, settings, "ep-stall", 4, teleop)
    [iv] = episode.interventions
    [ticks] = person_ticks(episode, list(server.executor.tick_log), sent)
    recorded = np.concatenate(
        [c.actions for c in episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows]]
    )
    # the person's rows in order, each once, the copies right after the row they repeat
    deduped = [r for k, r in enumerate(recorded) if k == 0 or not np.array_equal(r, recorded[k - 1])]
    np.testing.assert_allclose(deduped, rows, atol=1e-7)
    assert len(ticks) == iv.n_rows > len(rows)  # the stall cost a repeat, not a tick
    late = next(k for k, r in enumerate(recorded) if np.allclose(r, rows[stall_before], atol=1e-7))
    assert late > stall_before and np.array_equal(recorded[late - 1], recorded[stall_before - 1])


def test_a_person_takes_over_the_episodes_last_chunk(
    sim_server: tuple[str, RobotServer],  # noqa: F811
) -> None:
    """The last chunk is offered too (it once ran to its end without asking the person): the
    episode ends with the person's take, the policy's chunk stopped within a tick."""
    endpoint, server = sim_server
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    fired_at: list[int] = []  # the tick log's length when the person took over

    def two_policy_rows_in() -> bool:  # mid-way through the only (so the last) policy chunk
        snap = server.executor.snapshot()
        if fired_at or snap.executing_chunk_seq < 0 or not 5 <= snap.steps_remaining <= CHUNK_LEN - 2:
            return False
        fired_at.append(len(server.executor.tick_log))
        return True

    row = np.array([0.0, 0.0, 0.005, 0.0, 0.0, 0.0, 0.08])
    person = ScriptedSource([row] * PERSON_ROWS, wants_control=two_policy_rows_in)
    settings = ActorSettings(obs_timeout_s=10.0)
    episode, sent = run_with_person(server, endpoint, policy, person, settings, "ep-last-chunk", max_chunks=1)
    log = list(server.executor.tick_log)
    [iv] = episode.interventions
    assert iv.first_chunk == 1 and iv.n_rows >= PERSON_ROWS and len(episode.chunks) == 1 + iv.n_rows
    [ticks] = person_ticks(episode, log, sent)
    [(_seq, policy_ticks)] = ticks_by_chunk(
        log, {seq for seq, rows in sent.items() if len(rows) == CHUNK_LEN}
    )
    first_person_tick = ticks[0]
    assert 2 <= len(policy_ticks) < CHUNK_LEN and first_person_tick - fired_at[0] <= 1
    assert policy_ticks[-1] == first_person_tick - 1
    assert episode.chunks[0].rows_run == (0, len(policy_ticks))


def test_a_stop_while_a_person_drives_ends_the_take_before_their_next_row(
    sim_server: tuple[str, RobotServer],  # noqa: F811
) -> None:
    """should_stop (the page's Abort, the loop stopping) turns true while a person drives: the take
    ends before the person's next row is read, the arm holds and the episode ends. (A take's rows
    were each waited for less than the stop_check_period_s after which a wait asks should_stop: the
    take went on until the person ended it, or takeover_max_s.) Counted in rows read, not timed."""
    endpoint, server = sim_server
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    trigger = ScriptedTrigger(server.executor, after_ticks=[6])
    row = np.array([0.0, 0.0, 0.005, 0.0, 0.0, 0.0, 0.08])
    stop = threading.Event()
    reads_after_stop: list[int] = []
    n_rows_before_stop, script_rows = 3, 40

    def script() -> Iterator[np.ndarray]:
        for k in range(script_rows):
            if stop.is_set():
                reads_after_stop.append(k)
            if k + 1 == n_rows_before_stop:
                stop.set()  # the page's Abort, pressed while the person drives
            yield row

    person = ScriptedSource(script(), wants_control=trigger)
    settings = ActorSettings(obs_timeout_s=10.0)
    episode, sent = run_with_person(
        server, endpoint, policy, person, settings, "ep-stop-take", 8, should_stop=stop.is_set
    )
    assert reads_after_stop == []
    [iv] = episode.interventions
    [ticks] = person_ticks(episode, list(server.executor.tick_log), sent)
    assert len(ticks) == iv.n_rows >= n_rows_before_stop and episode.chunks[-1].commanded_by == "person"
    assert server.executor.snapshot().executing_chunk_seq == -1  # held: nothing runs


def test_a_stop_as_a_person_takes_over_stops_the_policys_chunk(
    sim_server: tuple[str, RobotServer],  # noqa: F811
) -> None:
    """should_stop turns true as the person takes over, before their first row: no row of theirs
    is read, the policy's chunk is stopped (its record says the rows it ran) and the arm holds."""
    endpoint, server = sim_server
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    trigger = ScriptedTrigger(server.executor, after_ticks=[3])
    stop = threading.Event()

    def takes_over_and_stops() -> bool:
        if trigger():
            stop.set()
            return True
        return False

    reads: list[int] = []

    def script() -> Iterator[np.ndarray]:
        for k in range(PERSON_ROWS):
            reads.append(k)
            yield np.array([0.0, 0.0, 0.005, 0.0, 0.0, 0.0, 0.08])

    person = ScriptedSource(script(), wants_control=takes_over_and_stops)
    settings = ActorSettings(obs_timeout_s=10.0)
    episode, _sent = run_with_person(
        server, endpoint, policy, person, settings, "ep-stop-first", 8, should_stop=stop.is_set
    )
    assert reads == [] and not episode.interventions and stop.is_set()
    [(_seq, policy_ticks)] = ticks_by_chunk(list(server.executor.tick_log))
    [record] = [c for c in episode.chunks if c.rows_run and c.rows_run[1] > c.rows_run[0]]
    assert record.rows_run == (0, len(policy_ticks)) and len(policy_ticks) < CHUNK_LEN
    assert server.executor.snapshot().executing_chunk_seq == -1  # held: nothing runs


def test_a_stop_ends_the_take_of_a_jittering_hand_on_the_spacemouse(
    sim_server: tuple[str, RobotServer],  # noqa: F811
) -> None:
    """A SpaceMouse whose row changes at every read is followed without being chased: the take
    asks should_stop each tick, so the stop ends it. (The wait for a row followed every newer row,
    those sent for later ticks too, and never ended: the take ignored the stop and takeover_max_s,
    the person's end button alone ended it.) Every tick of the take ran a person's row, recorded."""
    endpoint, server = sim_server
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    hid = JitteryHand(SMALL_PUSH)
    stop, episode_over, pressed_end = threading.Event(), threading.Event(), threading.Event()

    def ticks_until(n: int) -> None:
        while server.executor.snapshot().tick < n and not episode_over.is_set():
            time.sleep(0.005)

    def hand() -> None:
        while server.executor.snapshot().executing_chunk_seq < 0:  # the policy drives
            time.sleep(0.005)
        hid.holding = True  # the takeover
        ticks_until(server.executor.snapshot().tick + 5)
        stop.set()  # the page's abort, while the person drives
        ticks_until(server.executor.snapshot().tick + 30)  # ample for a take asking every tick
        if not episode_over.is_set():  # it is not: end the take, so the test ends either way
            pressed_end.set()
            hid.push_buttons(1 << TeleopSettings().spacemouse_end_button)

    thread = threading.Thread(target=hand, daemon=True)
    thread.start()
    try:
        person = SpaceMouseSource(TeleopSettings(), lambda: hid)
        settings = ActorSettings(obs_timeout_s=10.0)
        episode, sent = run_with_person(
            server, endpoint, policy, person, settings, "ep-jitter", 8, should_stop=stop.is_set
        )
    finally:
        episode_over.set()
        thread.join(10.0)
    assert stop.is_set() and not pressed_end.is_set(), "the stop did not end the take"
    [iv] = episode.interventions
    [ticks] = person_ticks(episode, list(server.executor.tick_log), sent)
    assert len(ticks) == iv.n_rows >= 1 and episode.chunks[-1].commanded_by == "person"
    assert server.executor.snapshot().executing_chunk_seq == -1  # held: nothing runs


@pytest.mark.parametrize("read_margin_s", [None, 0.04], ids=["read-at-once", "read-margin"])
def test_a_takeover_follows_the_device_and_each_change_runs_at_the_next_tick(
    tmp_path: Path, read_margin_s: float | None
) -> None:
    """A `pde robot-server` process at 1 Hz (realtime), a SpaceMouse on the fake HID device: pushed
    halfway through a tick of the policy's chunk (the takeover), let go halfway through a later
    tick, pushed and let go again, then its end button. The actor follows the device between its per-tick
    reads as the recorder does: each change runs at the server's very next tick (read at once
    after each row, a release used to wait for the next per-tick read, after that tick: a tick
    later). Every tick of the take ran a person's row, the episode records the row that ran at
    each as the person's, the policy drives again after the take, and PPO leaves the person out."""
    torch.manual_seed(0)
    policy = make_test_policy("flow", chunk_len=CHUNK_LEN)
    changes: list[Change] = []

    def hand(hid: FakeSpaceMouseHID, watcher: RobotClient) -> None:
        # early in the policy's chunk: it would run for many ticks more by itself
        while (st := watcher.status()).executing_chunk_seq < 0 or st.steps_remaining < CHUNK_LEN - 2:
            time.sleep(0.005)
        changes.extend(change_mid_tick(hid, watcher, [SMALL_PUSH, 0, SMALL_PUSH, 0]))

    with slow_server_and_spacemouse(tmp_path) as (endpoint, watcher, hid, person):
        client = NotedChunks(endpoint, name="learner", timeout_s=5.0)
        with client:
            client.connect()  # the server's control rate and pacing, for the actor

            def policy_ran_after_the_take() -> bool:
                """The policy's chunk after the take has run a row: it drives again (the episode need
                not wait out that chunk's ticks)."""
                ours = [a for _, rows, a in client.replies if len(rows) == CHUNK_LEN]
                return len(ours) == 2 and client.status().tick > ours[1].start_tick

            actor = Actor(
                policy,
                client,
                ActorSettings(obs_timeout_s=10.0),
                TeleopSettings(record_read_margin_s=read_margin_s),
            )
            thread = threading.Thread(target=hand, args=(hid, watcher), daemon=True)
            thread.start()
            episode = actor.run_episode(
                episode_id="ep-follow",
                task=TASK,
                canonical_prompt="put the green container in the bowl",
                rollout_prompt="put the green container in the bowl",
                max_chunks=2,
                seed=3,
                person=person,
                should_stop=policy_ran_after_the_take,
            )
            thread.join(10.0)
    assert len(changes) == 4
    assert_each_within_a_tick(changes)
    ran = client.ran_by_tick()
    person_seqs = {seq for seq, rows in client.sent.items() if len(rows) != CHUNK_LEN}

    # the take: a person's row at every tick of it, recorded as theirs, the row that ran at each
    [iv] = episode.interventions
    take = range(iv.start_tick, iv.start_tick + iv.n_rows)
    assert iv.trigger == "device" and all(t in ran and ran[t][0] in person_seqs for t in take), sorted(ran)
    recorded = episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows]
    assert all(c.commanded_by == "person" and c.trace is None and c.rows_run == (0, 1) for c in recorded)
    np.testing.assert_array_equal(np.concatenate([c.actions for c in recorded]), [ran[t][1] for t in take])

    # each change ran at the tick after it: the takeover's push right after the policy's row, each
    # later one right after the person's row before it
    takeover, *later = changes
    assert takeover.after == iv.start_tick and ran[takeover.after - 1][0] not in person_seqs
    for c in changes:
        assert (ran[c.after][1][0] > 0) == (c.x > 0), (
            c,
            {t: float(r[0]) for t, (_, r) in sorted(ran.items())},
        )
    for c in later:
        assert c.after - 1 in take and (ran[c.after - 1][1][0] > 0) != (c.x > 0), c

    # the policy drives again after the take; PPO leaves the person's rows out
    assert [c.commanded_by for c in episode.chunks] == ["policy"] + ["person"] * iv.n_rows + ["policy"]
    rb = build_rollout_batch(policy, [(episode, reward_from_label(False))])
    assert len(rb) == 2 and rb.person_rows_left_out == iv.n_rows
