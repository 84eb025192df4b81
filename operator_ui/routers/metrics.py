"""Curves over time: canonical-prompt success, alpha and pool size per task; any metric by name."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from operator_ui.deps import StoreDep

router = APIRouter(prefix="/api", tags=["metrics"])
CURVES = ("canonical_success", "alpha", "pool_size")


@router.get("/tasks/{task}/curves")
def task_curves(task: str, store: StoreDep) -> dict[str, list[list[float]]]:
    store.task_state(task)  # 404 for an unknown task
    return {c: [[float(s), v] for s, v, _ in store.metrics(f"{task}/{c}")] for c in CURVES}


@router.get("/metrics")
def metric_names(store: StoreDep) -> list[str]:
    return store.metric_names()


@router.get("/metrics/{name:path}")
def metric(name: str, store: StoreDep) -> list[dict[str, Any]]:
    return [{"step": s, "value": v, "time": t.isoformat()} for s, v, t in store.metrics(name)]
