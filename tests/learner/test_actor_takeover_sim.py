"""A person takes over twice during an RL episode on the sim robot server (realtime pacing, in this
process so that its tick log can be read), with a scripted teleop source as the person: the episode
records the person's rows, the server's ticks show the policy's chunk stopped where the person's
first row ran, and the PPO batch holds none of the person's rows. Counted in ticks, never timed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from learner.actor import Actor, ActorSettings
from learner.policies.vla import make_test_policy
from learner.rewards import reward_from_label
from learner.trainer import Trainer, build_rollout_batch
from pde_contract.client import RobotClient
from pde_contract.episodes import read_episode, rows_commanded_by
from robot_server.executor import ChunkExecutor, TickRecord
from robot_server.server import RobotServer
from teleop.scripted import ScriptedSource
from tests.learner.test_actor_overlap_sim import sim_server  # noqa: F401  (a fixture)

CHUNK_LEN = 8
PERSON_ROWS = 3
TASK = "put_green_container_in_bowl"


class ScriptedTrigger:
    """The scripted person's urge to take over: once the server has run ``after_ticks[k]`` ticks of
    the log, early in a policy chunk (4 rows or more still to run: the actor has 3 ticks to send
    the person's first row before the chunk would end by itself). Notes, per takeover, how many
    ticks the log held when it fired (the index of the next tick)."""

    def __init__(self, executor: ChunkExecutor, after_ticks: list[int]) -> None:
        self.executor = executor
        self.pending = list(after_ticks)
        self.fired_at: list[int] = []

    def __call__(self) -> bool:
        n = len(self.executor.tick_log)
        if self.pending and n >= self.pending[0] and self.executor.snapshot().steps_remaining >= 4:
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
    with RobotClient(cmd_endpoint=endpoint, name="learner", timeout_s=5.0) as client, person:
        info = client.connect()
        actor = Actor(policy, client, settings.model_copy(update={"control_rate_hz": info.control_rate_hz}))
        server.executor.tick_log.clear()
        episode = actor.run_episode(
            episode_id="ep-takeover",
            task=TASK,
            canonical_prompt="put the green container in the bowl",
            rollout_prompt="put the green container in the bowl",
            max_chunks=8,
            seed=3,
            person=person,
        )
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

    # the server's ticks: every recorded chunk ran, the rows its record says
    ran = ticks_by_chunk(log)
    assert len(ran) == len(episode.chunks)
    for record, (_seq, ticks) in zip(episode.chunks, ran, strict=True):
        assert record.rows_run is not None
        assert record.rows_run[1] - record.rows_run[0] == len(ticks)
    policy_rows_after_fire = []
    for iv, fired in zip(episode.interventions, trigger.fired_at, strict=True):
        policy_ticks, person_ticks = ran[iv.first_chunk - 1][1], ran[iv.first_chunk][1]
        first_person_tick = person_ticks[0]
        # the policy's chunk was preempted mid-way: it ran up to the tick before the person's
        # first row, which ran at the next tick after the takeover, and never again after
        assert policy_ticks[-1] == first_person_tick - 1
        assert episode.chunks[iv.first_chunk - 1].rows_run[1] < CHUNK_LEN  # type: ignore[index]
        assert fired <= first_person_tick
        policy_rows_after_fire.append(first_person_tick - fired)
        # the person's rows ran one per tick, back to back
        rows = [t for _seq, ts in ran[iv.first_chunk : iv.first_chunk + iv.n_rows] for t in ts]
        assert rows == list(range(first_person_tick, first_person_tick + PERSON_ROWS))
        assert iv.start_tick >= 0
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
