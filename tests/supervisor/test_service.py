"""The supervisor service on recorded episodes: bootstrap to RL, VLM failures and fallbacks.

The VLM is FakeOpenAIServer behind the real ``openai`` client; episodes are real EpisodeFiles with
JPEG frames, stored through the real ``pde_storage.Store`` on SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pde_storage import Store
from supervisor.dedup import MiniLMEmbedder
from supervisor.service import SupervisorService
from supervisor.settings import SupervisorSettings
from supervisor.vlm.openai_vlm import OpenAIVLM
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.supervisor.episodes import make_episode

TASK, GOAL = "put_green_container_in_bowl", "put the green container in the bowl"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(url=f"sqlite:///{tmp_path}/pde.db", media_dir=str(tmp_path / "media"))
    yield s
    s.close()


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def make_settings(base_url: str = "http://127.0.0.1:9/v1", **kw: Any) -> SupervisorSettings:
    values: dict[str, Any] = dict(
        base_url=base_url,
        model="fake-vlm",
        api_key="k",
        # generous: a loaded CI machine took 0.3-0.6 s for a normal reply from the fake, so a short
        # deadline turned it into a retried or failed call; the timeout test sets its own
        request_timeout_s=10.0,
        connect_timeout_s=5.0,
        max_attempts=2,
        backoff_initial_s=0.01,
        backoff_max_s=0.05,
        iterations_t0=3,
        candidates_k=2,
        eta=0.5,
        pool_min_m=2,
        poll_interval_s=0.02,
        max_consecutive_failures=3,
        cooldown_s=30.0,
        workers=2,
    )
    values.update(kw)
    return SupervisorSettings(**values)


def make_service(
    store: Any, settings: SupervisorSettings, embedder: MiniLMEmbedder, vlm: bool = True
) -> SupervisorService:
    return SupervisorService(store, settings, OpenAIVLM(settings) if vlm else None, embedder, seed=3)


def drive(service: SupervisorService, until: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        service.step()
        if until():
            return
        time.sleep(0.02)
    raise AssertionError(f"condition not reached in {timeout_s}s; state: {service.counters}")


def rollout(store: Any, prompt_id: int, outcomes: list[bool], stage: str = "bootstrap") -> list[int]:
    """Record one episode per outcome under the prompt and label it as the simulator would."""
    ids = []
    for ok in outcomes:
        row = store.create_episode(TASK, prompt_id, 0, stage)
        text = next(p.text for p in store.prompts(TASK) if p.id == prompt_id)
        store.finish_episode(row.id, make_episode(str(row.id), TASK, GOAL, text, n_chunks=12))
        store.add_label(row.id, ok, source="simulator")
        ids.append(row.id)
    return ids


def new_task(store: Any) -> None:
    """The task as the episode loop leaves it: created, with its N = 2 rollouts per prompt."""
    store.ensure_task(TASK, GOAL)
    store.set_task_state(TASK, rollouts_per_prompt=2)


def by_status(store: Any, status: str) -> list[Any]:
    return [p for p in store.prompts(TASK) if p.status == status]


def snapshot(store: Any) -> tuple[Any, ...]:
    prompts = sorted((p.id, p.text, p.status, p.summary) for p in store.prompts(TASK))
    eps = sorted((e.id, e.status, e.success) for e in store.episodes(task=TASK))
    return tuple(prompts), tuple(eps)


def test_discarded_episodes_count_for_no_prompt(store: Any, embedder: MiniLMEmbedder) -> None:
    new_task(store)
    cand = store.add_prompt(TASK, "place the green container in the bowl")
    first, _ = rollout(store, cand.id, [True, False])
    store.discard_episode(first, "someone reached into the scene")
    service = make_service(store, make_settings(), embedder, vlm=False)
    history, episodes = service.load_history(TASK, GOAL)
    [record] = history.candidates
    assert (record.n_episodes, record.n_success) == (1, 0)  # the discarded success is not counted
    assert first not in [e.id for e in episodes]  # nor shown to the VLM


def test_bootstrap_to_rl_on_recorded_episodes(
    store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder
) -> None:
    new_task(store)
    service = make_service(store, make_settings(fake.base_url), embedder)
    try:
        # Iteration 1: the VLM proposes K = 2 candidates.
        drive(service, lambda: len(by_status(store, "candidate")) == 2)
        assert store.task_state(TASK).iteration == 1
        assert {p.source for p in by_status(store, "candidate")} == {"vlm"}
        a, b = sorted(by_status(store, "candidate"), key=lambda p: p.id)
        rollout(store, a.id, [True, False])  # 0.5 >= eta: joins the pool
        rollout(store, b.id, [False, False])  # stays as negative feedback
        # Iteration 2: verdicts, one-sentence summaries, new candidates shown the pool's frames.
        drive(service, lambda: store.task_state(TASK).iteration == 2 and service.idle())
        assert [p.text for p in by_status(store, "pool")] == [a.text]
        assert [p.text for p in by_status(store, "rejected")] == [b.text]
        assert all(p.summary for p in store.prompts(TASK) if p.status in ("pool", "rejected"))
        cand = fake.requests_of("candidates")
        assert len(cand) == 2 and cand[0]["n_images"] == 0 and cand[1]["n_images"] == 8
        assert all(not r["problems"] for r in fake.requests)
        # The VLM's own verdicts (always "success" from the fake) never admit a prompt.
        assert store.episodes(task=TASK)[-1].vlm_proposal in (True, None)
        c, d = sorted(by_status(store, "candidate"), key=lambda p: p.id)
        rollout(store, c.id, [True, True])
        rollout(store, d.id, [False, False])
        drive(service, lambda: store.task_state(TASK).stage == "rl")
        assert len(by_status(store, "pool")) == 2  # M_min reached: pool frozen
        n_prompts = len(store.prompts(TASK))
        for _ in range(5):
            service.step()
        assert len(store.prompts(TASK)) == n_prompts
        # Success proposals and their agreement with the simulator's labels.
        drive(
            service,
            lambda: service.idle() and all(e.vlm_proposal is not None for e in store.episodes(task=TASK)),
        )
        service.publish(force=True)
        cm = store.service_states()["supervisor"].state["confusion"]
        assert cm["n"] == 8 and cm["true_pos"] == 3 and cm["false_pos"] == 5
        assert store.metrics("supervisor/vlm_agreement")[-1][:2] == (8, 3 / 8)
        kinds = {c.kind for c in store.supervisor_calls(limit=500)}
        assert {"candidates", "summary", "success"} <= kinds
        assert all(c.ok and c.prompt_tokens > 0 for c in store.supervisor_calls(limit=500))
    finally:
        service.close()


def seed_history(store: Any) -> None:
    """Iteration 1 already done: one pool prompt and one failure, both summarised."""
    new_task(store)
    good = store.add_prompt(TASK, "place the green container in the bowl", "candidate", "vlm", 1)
    bad = store.add_prompt(TASK, "drop the green container inside the bowl", "candidate", "vlm", 1)
    rollout(store, good.id, [True, True])
    rollout(store, bad.id, [False, False])
    store.set_prompt_status(good.id, "pool", summary="grasps the container and places it in the bowl")
    store.set_prompt_status(bad.id, "rejected", summary="drops the container next to the bowl")
    store.set_task_state(TASK, iteration=1)


def test_vlm_failures_retry_then_fall_back_without_losing_history(
    store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder
) -> None:
    seed_history(store)
    before = snapshot(store)
    # Three candidate rounds fail in three ways (2 attempts each): 429+500, bad JSON twice, timeouts.
    # The slow replies never come while the test runs (the fake's stop wakes them); the deadline
    # leaves the other replies seconds on a loaded machine, so each fails for its scripted reason.
    bad = [
        {"status": 429},
        {"status": 500},
        {"malformed": True},
        {"invalid": True},
        {"delay_s": 60.0},
        {"delay_s": 60.0},
    ]
    fake.set_script({"candidates": bad})
    settings = make_settings(fake.base_url, score_episodes=False, request_timeout_s=3.0)
    service = make_service(store, settings, embedder)
    try:
        drive(service, lambda: store.task_state(TASK).iteration == 2)
        new = [p for p in store.prompts(TASK) if p.iteration == 2]
        assert new and {p.source for p in new} == {"offline"}  # the fallback proposer
        assert len(fake.requests_of("candidates")) == 6  # every attempt reached the server
        assert service.counters["vlm_failed"] == 3 and service.counters["fallbacks"] == 1
        calls = store.supervisor_calls(limit=100)
        failed = [c for c in calls if not c.ok]
        errors = " | ".join(c.error for c in failed)
        assert len(failed) == 4, errors  # 429+500, not JSON, still invalid after repair, timeouts
        assert "500" in errors and "invalid answer" in errors and "Timeout" in errors
        state = store.service_states()["supervisor"].state
        assert state["vlm_available"] is False and state["last_vlm_error"]
        assert state["eta"] == service.settings.eta  # the page's re-judge flag reads it
        # Nothing stored before the failures changed or vanished.
        prompts_before, eps_before = before
        prompts_now, eps_now = snapshot(store)
        assert set(prompts_before) <= set(prompts_now) and eps_now == eps_before
    finally:
        service.close()


def test_vlm_back_after_cooldown(store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder) -> None:
    seed_history(store)
    fake.set_script({"candidates": [{"status": 500}] * 2})
    settings = make_settings(fake.base_url, score_episodes=False, max_consecutive_failures=1, cooldown_s=0.3)
    service = make_service(store, settings, embedder)
    try:
        drive(service, lambda: store.task_state(TASK).iteration == 2)
        for p in (p for p in store.prompts(TASK) if p.iteration == 2):
            rollout(store, p.id, [False, False])
        time.sleep(0.35)
        drive(service, lambda: store.task_state(TASK).iteration == 3)
        assert {p.source for p in store.prompts(TASK) if p.iteration == 3} == {"vlm"}
    finally:
        service.close()


def test_canonical_fallback_adds_nothing_and_keeps_going(
    store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder
) -> None:
    seed_history(store)
    fake.set_script({"candidates": [{"status": 503}] * 20})
    settings = make_settings(
        fake.base_url, score_episodes=False, fallback="canonical", max_consecutive_failures=1
    )
    service = make_service(store, settings, embedder)
    try:
        n = len(store.prompts(TASK))
        drive(service, lambda: store.task_state(TASK).stage == "rl")  # budget spent, one pool prompt
        assert len(store.prompts(TASK)) == n and store.task_state(TASK).iteration == 3
    finally:
        service.close()


def test_slow_vlm_never_blocks_the_poll(store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder) -> None:
    new_task(store)
    # the reply comes when the fake stops, after the test (the request's deadline is 60 s too)
    fake.set_script({"candidates": [{"delay_s": 60.0, "auto": True}]})
    service = make_service(store, make_settings(fake.base_url, request_timeout_s=60.0), embedder)
    try:
        service.step()  # submits the candidate request
        t0 = time.monotonic()
        for _ in range(10):
            service.step()
        # Polls that waited for the VLM would take its whole 60 s; a loaded machine takes far less.
        assert time.monotonic() - t0 < 30.0
        assert not service.idle() and store.task_state(TASK).iteration == 0
    finally:
        service.close()


def test_offline_mode_without_vlm(store: Any, embedder: MiniLMEmbedder) -> None:
    new_task(store)
    service = make_service(store, make_settings(proposer="offline"), embedder, vlm=False)
    try:
        drive(service, lambda: len(by_status(store, "candidate")) == 2)
        cands = by_status(store, "candidate")
        assert {p.source for p in cands} == {"offline"}
        rollout(store, cands[0].id, [True, True])
        rollout(store, cands[1].id, [False, False])
        drive(service, lambda: store.task_state(TASK).iteration == 2)
        assert by_status(store, "pool")[0].summary.startswith("2/2 labelled rollouts succeeded")
        assert all(e.vlm_proposal is None for e in store.episodes(task=TASK))
    finally:
        service.close()


def test_vlm_labels_never_admit_a_prompt(store: Any, embedder: MiniLMEmbedder) -> None:
    new_task(store)
    store.set_task_state(TASK, iteration=1)
    judged = store.add_prompt(TASK, "place the green container in the bowl", "candidate", "vlm", 1)
    unlabelled = store.add_prompt(TASK, "drop the green container inside the bowl", "candidate", "vlm", 1)
    for eid in rollout(store, judged.id, [False, False]):
        store.add_label(eid, True, source="vlm", reason="looks done")  # a false positive
    for _ in range(2):  # VLM-only labels: not enough to judge
        row = store.create_episode(TASK, unlabelled.id, 0, "bootstrap")
        store.finish_episode(row.id, make_episode(str(row.id), TASK, GOAL, unlabelled.text, n_chunks=12))
        store.add_label(row.id, True, source="vlm", reason="looks done")
    service = make_service(store, make_settings(proposer="offline"), embedder, vlm=False)
    try:
        for _ in range(3):
            service.step()
        status = {p.id: p.status for p in store.prompts(TASK)}
        assert status[judged.id] == "rejected" and status[unlabelled.id] == "candidate"
        assert store.task_state(TASK).iteration == 1  # still waiting for the operator's labels
    finally:
        service.close()


def test_the_loops_n_on_the_task_row_decides_when_a_candidate_is_judged(
    store: Any, embedder: MiniLMEmbedder
) -> None:
    new_task(store)  # N = 2
    store.set_task_state(TASK, iteration=1)
    cand = store.add_prompt(TASK, "place the green container in the bowl", "candidate", "vlm", 1)
    rollout(store, cand.id, [True])
    rollout(store, cand.id, [True], stage="rl")  # not a bootstrap comparison: does not count
    service = make_service(store, make_settings(proposer="offline"), embedder, vlm=False)
    try:
        service.step()
        assert store.prompt(cand.id).status == "candidate"  # 1/2 bootstrap rollouts
        store.set_task_state(TASK, rollouts_per_prompt=1)  # the loop restarted with N = 1
        service.step()
        assert store.prompt(cand.id).status == "pool"
    finally:
        service.close()


def test_late_proposal_is_dropped(store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder) -> None:
    new_task(store)
    fake.set_script({"candidates": [{"delay_s": 0.5, "auto": True}]})
    service = make_service(store, make_settings(fake.base_url, request_timeout_s=5.0), embedder)
    try:
        service.step()
        store.set_task_state(TASK, stage="rl")  # e.g. the operator froze the pool meanwhile
        drive(service, service.idle)
        assert len(fake.requests_of("candidates")) == 1
        assert [p.status for p in store.prompts(TASK)] == ["canonical"]
    finally:
        service.close()


def test_heartbeat_stays_fresh_while_a_poll_waits(store: Any, embedder: MiniLMEmbedder) -> None:
    """A poll stuck on something slow (the sentence model loading on a loaded machine, a slow
    database) leaves the service alive to its healthcheck, and the stuck poll shows in its state."""
    import threading

    service = make_service(store, make_settings(poll_interval_s=0.05), embedder, vlm=False)
    release, waiting = threading.Event(), threading.Event()
    collect = service._collect

    def slow_collect() -> None:
        waiting.set()
        release.wait(10)
        collect()

    service._collect = slow_collect  # type: ignore[method-assign]
    stop = threading.Event()
    t = threading.Thread(target=service.run, args=(stop,), daemon=True)
    t.start()
    try:
        assert waiting.wait(10)  # the first poll is stuck before it ever published
        deadline = time.monotonic() + 5.0
        while "supervisor" not in store.service_states():
            assert time.monotonic() < deadline, "no heartbeat while the first poll waits"
            time.sleep(0.02)
        first = store.service_states()["supervisor"].updated_at
        while True:
            row = store.service_states()["supervisor"]
            if (row.updated_at - first).total_seconds() >= 0.3 and row.state["poll_running_s"] > 0:
                break
            assert time.monotonic() < deadline, f"heartbeat stalled with the poll: {row}"
            time.sleep(0.02)
        assert row.state["phase"] == "running"
    finally:
        release.set()
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert store.service_states()["supervisor"].state["phase"] == "stopped"


def test_success_proposals_judge_against_the_tasks_success_description(
    store: Any, fake: FakeOpenAIServer, embedder: MiniLMEmbedder, tmp_path: Path
) -> None:
    described = "the green container lies inside the bowl, the gripper open above it"
    tasks = tmp_path / "tasks.toml"
    tasks.write_text(f'[tasks.{TASK}]\nsuccess_description = "{described}"\n')
    new_task(store)
    canon = store.prompts(TASK, "canonical")[0]
    row = store.create_episode(TASK, canon.id, 0, "bootstrap")
    store.finish_episode(row.id, make_episode(str(row.id), TASK, GOAL, GOAL, n_chunks=12))
    settings = make_settings(fake.base_url, tasks_file=str(tasks), proposer="offline")
    service = make_service(store, settings, embedder)
    try:
        drive(service, lambda: service.idle() and store.episode(row.id).vlm_proposal is not None)
    finally:
        service.close()
    [judged] = fake.requests_of("success")
    assert f"SUCCESS means: {described}" in judged["text"]
