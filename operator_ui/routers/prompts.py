"""Tasks, their PDE state and prompt pools with success rates; a rejected prompt that a relabel
lifted to the admission threshold is flagged, and the operator may admit it while the pool is open."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from operator_ui.deps import RowId, SettingsDep, StoreDep, TokenDep
from operator_ui.schemas import PromptOut, ResetGuideOut, TaskOut
from pde_contract.records import PromptStatus, Stage
from pde_contract.service_state import SUPERVISOR_ROW, SupervisorState
from pde_storage import PromptRow
from pde_storage.protocols import ServiceStates
from pde_storage.service_states import read_state

router = APIRouter(prefix="/api", tags=["prompts"])


def supervisor_eta(store: ServiceStates) -> float | None:
    """The supervisor's admission threshold, when its published state carries it."""
    sup, _ = read_state(store, SUPERVISOR_ROW, SupervisorState)
    return sup.eta if sup else None


def rejudge_note(p: PromptRow | None, eta: float | None) -> str:
    """``p``: the prompt with the counts the pool rule judges by (over the bootstrap stage)."""
    if p is None or p.status != PromptStatus.REJECTED or eta is None:
        return ""
    if p.success_rate is None or p.success_rate < eta:
        return ""
    return (
        f"rejected, but its labels now give {p.n_success}/{p.n_episodes} = {p.success_rate:.0%} >= "
        f"eta {eta:.0%} (a relabel?): admit it to the pool if the labels are right"
    )


@router.get("/tasks")
def list_tasks(store: StoreDep) -> list[TaskOut]:
    out = []
    for t in store.tasks():
        st = store.task_state(t.name)
        pool = store.prompts(t.name, "pool")
        out.append(
            TaskOut(
                name=t.name,
                canonical_prompt=t.canonical_prompt,
                stage=st.stage,
                iteration=st.iteration,
                alpha=st.alpha,
                ema_success=st.ema_success,
                pool_size=len(pool),
            )
        )
    return out


@router.get("/tasks/{task}/prompts")
def task_prompts(task: str, store: StoreDep) -> list[PromptOut]:
    eta = supervisor_eta(store)
    judged = {p.id: p for p in store.prompts(task, "rejected", stage="bootstrap")}  # as the pool rule
    return [
        PromptOut.model_validate(p).model_copy(update={"rejudge": rejudge_note(judged.get(p.id), eta)})
        for p in store.prompts(task)
    ]


@router.post("/prompts/{prompt_id}/admit", dependencies=[TokenDep])
def admit_prompt(prompt_id: RowId, store: StoreDep) -> PromptOut:
    """The operator's override of a rejection, only while the task's pool is still open."""
    p = store.prompt(prompt_id)
    if p.status != PromptStatus.REJECTED:
        raise HTTPException(409, f"prompt {prompt_id} is {p.status}, not rejected; nothing was changed")
    if store.task_state(p.task).stage != Stage.BOOTSTRAP:
        raise HTTPException(409, f"task {p.task} is in RL: its pool is frozen; nothing was changed")
    return PromptOut.model_validate(store.set_prompt_status(prompt_id, PromptStatus.POOL))


@router.get("/tasks/{task}/reset-guide")
def reset_guide(task: str, store: StoreDep, settings: SettingsDep) -> ResetGuideOut:
    """How to reset the scene for ``task``: the lab's written steps (``reset_instructions`` of its
    entry in the tasks file, optional) and the start scene of the task's last ended episode (the
    first frame of its video)."""
    store.task_state(task)  # 404 for an unknown task
    spec = settings.catalogue.tasks.get(task)  # None: a task of an earlier tasks file
    ended = [
        e
        for e in store.episodes(task=task, status=("awaiting_label", "labelled"), newest_first=True, limit=1)
        if e.video_paths
    ]
    ref = ended[0] if ended else None
    cam = (
        None if ref is None else ("external" if "external" in ref.video_paths else sorted(ref.video_paths)[0])
    )
    return ResetGuideOut(
        instructions=spec.reset_instructions if spec else "",
        instructions_file=settings.tasks_file,
        reference_episode_id=ref.id if ref else None,
        reference_video=f"/api/episodes/{ref.id}/video/{cam}" if ref and cam else None,
    )
