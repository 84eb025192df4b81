"""Episodes on an in-process fast-paced sim robot server, fingerprinted (issue 32: is an episode a
function of checkpoint, scene seed and torch seed alone, or also of how long inference took?).

Shared by tests/learner/test_fast_pacing_lockstep_sim.py and bench/bench_lockstep.py. The server is
the real one (RobotServer, SimRobot, MuJoCo) in this process, so that its tick log and world can be
read; the policy's slowness is the one fake (``delayed``)."""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from learner.actor import Actor, ActorSettings
from learner.policies.base import Policy
from pde_contract.client import RobotClient
from pde_contract.episodes import EpisodeFile, trajectory_sha256
from robot_server.backends import build_backend
from robot_server.executor import TickRecord
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from robot_server.sim.world import SimWorld
from tests.helpers import free_port

TASK = "put_green_container_in_bowl"
PROMPT = "put the green container in the bowl"


@dataclass(frozen=True)
class EpisodeFigures:
    scene: int
    success: bool | None
    rows_run: int  # chunk rows the server ran
    idle_ticks_moving_world: int  # ticks without a chunk row that commanded the arm (stepped physics)
    sim_s: float  # MuJoCo's time at the episode's end, from its reset (0)
    trajectory_sha256: str
    seconds: float  # wall clock


def delayed(policy: Policy, max_delay_s: float, seed: int) -> Policy:
    """FAKE slow inference (a loaded machine): ``policy`` whose ``sample`` sleeps a seeded random
    0..``max_delay_s`` before returning its chunk, which it leaves unchanged."""
    rng = random.Random(seed)
    sample = policy.sample

    def slow_sample(*args: Any, **kwargs: Any) -> Any:
        out = sample(*args, **kwargs)
        time.sleep(rng.uniform(0.0, max_delay_s))
        return out

    policy.sample = slow_sample  # type: ignore[method-assign]
    return policy


def trajectory_and_world_sha256(episode: EpisodeFile, world: SimWorld) -> str:
    """The episode's fingerprint (what the policy saw and did) and the whole world at its end
    (the objects too)."""
    h = hashlib.sha256(trajectory_sha256(episode).encode())
    with world.lock:
        h.update(world.data.qpos.tobytes())
        h.update(world.data.qvel.tobytes())
    return h.hexdigest()


def idle_ticks_moving_world(log: list[TickRecord]) -> int:
    # getattr: the same count on a server from before TickRecord.commanded (every tick commanded)
    return sum(1 for r in log if r.chunk_seq < 0 and getattr(r, "commanded", True))


@contextlib.contextmanager
def fast_sim_server(
    image_size_px: int, sim_profile: str = "default"
) -> Iterator[tuple[str, RobotServer, SimWorld]]:
    """A `--pacing fast` sim robot server in this process: (command endpoint, server, its world)."""
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        image_width=image_size_px,
        image_height=image_size_px,
        pacing="fast",
        sim_profile=sim_profile,  # type: ignore[arg-type]
        sim_layout_spread=0.2,
        heartbeat_timeout_s=2.0,  # a loaded test machine may pause the heartbeat thread
    )
    backend = build_backend(settings)
    server = RobotServer(backend.robot, backend.cameras, settings)
    server.start()
    try:
        yield f"tcp://127.0.0.1:{settings.cmd_port}", server, backend.robot.world  # type: ignore[attr-defined]
    finally:
        server.close()
        if backend.close is not None:
            backend.close()


def run_episodes(
    policy: Policy,
    *,
    episodes: int,
    first_scene: int,
    max_chunks: int,
    torch_seed: int,
    image_size_px: int = 32,
    sim_profile: str = "default",
    task: str = TASK,
    prompt: str = PROMPT,
    report: bool = False,
) -> list[EpisodeFigures]:
    """``episodes`` episodes (scenes ``first_scene``..) on a fresh server, torch seeded once, as
    `pde learner eval` runs them."""
    out: list[EpisodeFigures] = []
    with (
        fast_sim_server(image_size_px, sim_profile) as (endpoint, server, world),
        RobotClient(endpoint, name="lockstep", timeout_s=10.0) as client,
    ):
        client.connect()
        actor = Actor(policy, client, ActorSettings(obs_timeout_s=10.0))
        torch.manual_seed(torch_seed)
        for i in range(episodes):
            scene = first_scene + i
            server.executor.tick_log.clear()  # from here: the reset, the episode
            t0 = time.perf_counter()
            ep = actor.run_episode(
                episode_id=f"lockstep-{i}",
                task=task,
                canonical_prompt=prompt,
                rollout_prompt=prompt,
                max_chunks=max_chunks,
                seed=scene,
            )
            seconds = time.perf_counter() - t0
            with world.lock:
                sim_s = float(world.data.time)
            figures = EpisodeFigures(
                scene=scene,
                success=ep.success,
                rows_run=sum(r.chunk_seq >= 0 for r in server.executor.tick_log),
                idle_ticks_moving_world=idle_ticks_moving_world(list(server.executor.tick_log)),
                sim_s=sim_s,
                trajectory_sha256=trajectory_and_world_sha256(ep, world),
                seconds=round(seconds, 3),
            )
            out.append(figures)
            if report:
                print(figures, flush=True)
    return out
