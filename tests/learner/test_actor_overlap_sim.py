"""Overlapped inference on the sim robot server (realtime pacing, in this process so that its own
tick log can be read): the episode file records exactly the rows of each chunk that the server ran.

The policy is slowed in server ticks, not seconds (it returns once two ticks have run since it was
asked), so the overlap is the same on any machine: every chunk after the first has its first two
rows in the past, and the assertions count rows and ticks only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from learner.actor import Actor, ActorSettings
from learner.policies.base import ChunkSample, ObsBatch
from learner.policies.vla import make_test_policy
from learner.rewards import reward_from_label
from learner.trainer import Trainer
from pde_contract.client import RobotClient
from robot_server.backends import build_backend
from robot_server.executor import ChunkExecutor, TickRecord
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.helpers import free_port

INFERENCE_TICKS = 2
CHUNK_LEN = 6


@pytest.fixture
def sim_server() -> Iterator[tuple[str, RobotServer]]:
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        image_width=32,
        image_height=32,
        control_rate_hz=10.0,
        camera_fps=20.0,
        pacing="realtime",
        heartbeat_timeout_s=1.0,  # a loaded test machine may pause the heartbeat thread
    )
    backend = build_backend(settings)
    server = RobotServer(backend.robot, backend.cameras, settings)
    server.start()
    try:
        yield f"tcp://127.0.0.1:{settings.cmd_port}", server
    finally:
        server.close()
        if backend.close is not None:
            backend.close()


def slowed_in_ticks(policy, executor: ChunkExecutor, ticks: int):
    """``policy`` whose ``sample`` returns only once ``ticks`` control ticks have run since it was
    called: an inference that takes ``ticks`` ticks, whatever the machine's load."""
    sample = policy.sample

    def slow_sample(obs: ObsBatch, prompts, deterministic: bool = False) -> ChunkSample:
        until = executor.snapshot().tick + ticks
        out = sample(obs, prompts, deterministic=deterministic)
        while executor.snapshot().tick < until:
            time.sleep(0.002)
        return out

    policy.sample = slow_sample
    return policy


def rows_by_chunk(log: list[TickRecord]) -> list[tuple[int, list[int]]]:
    """(chunk seq, its rows in the order they ran), chunks in the order they first ran."""
    out: list[tuple[int, list[int]]] = []
    for r in log:
        if r.chunk_seq < 0:
            continue
        if not out or out[-1][0] != r.chunk_seq:
            out.append((r.chunk_seq, []))
        out[-1][1].append(r.row)
    return out


def test_an_overlapped_episode_records_the_rows_that_ran(sim_server) -> None:
    endpoint, server = sim_server
    policy = slowed_in_ticks(make_test_policy("flow", chunk_len=CHUNK_LEN), server.executor, INFERENCE_TICKS)
    with RobotClient(cmd_endpoint=endpoint, name="learner", timeout_s=5.0) as client:
        info = client.connect()
        assert info.pacing == "realtime"
        actor = Actor(policy, client, ActorSettings(obs_timeout_s=10.0))
        assert actor.settings.chunk_timing == "overlapped"  # the default
        server.executor.tick_log.clear()
        episode = actor.run_episode(
            episode_id="ep-overlap",
            task="put_green_container_in_bowl",
            canonical_prompt="put the green container in the bowl",
            rollout_prompt="put the green container in the bowl",
            max_chunks=4,
            seed=3,
        )
    ran = rows_by_chunk(list(server.executor.tick_log))
    assert len(ran) == len(episode.chunks) == 4
    for i, (record, (_seq, plan_rows)) in enumerate(zip(episode.chunks, ran, strict=True)):
        assert record.rows_run is not None
        first, end = record.rows_run
        # the server's plan starts at the first row not in the past: sent row = first + plan row
        assert [first + r for r in plan_rows] == list(range(first, end)), f"chunk {i}"
        if i == 0:
            assert first == 0  # inferred while the arm held: nothing in the past
        else:
            # inferred from an observation taken while the previous chunk ran, which went on for
            # at least INFERENCE_TICKS ticks: those rows of this chunk were in the past
            assert first >= INFERENCE_TICKS, f"chunk {i}"
    last = episode.chunks[-1].rows_run
    assert last is not None and last[1] == CHUNK_LEN  # the last chunk ran to its end
    # PPO trains on it, counting only those rows
    stats = Trainer(policy).update([(episode, reward_from_label(False))])
    assert stats["n_chunks"] == 4 and np.isfinite(stats["pg_loss"])
