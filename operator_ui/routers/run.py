"""Run progress for planning a day (stage, episodes today against the day's target, time per
episode and per cycle, episodes until the next PPO update counting the bootstrap, and the ETAs)
and the pause / practice switch the loop reads between episodes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime
from statistics import median

from fastapi import APIRouter

from operator_ui.deps import SettingsDep, StoreDep, TokenDep
from operator_ui.routers.loop import loop_state
from operator_ui.schemas import PauseIn, PauseOut, RunProgressOut
from pde_contract.records import EpisodeStatus, PromptStatus, Stage
from pde_contract.service_state import RUN_CONTROL_ROW, SUPERVISOR_ROW, RunControl, SupervisorState
from pde_storage.protocols import OperatorStore, ServiceStates, TaskReader
from pde_storage.service_states import read_state, run_control, write_state

router = APIRouter(prefix="/api/run", tags=["run"])
RECENT_EPISODES = 10  # time per episode and cycle time: medians over this many recent episodes


@dataclass(frozen=True)
class BootstrapBudget:
    """The supervisor's bootstrap settings the PPO ETA needs, as the supervisor publishes them in
    its state row (in compose they are another container's variables: the page's own environment
    would give numbers the supervisor does not use)."""

    iterations_t0: int
    candidates_k: int
    pool_min_m: int
    source: str


def bootstrap_budget(store: ServiceStates) -> BootstrapBudget | None:
    """None until a supervisor has published its pool rule."""
    sup, _ = read_state(store, SUPERVISOR_ROW, SupervisorState)
    if sup is None or None in (sup.iterations_t0, sup.candidates_k, sup.pool_min_m):
        return None
    assert sup.iterations_t0 is not None and sup.candidates_k is not None and sup.pool_min_m is not None
    return BootstrapBudget(sup.iterations_t0, sup.candidates_k, sup.pool_min_m, "the supervisor's")


def bootstrap_left(store: TaskReader, task: str, budget: BootstrapBudget) -> tuple[int, int] | None:
    """(fewest, most) episodes before ``task`` leaves the bootstrap: the rollouts its canonical
    prompt and current candidates still need, then whole rounds of K candidates x N rollouts, as
    few as fill the pool to M (every candidate admitted) or as many as the search budget T0 allows
    (none admitted). None until the loop has written N."""
    state = store.task_state(task)
    n = state.rollouts_per_prompt
    if n is None:
        return None
    prompts = store.prompts(task)
    now = sum(
        max(0, n - p.n_finished)
        for p in prompts
        if p.status in (PromptStatus.CANONICAL, PromptStatus.CANDIDATE)
    )
    rounds_left = max(0, budget.iterations_t0 - state.iteration)
    deficit = budget.pool_min_m - sum(
        p.status in (PromptStatus.POOL, PromptStatus.CANDIDATE) for p in prompts
    )
    fewest_rounds = min(rounds_left, max(0, -(-deficit // budget.candidates_k)))
    per_round = budget.candidates_k * n
    return now + fewest_rounds * per_round, now + rounds_left * per_round


def episodes_until_update(
    store: OperatorStore, tasks: list[str], rl_needed: int
) -> tuple[int, int | None, str]:
    """(fewest, most or None, why) episodes before the next PPO update: ``rl_needed`` labelled RL
    episodes, after the bootstrap when no task is in RL yet (the first task out of it gives the
    fewest; every task through its whole search budget the most)."""
    if not tasks or any(store.task_state(t).stage == Stage.RL for t in tasks):
        return rl_needed, None, f"{rl_needed} labelled RL episodes"
    budget = bootstrap_budget(store)
    if budget is None:
        return (
            rl_needed,
            None,
            f"the bootstrap (length unknown: no supervisor has published its T0, K, M), "
            f"then {rl_needed} RL episodes",
        )
    left = [b for t in tasks if (b := bootstrap_left(store, t, budget)) is not None]
    if len(left) < len(tasks):
        return (
            rl_needed,
            None,
            f"the bootstrap (length unknown: the loop has not written N), then {rl_needed} RL episodes",
        )
    fewest = min(lo for lo, _ in left)
    most = sum(hi for _, hi in left)
    why = (
        f"the bootstrap ({fewest}–{most} episodes: T0 {budget.iterations_t0}, K {budget.candidates_k}, "
        f"M {budget.pool_min_m}, {budget.source}), then {rl_needed} labelled RL episodes"
    )
    return fewest + rl_needed, most + rl_needed, why


@router.get("")
def progress(store: StoreDep, settings: SettingsDep) -> RunProgressOut:
    loop, _, alive = loop_state(store, settings.service_stale_s)
    control = run_control(store)
    midnight = datetime.now(UTC).astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
    recent = store.episodes(newest_first=True, limit=200)
    today = sum(1 for e in recent if e.created_at >= midnight)
    durations = [
        (e.finished_at - e.created_at).total_seconds()
        for e in recent[: RECENT_EPISODES * 3]
        if e.finished_at is not None and e.status != EpisodeStatus.ABORTED
    ][:RECENT_EPISODES]
    per_episode_s = median(durations) if durations else None
    # Start to start of consecutive episodes: the reset, the wait for Start and the label included.
    starts = [e.created_at for e in recent[: RECENT_EPISODES + 1]]
    gaps = [(a - b).total_seconds() for a, b in itertools.pairwise(starts)]
    cycle_s = median(gaps) if gaps else None
    until = loop.labels_until_update if alive and loop else None
    batch = loop.batch_size if loop else None
    rl_needed = until if until is not None else batch
    fewest = most = None
    update_why = ""
    if alive and rl_needed is not None and until is not None:
        tasks = [t.name for t in store.tasks()]
        fewest, most, update_why = episodes_until_update(store, tasks, rl_needed)
    target = settings.episodes_target or None
    return RunProgressOut(
        paused=control.paused,
        practice=control.practice,
        loop_phase=str(loop.phase) if alive and loop else "not running",
        stages={t.name: store.task_state(t.name).stage for t in store.tasks()},
        episodes_today=today,
        episodes_target=target,
        target_eta_s=max(0, target - today) * cycle_s if target and cycle_s else None,
        episode_s=per_episode_s,
        cycle_s=cycle_s,
        labels_until_update=until if isinstance(until, int) else None,
        update_episodes=fewest,
        update_episodes_max=most,
        update_eta_s=fewest * cycle_s if fewest is not None and cycle_s else None,
        update_eta_max_s=most * cycle_s if most is not None and cycle_s else None,
        update_why=update_why,
        training=bool(alive and loop and loop.training),
        auto_start=bool(loop and loop.auto_start),
        auto_label=bool(loop and loop.auto_label),
    )


@router.post("/pause", dependencies=[TokenDep])
def pause(body: PauseIn, store: StoreDep) -> PauseOut:
    """paused=true: the loop finishes the episode in hand and waits; false: it goes on.
    practice=true: the loop runs practice episodes (Start, the policy, take control, end now) and
    stores none of them; the page refuses labels and discards meanwhile. Not paused (a practice run
    is one that goes on, recording nothing)."""
    paused = body.paused and not body.practice
    write_state(store, RUN_CONTROL_ROW, RunControl(paused=paused, practice=body.practice, by="operator page"))
    return PauseOut(paused=paused, practice=body.practice)
