"""A person takes over twice during an RL episode on the sim robot server (realtime pacing, in this
process so that its tick log can be read), with a scripted teleop source as the person: the episode
records the person's rows, the server's ticks show the policy's chunk stopped where the person's
first row ran, and the PPO batch holds none of the person's rows. Counted in ticks, never timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from learner.actor import Actor, ActorSettings
from learner.policies.vla import make_test_policy
from learner.rewards import reward_from_label
from learner.trainer import Trainer, build_rollout_batch
from pde_contract.client import RobotClient
from pde_contract.episodes import EpisodeFile, read_episode, rows_commanded_by
from robot_server.executor import ChunkExecutor, TickRecord
from robot_server.server import RobotServer
from teleop.scripted import ScriptedSource
from tests.learner.test_actor_overlap_sim import sim_server  # noqa: F401  (a fixture)

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
        n = len(self.executor.tick_log)
        if self.pending and n >= self.pending[0] and self.executor.snapshot().steps_remaining >= 5:
            self.pending.pop(0)
            self.fired_at.append(n)
            return True
        return False


def ticks_by_chunk(log: list[TickRecord]) -> list[tuple[int, list[int]]]:
    """(chunk seq, the log indices of its ticks), chunks in the order they first ran."""
    out: list[tuple[int, list[int]]] = []
    for i, r in enumerate(log):
        if r.chunk_seq < 0:
            continue
        if not out or out[-1][0] != r.chunk_seq:
            out.append((r.chunk_seq, []))
        out[-1][1].append(i)
    return out


def run_with_person(
    server: RobotServer,
    endpoint: str,
    policy: Any,
    person: ScriptedSource,
    settings: ActorSettings,
    episode_id: str,
    max_chunks: int,
) -> EpisodeFile:
    """One episode of ``policy`` on the server with ``person`` able to take over, its tick log
    cleared first (so that it holds this episode's ticks)."""
    with RobotClient(cmd_endpoint=endpoint, name="learner", timeout_s=5.0) as client, person:
        client.connect()  # the server's control rate and pacing, for the actor
        actor = Actor(policy, client, settings)
        server.executor.tick_log.clear()
        return actor.run_episode(
            episode_id=episode_id,
            task=TASK,
            canonical_prompt="put the green container in the bowl",
            rollout_prompt="put the green container in the bowl",
            max_chunks=max_chunks,
            seed=3,
            person=person,
        )


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
    episode = run_with_person(server, endpoint, policy, person, settings, "ep-takeover", max_chunks=8)
    log = list(server.executor.tick_log)

    # the episode file: two interventions of the person's rows, marked as theirs
    assert len(episode.interventions) == 2 == len(trigger.fired_at)
    person_chunks = [i for i, c in enumerate(episode.chunks) if c.commanded_by == "person"]
    assert len(person_chunks) == 2 * PERSON_ROWS
    for iv in episode.interventions:
        assert iv.trigger == "device" and iv.n_rows == PERSON_ROWS
        assert person_chunks.count(iv.first_chunk) == 1 and iv.first_chunk > 0
        for c in episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows]:
            assert c.commanded_by == "person" and c.trace is None
            np.testing.assert_allclose(c.actions, row[None], atol=1e-6)
    assert sum(c.commanded_by == "policy" for c in episode.chunks) == 8

    # the server's ticks: the chunks that ran are the records that say they ran rows (a policy
    # chunk taken over before its first tick ran none), each for the rows its record says
    ran = ticks_by_chunk(log)
    ran_records = [i for i, c in enumerate(episode.chunks) if c.rows_run and c.rows_run[1] > c.rows_run[0]]
    ticks_of = dict(zip(ran_records, (ticks for _seq, ticks in ran), strict=True))
    for i, ticks in ticks_of.items():
        first_row, end_row = episode.chunks[i].rows_run or (0, 0)
        assert end_row - first_row == len(ticks), f"chunk {i}"
    policy_rows_after_fire = []
    for iv, fired in zip(episode.interventions, trigger.fired_at, strict=True):
        person_rows = range(iv.first_chunk, iv.first_chunk + iv.n_rows)
        assert all(len(ticks_of[i]) == 1 for i in person_rows)  # each person row ran once
        person_ticks = [ticks_of[i][0] for i in person_rows]
        assert person_ticks == sorted(set(person_ticks))  # in order, one per tick
        first_person_tick = person_ticks[0]
        # the policy's chunk was preempted mid-way: a policy row ran at the tick before the
        # person's first row (the arm never held between them), none after it
        before = max(i for i in ticks_of if i < iv.first_chunk)
        assert episode.chunks[before].commanded_by == "policy"
        assert ticks_of[before][-1] == first_person_tick - 1
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
    assert len(rb) == 8 and rb.person_rows_left_out == rows_commanded_by(episode, "person") == 6
    assert int(rb.rows_ran.sum()) == rows_commanded_by(episode, "policy")
    stats = Trainer(policy).update([(episode, reward_from_label(False))])
    assert stats["person_rows_left_out"] == 6 and np.isfinite(stats["pg_loss"])

    # the option beyond the paper: each takeover also became a demonstration of the task
    demos = sorted((tmp_path / "demos" / TASK).glob("*.episode"))
    assert [p.name for p in demos] == [f"ep-takeover-intervention-{k}.episode" for k in (0, 1)]
    for path in demos:
        demo = read_episode(path)
        assert demo.success is True and len(demo.chunks) == PERSON_ROWS and not demo.interventions


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
    episode = run_with_person(server, endpoint, policy, person, settings, "ep-last-chunk", max_chunks=1)
    [iv] = episode.interventions
    assert (iv.first_chunk, iv.n_rows) == (1, PERSON_ROWS) and len(episode.chunks) == 1 + PERSON_ROWS
    ran = ticks_by_chunk(list(server.executor.tick_log))
    policy_ticks, first_person_tick = ran[0][1], ran[1][1][0]
    assert 2 <= len(policy_ticks) < CHUNK_LEN and first_person_tick - fired_at[0] <= 1
    assert episode.chunks[0].rows_run == (0, len(policy_ticks))
