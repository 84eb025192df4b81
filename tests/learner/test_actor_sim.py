"""The actor against a real `pde robot-server --backend sim` process (fast pacing, small frames)."""

import time
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from learner.actor import Actor, ActorSettings
from learner.policies.vla import make_test_policy
from learner.rewards import reward_from_label
from learner.trainer import Trainer
from pde.health import as_probe, check_robot_server
from pde.procs import ProcessGroup
from pde_contract.client import RobotClient, RobotServerError
from tests.helpers import free_port, pde_command, subprocess_env


@pytest.fixture
def sim_server(sim_server_group):
    endpoint, _ = sim_server_group
    return endpoint


@contextmanager
def running_sim_server(tmp_path, pacing="fast", **env):
    """A `pde robot-server --backend sim` process with 32x32 frames: (endpoint, its group)."""
    cmd_port, obs_port = free_port(), free_port()
    group = ProcessGroup(tmp_path)
    argv = pde_command(
        "robot-server",
        "--backend",
        "sim",
        "--pacing",
        pacing,
        "--image-size",
        "32x32",
        "--cmd-port",
        str(cmd_port),
        "--obs-port",
        str(obs_port),
    )
    group.start("robot", argv, env=subprocess_env(OMP_NUM_THREADS="1", MUJOCO_GL="egl", **env))
    endpoint = f"tcp://127.0.0.1:{cmd_port}"

    try:
        group.wait_healthy("robot", as_probe(lambda: check_robot_server(endpoint, 0.5)), timeout_s=120)
        yield endpoint, group
    finally:
        group.stop_all()


@pytest.fixture
def sim_server_group(tmp_path):
    with running_sim_server(tmp_path) as got:
        yield got


def test_actor_rolls_out_on_the_sim_server_and_trains(sim_server):
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    with RobotClient(cmd_endpoint=sim_server, name="learner", timeout_s=5.0) as client:
        client.connect()  # the server's control rate and pacing, for the actor
        actor = Actor(policy, client, ActorSettings())
        episodes = [
            actor.run_episode(
                episode_id=f"ep{i}",
                task="put_green_container_in_bowl",
                canonical_prompt="put the green container in the bowl",
                rollout_prompt="drop the green box into the bowl",
                max_chunks=3,
                seed=i,
            )
            for i in range(2)
        ]
    for ep in episodes:
        assert len(ep.chunks) == 3 and ep.success is False  # random weights do not solve the task
        seqs = [c.observation.seq for c in ep.chunks]
        assert seqs == sorted(set(seqs))
        # the arm moved between chunks: observations differ in state
        poses = np.stack([c.observation.state.ee_position_m for c in ep.chunks])
        assert np.abs(np.diff(poses, axis=0)).max() > 1e-5
        assert {f.name for f in ep.chunks[0].observation.cameras} == {"external", "wrist"}
    stats = Trainer(policy).update([(ep, reward_from_label(ep.success)) for ep in episodes])
    assert stats["n_chunks"] == 6 and np.isfinite(stats["pg_loss"])


class KillsServerAfterFirstChunk:
    """The real client; the robot server is SIGKILLed right after it accepted the first chunk."""

    def __init__(self, client: RobotClient, group: ProcessGroup) -> None:
        self.client, self.group = client, group
        self.killed_at_s: float | None = None

    def submit_chunk(self, chunk):
        accepted = self.client.submit_chunk(chunk)
        if self.killed_at_s is None:
            self.group.kill("robot")
            self.killed_at_s = time.monotonic()
        return accepted

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_a_killed_robot_server_ends_the_episode_in_seconds_not_chunk_timeout_s(sim_server_group):
    endpoint, group = sim_server_group
    with RobotClient(cmd_endpoint=endpoint, name="learner", timeout_s=2.0) as client:  # as the loop's
        client.connect()  # the server's control rate and pacing, for the actor
        killer = KillsServerAfterFirstChunk(client, group)
        actor = Actor(make_test_policy("flow"), killer, ActorSettings())
        with pytest.raises(RobotServerError, match="has not answered"):
            actor.run_episode(
                episode_id="ep0",
                task="put_green_container_in_bowl",
                canonical_prompt="put the green container in the bowl",
                rollout_prompt="drop the green box into the bowl",
                max_chunks=3,
                seed=0,
            )
        assert killer.killed_at_s is not None
        took_s = time.monotonic() - killer.killed_at_s
        print(f"episode ended {took_s:.2f} s after the robot server was killed")
        assert took_s < 10.0  # server_silent_s 2 s after one timed-out poll; chunk_timeout_s is 30 s
