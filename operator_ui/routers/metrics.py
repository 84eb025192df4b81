"""Curves over time: canonical-prompt and per-prompt success (recomputed from the labels, so a
relabel or a discard moves them), alpha and pool size per task; any metric by name."""

from __future__ import annotations

from collections import deque
from typing import Any

from fastapi import APIRouter

from operator_ui.deps import StoreDep
from operator_ui.schemas import CurvesOut
from pde_storage import CANONICAL_SUCCESS_WINDOW
from pde_storage.protocols import EpisodeReader

router = APIRouter(prefix="/api", tags=["metrics"])
LOOP_CURVES = ("alpha", "pool_size")  # recorded by the loop, x = labelled episodes so far


def success_curve(store: EpisodeReader, task: str, prompt_id: int, window: int | None) -> list[list[float]]:
    """[episode id, success rate over the last ``window`` labelled episodes of the prompt (all of
    them when None)] after each labelled episode."""
    recent: deque[bool] = deque(maxlen=window)
    points = []
    for e in store.episodes(task=task, status="labelled", prompt_id=prompt_id):
        recent.append(bool(e.success))
        points.append([float(e.id), sum(recent) / len(recent)])
    return points


@router.get("/tasks/{task}/curves")
def task_curves(task: str, store: StoreDep) -> CurvesOut:
    canon = store.prompts(task, "canonical")[0]  # 404 for an unknown task
    loop_curves = {c: [[float(s), v] for s, v, _ in store.metrics(f"{task}/{c}")] for c in LOOP_CURVES}
    return CurvesOut(
        canonical_success=success_curve(store, task, canon.id, CANONICAL_SUCCESS_WINDOW),
        canonical_window=CANONICAL_SUCCESS_WINDOW,
        prompt_success={
            p.text: success_curve(store, task, p.id, None)
            for p in store.prompts(task, ("pool", "candidate", "rejected"))
            if p.n_episodes
        },
        alpha=loop_curves["alpha"],
        pool_size=loop_curves["pool_size"],
    )


@router.get("/metrics")
def metric_names(store: StoreDep) -> list[str]:
    return store.metric_names()


@router.get("/metrics/{name:path}")
def metric(name: str, store: StoreDep) -> list[dict[str, Any]]:
    return [{"step": s, "value": v, "time": t.isoformat()} for s, v, t in store.metrics(name)]
