"""Tasks, their PDE state and prompt pools with success rates; a rejected prompt that a relabel
lifted to the admission threshold is flagged, and the operator may admit it while the pool is open."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from operator_ui.deps import StoreDep, TokenDep
from operator_ui.schemas import prompt_json
from pde_storage import PromptRow, Store

router = APIRouter(prefix="/api", tags=["prompts"])


def supervisor_eta(store: Store) -> float | None:
    """The supervisor's admission threshold, when its published state carries it."""
    row = store.service_states().get("supervisor")
    eta = row.state.get("eta") if row else None
    return float(eta) if isinstance(eta, int | float) else None


def rejudge_note(p: PromptRow, eta: float | None) -> str:
    if p.status != "rejected" or eta is None or p.success_rate is None or p.success_rate < eta:
        return ""
    return (
        f"rejected, but its labels now give {p.n_success}/{p.n_episodes} = {p.success_rate:.0%} >= "
        f"eta {eta:.0%} (a relabel?): admit it to the pool if the labels are right"
    )


@router.get("/tasks")
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


@router.get("/tasks/{task}/prompts")
def task_prompts(task: str, store: StoreDep) -> list[dict[str, Any]]:
    eta = supervisor_eta(store)
    return [{**prompt_json(p), "rejudge": rejudge_note(p, eta)} for p in store.prompts(task)]


@router.post("/prompts/{prompt_id}/admit", dependencies=[TokenDep])
def admit_prompt(prompt_id: int, store: StoreDep) -> dict[str, Any]:
    """The operator's override of a rejection, only while the task's pool is still open."""
    p = store.prompt(prompt_id)
    if p.status != "rejected":
        raise HTTPException(409, f"prompt {prompt_id} is {p.status}, not rejected; nothing was changed")
    if store.task_state(p.task).stage != "bootstrap":
        raise HTTPException(409, f"task {p.task} is in RL: its pool is frozen; nothing was changed")
    return prompt_json(store.set_prompt_status(prompt_id, "pool"))
