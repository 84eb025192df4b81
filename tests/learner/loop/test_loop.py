"""The episode loop's state machine with a real store and Fake robot/actor/trainer doubles."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from learner.loop.core import EpisodeLoop
from learner.loop.settings import LoopSettings
from learner.loop.training import BackgroundTrainer, TrainedVersion
from pde_contract.intents import AbortEpisode, StartEpisode
from pde_contract.service_state import LOOP_ROW, LoopState
from pde_storage import Store
from pde_storage.service_states import read_state
from tests.learner.loop.doubles import FakeActor, FakeRestartingRobot, FakeRobot, FakeTrainer

TASK = "put_green_container_in_bowl"
CANON = "put the green container in the bowl"


def _settings(**kw: Any) -> LoopSettings:
    base: dict[str, Any] = dict(
        tasks=[TASK],
        auto_start=True,
        auto_label=True,
        rollouts_per_prompt=2,
        batch_size=4,
        max_chunks=5,
        poll_period_s=0.005,
        error_backoff_s=0.05,
    )
    base.update(kw)
    return LoopSettings(**base)


def _until(cond: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def _run_in_thread(loop: EpisodeLoop) -> threading.Thread:
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    return t


def _phase(store: Store) -> str | None:
    s, _ = read_state(store, LOOP_ROW, LoopState)
    return None if s is None else s.phase


def test_bootstrap_canonical_baseline_then_candidates(store: Store) -> None:
    robot, actor = FakeRobot(), FakeActor(outcomes=lambda i: i % 2 == 0)
    loop = EpisodeLoop(store, robot, actor, _settings())
    t = _run_in_thread(loop)
    _until(lambda: _phase(store) == "waiting_for_supervisor")
    eps = store.episodes()
    assert [e.rollout_prompt for e in eps] == [CANON, CANON]
    assert [(e.status, e.success) for e in eps] == [("labelled", True), ("labelled", False)]
    assert [lab.source for lab in store.labels(eps[0].id)] == ["simulator"]
    # What the supervisor judges by: the loop's N on the task row, the prompts' bootstrap counts.
    assert store.task_state(TASK).rollouts_per_prompt == 2
    [canon] = store.prompts(TASK, "canonical", stage="bootstrap")
    assert (canon.n_episodes, canon.success_rate) == (2, 0.5)
    # The supervisor proposes two candidates: each gets N = 2 rollouts, fewest-first.
    a = store.add_prompt(TASK, "drop the green box into the bowl")
    b = store.add_prompt(TASK, "lift the green container and place it in the bowl")
    _until(lambda: [p.n_episodes for p in store.prompts(TASK, "candidate", stage="bootstrap")] == [2, 2])
    loop.stop()
    t.join(5)
    assert not t.is_alive()
    ran = [e.prompt_id for e in store.episodes()][2:]
    assert ran == [a.id, b.id, a.id, b.id]
    assert [c["seed"] for c in actor.calls] == [s for _, s in robot.resets]  # reset before each episode
    assert all(task == TASK for task, _ in robot.resets)
    assert store.prompt(a.id).n_episodes == 2 and store.metrics(f"{TASK}/canonical_success")
    assert _phase(store) == "stopped"


def test_operator_mode_waits_for_start_and_label(store: Store) -> None:
    robot, actor = FakeRobot(), FakeActor()
    loop = EpisodeLoop(store, robot, actor, _settings(auto_start=False, auto_label=False, max_episodes=1))
    t = _run_in_thread(loop)
    _until(lambda: _phase(store) == "awaiting_start")
    time.sleep(0.1)
    assert store.episodes() == [] and actor.calls == []  # nothing moves before the operator says so
    assert len(robot.resets) == 1  # home / scene re-laid while the operator resets the scene
    store.add_intent(StartEpisode())
    _until(lambda: _phase(store) == "awaiting_label")
    [ep] = store.episodes()
    assert ep.status == "awaiting_label" and ep.video_paths
    store.add_label(ep.id, True, source="operator")
    t.join(5)
    assert not t.is_alive() and store.episode(ep.id).success is True


def test_operator_abort_marks_episode_aborted(store: Store) -> None:
    actor = FakeActor(chunk_time_s=0.05, n_chunks=200)
    loop = EpisodeLoop(store, FakeRobot(), actor, _settings(max_episodes=1, max_chunks=200))
    t = _run_in_thread(loop)
    actor.started.wait(5)
    store.add_intent(AbortEpisode())
    t.join(10)
    [ep] = store.episodes()
    assert ep.status == "aborted" and "operator aborted" in ep.abort_reason


def test_robot_errors_abort_the_episode_and_the_loop_goes_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    robot, actor = FakeRobot(), FakeActor()
    actor.fail_next = RuntimeError("e-stop latched during the episode: operator")
    robot.fail_resets = 0
    loop = EpisodeLoop(store, robot, actor, _settings(max_episodes=2))
    loop.run()
    first, second = store.episodes()
    assert first.status == "aborted" and "e-stop latched" in first.abort_reason
    assert second.status == "labelled"
    robot.fail_resets = 1  # a failing reset creates no episode at all
    published: list[str] = []
    set_state = store.set_service_state

    def spy(name: str, state: dict[str, Any]) -> None:
        published.append(state.get("last_error", ""))
        set_state(name, state)

    monkeypatch.setattr(store, "set_service_state", spy)
    loop2 = EpisodeLoop(store, robot, actor, _settings(max_episodes=1))
    loop2.run()
    assert len(store.episodes()) == 3 and any("reset failed" in e for e in published)
    # Fixed by the next reset that worked: the page no longer shows it.
    assert loop2.last_error == "" and store.service_states()["loop"].state["last_error"] == ""


def test_recover_aborts_running_and_finishes_pending_labels(store: Store, tmp_path: Any) -> None:
    store.ensure_task(TASK, CANON)
    pid = store.prompts(TASK)[0].id
    left_running = store.create_episode(TASK, pid, 0, "bootstrap").id
    loop = EpisodeLoop(store, FakeRobot(), FakeActor(), _settings(max_episodes=0, auto_label=False))
    t = _run_in_thread(loop)
    t.join(5)
    e = store.episode(left_running)
    assert e.status == "aborted" and "interrupted" in e.abort_reason


@pytest.fixture
def rl_store(store: Store) -> Store:
    store.ensure_task(TASK, CANON)
    store.set_task_state(TASK, stage="rl", alpha=0.5, ema_success=0.25)
    for text in ("drop the green box into the bowl", "place the green container inside the bowl"):
        store.set_prompt_status(store.add_prompt(TASK, text).id, "pool")
    return store


def test_rl_stage_ppo_in_background_and_weight_swap(rl_store: Store) -> None:
    store = rl_store
    trainer = FakeTrainer(update_time_s=0.3)
    saved: list[TrainedVersion] = []

    def save(new: TrainedVersion) -> str:
        saved.append(new)
        store.add_checkpoint(new.version, f"/ck/{new.version}", new.metrics, new.trained_through_episode_id)
        return f"/ck/{new.version}"

    actor = FakeActor(outcomes=lambda i: i % 3 == 0, chunk_time_s=0.02)
    loop = EpisodeLoop(
        store,
        FakeRobot(),
        actor,
        _settings(batch_size=4, max_episodes=10),
        trainer=BackgroundTrainer(trainer, save),
    )
    loop.run()
    eps = store.episodes()
    assert len(eps) == 10 and all(e.stage == "rl" for e in eps)
    assert {e.rollout_prompt for e in eps} <= {p.text for p in store.prompts(TASK)}
    # First batch = the first 4 labelled episodes, reward = label.
    first = trainer.batches[0]
    assert [int(ef.episode_id) for ef, _ in first] == [e.id for e in eps[:4]]
    assert [r for _, r in first] == [1.0 if e.success else 0.0 for e in eps[:4]]
    # The update ran while episodes continued (never stopping the robot); its weights came in
    # between episodes and later episodes carry the new version.
    assert actor.policies[0] == "policy-after-update-1"
    assert eps[4].policy_version == 0 and eps[-1].policy_version >= 1
    assert saved[0].version == 1 and saved[0].trained_through_episode_id == eps[3].id
    st = store.task_state(TASK)
    assert st.iteration >= 1 and 0.05 <= st.alpha <= 1.0
    assert [s for s, _, _ in store.metrics("ppo/pg_loss")][:1] == [1]
    assert store.metrics("ppo/explained_variance") == []  # NaN diagnostics are not stored


def test_failed_update_keeps_old_weights(rl_store: Store) -> None:
    loop = EpisodeLoop(
        rl_store,
        FakeRobot(),
        FakeActor(),
        _settings(batch_size=2, max_episodes=5),
        trainer=BackgroundTrainer(FakeTrainer(fail=True), lambda _new: ""),
    )
    loop.run()
    assert all(e.policy_version == 0 for e in rl_store.episodes())
    assert "loss is NaN" in loop.last_error


def test_entering_rl_starts_alpha_from_canonical_success(store: Store) -> None:
    actor = FakeActor(outcomes=lambda i: i == 0)  # canonical baseline: 1 success in 4
    loop = EpisodeLoop(store, FakeRobot(), actor, _settings(rollouts_per_prompt=4, max_episodes=4))
    loop.run()
    assert store.prompts(TASK, "canonical")[0].success_rate == 0.25
    store.set_prompt_status(store.add_prompt(TASK, "drop the green box into the bowl").id, "pool")
    store.set_task_state(TASK, stage="rl")  # what the supervisor does
    EpisodeLoop(store, FakeRobot(), actor, _settings(max_episodes=1)).run()
    st = store.task_state(TASK)
    assert st.ema_success == 0.25 and st.alpha == pytest.approx(0.5)  # 0.25 / c, c = 0.5
    assert store.episodes()[-1].stage == "rl"


def test_heartbeat_stays_fresh_during_a_long_episode(store: Store) -> None:
    # A 4 s episode; the heartbeat (every 0.1 s) must move the row's time on while it runs. Polled
    # rather than slept on, so a loaded machine delays the check instead of failing it.
    actor = FakeActor(chunk_time_s=0.1, n_chunks=40)
    loop = EpisodeLoop(
        store, FakeRobot(), actor, _settings(max_episodes=1, max_chunks=40, heartbeat_period_s=0.1)
    )
    t = _run_in_thread(loop)
    _until(lambda: _phase(store) == "running")
    first = store.service_states()["loop"].updated_at

    def refreshed_while_running() -> bool:
        row = store.service_states()["loop"]
        assert row.state["phase"] == "running", "the episode ended before the heartbeat was seen"
        return (row.updated_at - first).total_seconds() >= 0.3

    _until(refreshed_while_running, timeout_s=3.0)
    store.add_intent(AbortEpisode())  # seen; no need to sit through the rest
    t.join(20)
    assert _phase(store) == "stopped"


def test_ppo_stats_report_how_stale_each_batch_is(rl_store: Store) -> None:
    store = rl_store
    trainer = FakeTrainer(update_time_s=0.3)  # episodes go on (with the old weights) while it runs
    saved: dict[int, dict[str, float]] = {}

    def save(new: TrainedVersion) -> str:
        saved[new.version] = new.metrics
        return f"/ck/{new.version}"

    actor = FakeActor(chunk_time_s=0.02)
    settings = _settings(batch_size=4, max_episodes=16)
    loop = EpisodeLoop(store, FakeRobot(), actor, settings, trainer=BackgroundTrainer(trainer, save))
    loop.run()
    loop.finish_training(5)
    rows = {e.id: e for e in store.episodes()}
    assert len(trainer.batches) >= 2
    for version, batch in enumerate(trainer.batches, start=1):
        # the update to `version` starts from the weights of version - 1
        lags = [version - 1 - rows[int(ef.episode_id)].policy_version for ef, _ in batch]
        stats = saved[version]
        assert stats["stale_lag_max"] == max(lags)
        assert stats["stale_lag_mean"] == pytest.approx(sum(lags) / len(lags))
        assert stats["stale_share"] == pytest.approx(sum(lag > 0 for lag in lags) / len(lags))
    assert saved[1]["stale_lag_max"] == 0  # the first batch is on-policy
    # the second batch was collected while the first update ran: by version 0, trained from 1
    assert saved[2]["stale_lag_max"] >= 1
    assert [v for _, v, _ in store.metrics("ppo/stale_lag_max")][:2] == [0.0, saved[2]["stale_lag_max"]]


def test_staleness_from_the_episode_source() -> None:
    from msgspec.structs import replace

    from learner.loop.training import episode_policy_version, staleness_stats
    from pde_contract.episodes import EpisodeFile
    from tests.storage.factories import make_episode_file

    def ep(source: str) -> EpisodeFile:
        return replace(make_episode_file(1, TASK, n_chunks=1), source=source)

    assert episode_policy_version(ep("policy:7"), fallback=3) == 7
    assert episode_policy_version(ep("policy:unknown"), fallback=3) == 3
    assert episode_policy_version(ep("expert"), fallback=3) == 3
    stats = staleness_stats([5, 5, 4, 2], trained_version=5)
    assert stats == {
        "stale_lag_max": 3.0,
        "stale_lag_mean": pytest.approx(1.0),
        "stale_share": 0.5,
        "stale_oldest_version": 2.0,
    }
    assert staleness_stats([], 5) == {}


def test_alpha_is_updated_from_the_canonical_window_when_a_batch_has_no_canonical_episode(
    store: Store,
) -> None:
    actor = FakeActor(outcomes=lambda i: i == 0)  # canonical baseline: 1 success in 4
    EpisodeLoop(store, FakeRobot(), actor, _settings(rollouts_per_prompt=4, max_episodes=4)).run()
    pool = store.add_prompt(TASK, "drop the green box into the bowl")
    store.set_prompt_status(pool.id, "pool")
    store.set_task_state(TASK, stage="rl")
    # an explicit start: s_bar_0 = 1 (alpha 1), not the bootstrap rate
    loop = EpisodeLoop(store, FakeRobot(), actor, _settings(ema_start=1.0, alpha_window=16))
    loop._init_rl_alpha()
    assert store.task_state(TASK).ema_success == 1.0 and store.task_state(TASK).alpha == 1.0
    assert [v for _, v, _ in store.metrics(f"{TASK}/ema_start")] == [1.0]
    batch = [store.create_episode(TASK, pool.id, 0, "rl") for _ in range(4)]  # no canonical episode
    loop._update_alpha(batch)
    st = store.task_state(TASK)
    # s_t = 1/4 over the canonical prompt's window (its 4 labelled episodes), folded in with beta .3
    assert st.ema_success == pytest.approx(0.3 * 0.25 + 0.7 * 1.0) and st.iteration == 1
    assert [v for _, v, _ in store.metrics(f"{TASK}/alpha_window_success")] == [0.25]
    assert [v for _, v, _ in store.metrics(f"{TASK}/alpha_window_episodes")] == [4.0]


def test_a_finished_update_keeps_the_trainer_busy_until_its_result_is_taken() -> None:
    """Otherwise the loop could start the next update before swapping in this one's weights, and
    both updates would be labelled with the same version."""
    trainer = BackgroundTrainer(FakeTrainer(update_time_s=0.0), lambda _new: "")
    trainer.start([], [1], 1)
    trainer.join(5)
    assert trainer.busy, "a result is waiting: no new update may start"
    with pytest.raises(RuntimeError, match="already running"):
        trainer.start([], [2], 2)
    result = trainer.poll()
    assert result is not None and result.version == 1
    assert not trainer.busy


def test_the_loop_writes_its_n_on_each_task_for_the_supervisor(store: Store) -> None:
    EpisodeLoop(store, FakeRobot(), FakeActor(), _settings(rollouts_per_prompt=3)).recover()
    assert store.task_state(TASK).rollouts_per_prompt == 3


def test_the_alpha_schedule_has_one_home() -> None:
    # The loop's defaults are AlphaSchedule's, and the loop builds its schedule from its settings.
    from learner.mixture import AlphaSchedule

    default, fields = AlphaSchedule(), LoopSettings.model_fields
    assert [fields[k].default for k in ("beta", "consolidation_target", "alpha_min", "alpha_window")] == [
        default.beta,
        default.consolidation_target,
        default.alpha_min,
        default.window,
    ]
    s = _settings(beta=0.5, consolidation_target=0.4, alpha_min=0.1, alpha_window=4).alpha_schedule(0.2)
    assert (s.beta, s.consolidation_target, s.alpha_min, s.window, s.ema_success) == (0.5, 0.4, 0.1, 4, 0.2)
    assert s.alpha == 0.5  # 0.2 / 0.4


def _wait_for(cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_robot_server_restart_while_waiting_for_start_resets_again(store: Store) -> None:
    robot = FakeRestartingRobot()
    robot.started_at -= 100.0  # up for a while
    loop = EpisodeLoop(store, robot, FakeActor(), _settings(auto_start=False, max_episodes=1))
    t = _run_in_thread(loop)
    _wait_for(lambda: _phase(store) == "awaiting_start")
    robot.restart()
    refused = store.add_intent(StartEpisode())
    _wait_for(lambda: len(robot.resets) == 2)  # reset again, no episode started on the old reset
    assert store.episodes() == []
    # The page reads what became of its Start from the loop's state: refused, and why.
    last = store.service_states()["loop"].state["last_start"]
    assert last["intent_id"] == refused.id and "restarted" in last["refused"]
    _wait_for(lambda: _phase(store) == "awaiting_start")
    started = store.add_intent(StartEpisode())
    t.join(10)
    [ep] = store.episodes()
    assert ep.status == "labelled"
    last = store.service_states()["loop"].state["last_start"]
    assert last == {"intent_id": started.id, "episode_id": ep.id}


def test_start_while_the_estop_is_latched_is_refused_not_run(store: Store) -> None:
    robot = FakeRestartingRobot()
    loop = EpisodeLoop(store, robot, FakeActor(), _settings(auto_start=False, max_episodes=1))
    t = _run_in_thread(loop)
    _wait_for(lambda: _phase(store) == "awaiting_start")
    robot.estopped = True  # latched after the reset, before the operator's Start
    refused = store.add_intent(StartEpisode())
    _wait_for(lambda: store.service_states()["loop"].state.get("last_start") is not None)
    last = store.service_states()["loop"].state["last_start"]
    assert last["intent_id"] == refused.id and "e-stop latched" in last["refused"]
    assert store.episodes() == []
    robot.estopped = False
    _wait_for(lambda: _phase(store) == "awaiting_start")
    store.add_intent(StartEpisode())
    t.join(10)
    assert [e.status for e in store.episodes()] == ["labelled"]


# --- the settings where a simulated benchmark differs from a lab ------------------------------------


def test_without_prompt_search_the_task_goes_straight_to_rl_on_the_canonical_prompt(store: Store) -> None:
    trainer = FakeTrainer()
    loop = EpisodeLoop(
        store,
        FakeRobot(),
        FakeActor(),
        _settings(prompt_search=False, batch_size=3, max_episodes=6),
        trainer=BackgroundTrainer(trainer, lambda _new: ""),
    )
    loop.run()  # no supervisor: it would have nothing to do
    loop.finish_training(5)
    eps = store.episodes()
    assert [(e.stage, e.rollout_prompt) for e in eps] == [("rl", CANON)] * 6
    assert [p.status for p in store.prompts(TASK)] == ["canonical"]
    assert [len(b) for b in trainer.batches] == [3, 3]


def test_synchronous_updates_swap_each_update_in_before_the_next_episode(rl_store: Store) -> None:
    actor = FakeActor()
    loop = EpisodeLoop(
        rl_store,
        FakeRobot(),
        actor,
        _settings(synchronous_updates=True, batch_size=2, max_episodes=6),
        trainer=BackgroundTrainer(FakeTrainer(update_time_s=0.2), lambda _new: ""),
    )
    loop.run()
    # Every batch is on-policy: episodes 2k, 2k+1 ran with version k, whatever the update's time.
    assert [e.policy_version for e in rl_store.episodes()] == [0, 0, 1, 1, 2, 2]
    assert actor.policies == ["policy-after-update-1", "policy-after-update-2", "policy-after-update-3"]


def test_rollouts_per_scene_lays_each_scene_out_k_times(rl_store: Store) -> None:
    robot = FakeRobot()
    EpisodeLoop(rl_store, robot, FakeActor(), _settings(rollouts_per_scene=3, max_episodes=7)).run()
    seeds = [s for _, s in robot.resets]
    assert seeds[0] == seeds[1] == seeds[2] != seeds[3] == seeds[4] == seeds[5] != seeds[6]
    assert [e.seed for e in rl_store.episodes()] == seeds
    # A lab's default: a fresh scene every episode.
    robot = FakeRobot()
    EpisodeLoop(rl_store, robot, FakeActor(), _settings(max_episodes=4)).run()
    assert len({s for _, s in robot.resets}) == 4


def test_a_rounds_candidates_are_rolled_out_once_the_supervisor_has_written_its_iteration(
    store: Store,
) -> None:
    loop = EpisodeLoop(store, FakeRobot(), FakeActor(), _settings(max_episodes=2))
    loop.run()  # the canonical baseline (N = 2)
    first = store.add_prompt(TASK, "drop the green box into the bowl", iteration=1)
    from learner.loop.schedule import choose_next

    assert choose_next(store, [TASK], 2, loop.rng) is None  # round 1 is still being written
    second = store.add_prompt(TASK, "lift the green container into the bowl", iteration=1)
    store.set_task_state(TASK, iteration=1)  # the supervisor, after the round's last candidate
    EpisodeLoop(store, FakeRobot(), FakeActor(), _settings(max_episodes=4)).run()
    assert [e.prompt_id for e in store.episodes()][2:] == [first.id, second.id, first.id, second.id]


def test_relabel_trains_the_first_batch_on_the_searchs_successes_under_the_canonical_prompt(
    store: Store,
) -> None:
    wins = {1, 3, 4}  # episode indices: a canonical success, then candidate a and b successes
    actor = FakeActor(outcomes=lambda i: i in wins)
    EpisodeLoop(store, FakeRobot(), actor, _settings(max_episodes=2)).run()  # canonical baseline
    for text in ("drop the green box into the bowl", "set the green container into the bowl"):
        store.add_prompt(TASK, text)
    EpisodeLoop(store, FakeRobot(), actor, _settings(max_episodes=4)).run()  # a, b, a, b
    search = store.episodes()
    relabel_ids = [e.id for e in search if e.success and e.rollout_prompt != CANON]
    assert len(relabel_ids) == 2  # the canonical baseline's success is no search success
    store.set_task_state(TASK, stage="rl")  # what the supervisor does (pool or not: alpha is 1)
    trainer = FakeTrainer()
    settings = _settings(
        relabel_search_successes=True,
        alpha_min=1.0,
        ppo={"ratio_variant": "plain"},
        batch_size=2,
        max_episodes=4,
    )
    loop = EpisodeLoop(
        store, FakeRobot(), actor, settings, trainer=BackgroundTrainer(trainer, lambda _new: "")
    )
    loop.run()
    loop.finish_training(5)
    rl = [e for e in store.episodes() if e.stage == "rl"]
    assert [e.rollout_prompt for e in rl] == [CANON] * 4  # alpha pinned at 1
    first, second = trainer.batches
    assert [int(f.episode_id) for f, _ in first] == [e.id for e in rl[:2]] + relabel_ids
    assert [r for _, r in first][2:] == [1.0, 1.0]
    assert all(f.rollout_prompt == CANON for f, _ in first[2:])  # relabelled with the canonical prompt
    assert all(
        c.trace is not None and c.trace.log_prob_elements is None for f, _ in first[2:] for c in f.chunks
    )
    assert [int(f.episode_id) for f, _ in second] == [e.id for e in rl[2:]]  # once, in the first update
