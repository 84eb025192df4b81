"""A fast-paced sim episode is a function of (policy, scene seed, torch seed) alone: the same short
evaluation run twice on the real sim robot server (in this process), once with a FAKE inference
delay that varies (a seeded random 0-300 ms per chunk, as a loaded machine adds), gives
bit-identical outcomes, trajectories and final world states (issue 32: the same checkpoint scored
10, 16 and 16/100 when idle ticks stepped physics while the policy inferred)."""

from __future__ import annotations

import pytest
import torch

from learner.policies.vla import make_test_policy
from robot_server.robots.sim.robot_sim import SETTLE_S
from tests.learner.lockstep import delayed, run_episodes

EPISODES, MAX_CHUNKS, CHUNK_LEN = 3, 3, 4
PERIOD_S = 0.1  # the server's default control rate, 10 Hz


def policy():
    torch.manual_seed(5)  # the same random weights in both runs
    return make_test_policy("gaussian", chunk_len=CHUNK_LEN)


def test_an_inference_delay_changes_no_episode() -> None:
    plain, slow = (
        run_episodes(p, episodes=EPISODES, first_scene=11, max_chunks=MAX_CHUNKS, torch_seed=3)
        for p in (policy(), delayed(policy(), max_delay_s=0.3, seed=0))
    )
    for a, b in zip(plain, slow, strict=True):
        assert (a.success, a.rows_run) == (b.success, b.rows_run), (a, b)
        assert a.trajectory_sha256 == b.trajectory_sha256, (a, b)
        # simulated time passed with the chunk rows only: none while the policy inferred
        assert a.rows_run == MAX_CHUNKS * CHUNK_LEN
        for e in (a, b):
            assert e.idle_ticks_moving_world == 0, e
            assert e.sim_s == pytest.approx(SETTLE_S + e.rows_run * PERIOD_S, abs=1e-9), e
    assert len({e.trajectory_sha256 for e in plain}) == EPISODES  # the scenes differ: a real hash
