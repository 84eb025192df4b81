"""Tasks, their PDE state and prompt pools with success rates."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from operator_ui.deps import StoreDep
from operator_ui.schemas import prompt_json

router = APIRouter(prefix="/api/tasks", tags=["prompts"])


@router.get("")
def list_tasks(store: StoreDep) -> list[dict[str, Any]]:
    out = []
    for t in store.tasks():
        st = store.task_state(t.name)
        pool = store.prompts(t.name, "pool")
        out.append(
            {
                "name": t.name,
                "canonical_prompt": t.canonical_prompt,
                "stage": st.stage,
                "iteration": st.iteration,
                "alpha": st.alpha,
                "ema_success": st.ema_success,
                "pool_size": len(pool),
            }
        )
    return out


@router.get("/{task}/prompts")
def task_prompts(task: str, store: StoreDep) -> list[dict[str, Any]]:
    return [prompt_json(p) for p in store.prompts(task)]
