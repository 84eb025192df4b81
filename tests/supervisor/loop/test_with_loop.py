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


def run_together(
    store: Store, embedder: MiniLMEmbedder, fake: FakeOpenAIServer, until_labelled: int, **supervisor: Any
) -> SupervisorService:
    """Loop and supervisor in threads until the task is in RL with ``until_labelled`` episodes."""
    store.ensure_task(TASK, GOAL)
    actor: FakeActor
    actor = FakeActor(outcomes=lambda i: actor.calls[i]["rollout_prompt"].startswith(GOOD_VERBS))
    loop_values: dict[str, Any] = dict(
        tasks=[TASK], auto_start=True, auto_label=True, rollouts_per_prompt=2, batch_size=4,
        max_chunks=3, poll_period_s=0.01, error_backoff_s=0.05,
    )  # fmt: skip
    values: dict[str, Any] = dict(
        base_url=fake.base_url, model="fake-vlm", api_key="k", request_timeout_s=5.0, iterations_t0=5,
        candidates_k=2, eta=0.5, pool_min_m=2, poll_interval_s=0.02,
    )  # fmt: skip
    settings = SupervisorSettings(**(values | supervisor))
    service = SupervisorService(store, settings, OpenAIVLM(settings), embedder, seed=0)
    trainer = BackgroundTrainer(FakeTrainer(), lambda _new: "")
    loop = EpisodeLoop(store, FakeRobot(), actor, LoopSettings(**loop_values), trainer=trainer)
    stop = threading.Event()
    threads = [
        threading.Thread(target=loop.run, daemon=True),
        threading.Thread(target=service.run, args=(stop,)),
    ]
    for t in threads:
        t.start()
    try:
        _until(lambda: store.task_state(TASK).stage == "rl", 120, "RL stage")
        _until(lambda: len(store.episodes(task=TASK, status="labelled")) >= until_labelled, 60, "RL rollouts")
    finally:
        loop.stop()
        stop.set()
        for t in threads:
            t.join(15)
    assert not any(t.is_alive() for t in threads)
    return service


def test_loop_and_supervisor_reach_rl_with_the_earned_pool(store: Store, embedder: MiniLMEmbedder) -> None:
    with FakeOpenAIServer() as fake:
        service = run_together(store, embedder, fake, until_labelled=16)
    pool = [p.text for p in store.prompts(TASK, "pool")]
    rejected = [p.text for p in store.prompts(TASK, "rejected")]
    assert len(pool) == 2 and all(p.startswith(GOOD_VERBS) for p in pool)
    assert rejected and not any(p.startswith(GOOD_VERBS) for p in rejected)
    assert all(p.summary for p in store.prompts(TASK) if p.status in ("pool", "rejected"))
    rl = [e for e in store.episodes(task=TASK) if e.stage == "rl"]
    assert rl and {e.rollout_prompt for e in rl} <= {GOAL, *pool}
    assert all(not r["problems"] for r in fake.requests)
    assert service.counters["errors"] == 0 and service.counters["vlm_failed"] == 0


def test_dead_vlm_falls_back_to_the_canonical_prompt_and_the_loop_goes_on(
    store: Store, embedder: MiniLMEmbedder
) -> None:
    with FakeOpenAIServer(script=[{"status": 500}] * 1000) as fake:
        service = run_together(
            store, embedder, fake, until_labelled=10, fallback="canonical", iterations_t0=2,
            max_attempts=2, backoff_initial_s=0.01, max_consecutive_failures=1, cooldown_s=600.0,
        )  # fmt: skip
    assert [p.status for p in store.prompts(TASK)] == ["canonical"]  # nothing proposed, nothing lost
    eps = store.episodes(task=TASK)
    assert len(eps) >= 10 and {e.rollout_prompt for e in eps} == {GOAL}
    assert any(e.stage == "rl" for e in eps)  # PPO went on with the canonical prompt
    assert all(e.status == "labelled" for e in eps if e.stage == "bootstrap")
    calls = store.supervisor_calls(limit=100)
    assert calls and not any(c.ok for c in calls) and all("500" in c.error for c in calls)
    assert len(fake.requests) == 2 * len(calls)  # two attempts (with backoff) per failed call
    assert service.counters["fallbacks"] >= 1
