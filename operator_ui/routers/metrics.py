"""Curves over time: canonical-prompt and per-prompt success (recomputed from the labels, so a
relabel or a discard moves them), alpha and pool size per task, with a mark per PPO update, and
success per policy version; any metric by name."""

from __future__ import annotations

import bisect
from collections import defaultdict, deque

from fastapi import APIRouter

from operator_ui.deps import StoreDep
from operator_ui.schemas import CurvesOut, MetricPointOut, PPOUpdateMark, VersionSuccess
from pde_contract.run_metrics import TaskCurve, task_metric
from pde_storage import CANONICAL_SUCCESS_WINDOW, CheckpointRow
from pde_storage.protocols import EpisodeReader

router = APIRouter(prefix="/api", tags=["metrics"])
LOOP_CURVES = (TaskCurve.ALPHA, TaskCurve.POOL_SIZE)  # recorded by the loop, x = labelled episodes so far


def success_curve(store: EpisodeReader, task: str, prompt_id: int, window: int | None) -> list[list[float]]:
    """[episode id, success rate over the last ``window`` labelled episodes of the prompt (all of
    them when None)] after each labelled episode."""
    recent: deque[bool] = deque(maxlen=window)
    points = []
    for e in store.episodes(task=task, status="labelled", prompt_id=prompt_id):
        recent.append(bool(e.success))
        points.append([float(e.id), sum(recent) / len(recent)])
    return points


def ppo_update_marks(store: EpisodeReader, checkpoints: list[CheckpointRow]) -> list[PPOUpdateMark]:
    """One mark per PPO update (a checkpoint after version 0 whose metrics say which episodes its
    batch reached), placed at that episode on the episode-# plots and at the number of labelled
    episodes by then on the α / pool plots (whose x the loop records as labelled episodes)."""
    labelled_ids = sorted(e.id for e in store.episodes(status="labelled"))
    marks = []
    for c in checkpoints:
        through = c.trained_through_episode_id
        if c.version > 0 and isinstance(through, int | float):
            n = bisect.bisect_right(labelled_ids, int(through))
            marks.append(
                PPOUpdateMark(version=c.version, trained_through_episode_id=int(through), labelled_episodes=n)
            )
    return marks


def success_by_version(store: EpisodeReader, task: str) -> list[VersionSuccess]:
    """Success rate of the task's labelled episodes per policy version that ran them."""
    by: dict[int, list[bool]] = defaultdict(list)
    for e in store.episodes(task=task, status="labelled"):
        by[e.policy_version].append(bool(e.success))
    return [
        VersionSuccess(version=v, n_episodes=len(o), success_rate=sum(o) / len(o))
        for v, o in sorted(by.items())
    ]


@router.get("/tasks/{task}/curves")
def task_curves(task: str, store: StoreDep) -> CurvesOut:
    canon = store.prompts(task, "canonical")[0]  # 404 for an unknown task
    loop_curves = {c: [[float(s), v] for s, v, _ in store.metrics(task_metric(task, c))] for c in LOOP_CURVES}
    return CurvesOut(
        canonical_success=success_curve(store, task, canon.id, CANONICAL_SUCCESS_WINDOW),
        canonical_window=CANONICAL_SUCCESS_WINDOW,
        prompt_success={
            p.text: success_curve(store, task, p.id, None)
            for p in store.prompts(task, ("pool", "candidate", "rejected"))
            if p.n_episodes
        },
        alpha=loop_curves[TaskCurve.ALPHA],
        pool_size=loop_curves[TaskCurve.POOL_SIZE],
        ppo_updates=ppo_update_marks(store, store.checkpoints()),
        success_by_version=success_by_version(store, task),
    )


@router.get("/metrics")
def metric_names(store: StoreDep) -> list[str]:
    return store.metric_names()


@router.get("/metrics/{name:path}")
def metric(name: str, store: StoreDep) -> list[MetricPointOut]:
    return [MetricPointOut(step=s, value=v, time=t) for s, v, t in store.metrics(name)]
