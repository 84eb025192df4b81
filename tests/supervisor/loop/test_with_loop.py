"""The supervisor and the real episode loop on one database, with the VLM behind FakeOpenAIServer.

The loop (learner.loop) uses its own test doubles for the robot, actor and trainer; the store is
real (SQLite, and PostgreSQL where the storage tests can start a cluster). The contract checked:
the loop rolls out what the supervisor proposes, the supervisor judges on the loop's labels, and
the task moves to RL with the pool the labels justify.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from learner.loop.core import EpisodeLoop
from learner.loop.settings import LoopSettings
from learner.loop.training import BackgroundTrainer
from pde_storage import Store
from supervisor.dedup import MiniLMEmbedder
from supervisor.service import SupervisorService
from supervisor.settings import SupervisorSettings
from supervisor.vlm.openai_vlm import OpenAIVLM
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.learner.loop.doubles import FakeActor, FakeRobot, FakeTrainer

TASK, GOAL = "put_green_container_in_bowl", "put the green container in the bowl"
GOOD_VERBS = ("place", "set")  # the scripted "policy" succeeds only under these wordings


def _until(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not reached in {timeout_s}s")


def test_loop_and_supervisor_reach_rl_with_the_earned_pool(store: Store, embedder: MiniLMEmbedder) -> None:
    store.ensure_task(TASK, GOAL)
    actor: FakeActor
    actor = FakeActor(outcomes=lambda i: actor.calls[i]["rollout_prompt"].startswith(GOOD_VERBS))
    loop_values: dict[str, Any] = dict(
        tasks=[TASK], auto_start=True, auto_label=True, rollouts_per_prompt=2, batch_size=4,
        max_chunks=3, poll_period_s=0.01, error_backoff_s=0.05,
    )  # fmt: skip
    loop_settings = LoopSettings(**loop_values)
    with FakeOpenAIServer() as fake:
        settings = SupervisorSettings(
            base_url=fake.base_url, model="fake-vlm", api_key="k", request_timeout_s=5.0,  # type: ignore[arg-type]
            iterations_t0=5, candidates_k=2, rollouts_n=2, eta=0.5, pool_min_m=2, poll_interval_s=0.02,
        )  # fmt: skip
        service = SupervisorService(store, settings, OpenAIVLM(settings), embedder, seed=0)
        trainer = BackgroundTrainer(FakeTrainer(), lambda policy, version, metrics: "")
        loop = EpisodeLoop(store, FakeRobot(), actor, loop_settings, trainer=trainer)
        stop = threading.Event()
        threads = [
            threading.Thread(target=loop.run, daemon=True),
            threading.Thread(target=service.run, args=(stop,)),
        ]
        for t in threads:
            t.start()
        try:
            _until(lambda: store.task_state(TASK).stage == "rl", 120, "RL stage")
            _until(lambda: len(store.episodes(task=TASK, status="labelled")) >= 16, 60, "RL rollouts")
        finally:
            loop.stop()
            stop.set()
            for t in threads:
                t.join(15)
    assert not any(t.is_alive() for t in threads)
    pool = [p.text for p in store.prompts(TASK, "pool")]
    rejected = [p.text for p in store.prompts(TASK, "rejected")]
    assert len(pool) == 2 and all(p.startswith(GOOD_VERBS) for p in pool)
    assert rejected and not any(p.startswith(GOOD_VERBS) for p in rejected)
    assert all(p.summary for p in store.prompts(TASK) if p.status in ("pool", "rejected"))
    rl = [e for e in store.episodes(task=TASK) if e.stage == "rl"]
    assert rl and {e.rollout_prompt for e in rl} <= {GOAL, *pool}
    assert all(not r["problems"] for r in fake.requests)
    assert service.counters["errors"] == 0 and service.counters["vlm_failed"] == 0
