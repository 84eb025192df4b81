"""What the operator needs at a glance: the loop's phase, the current task, prompt and episode, and
the one episode that awaits the operator's label."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from fastapi import APIRouter

from operator_ui.deps import RobotDep, SettingsDep, StoreDep
from operator_ui.robot_link import LiveView
from operator_ui.routers.loop import loop_state, person_source
from operator_ui.schemas import EpisodeOut, LoopOut, PracticeEpisodeOut, RunningOut, StateOut, VLMOut
from pde_contract.records import EpisodeStatus
from pde_contract.service_state import SUPERVISOR_ROW, LoopPhase, LoopState, SupervisorState, encode_state
from pde_storage import EpisodeRow
from pde_storage.protocols import EpisodeReader
from pde_storage.service_states import read_state

router = APIRouter(prefix="/api", tags=["state"])


def awaiting_label(store: EpisodeReader, loop: LoopState | None) -> EpisodeRow | None:
    """The episode the page asks the operator to label: the one the loop waits for, else the
    oldest unlabelled one (the order the loop asks for them after a restart)."""
    if loop is not None and loop.phase == LoopPhase.AWAITING_LABEL and loop.episode_id is not None:
        ep = store.episode(loop.episode_id)
        if ep.status == EpisodeStatus.AWAITING_LABEL:
            return ep
    waiting = store.episodes(status=EpisodeStatus.AWAITING_LABEL, limit=1)
    return waiting[0] if waiting else None


def practice_episode(loop: LoopState, view: LiveView) -> tuple[PracticeEpisodeOut, RunningOut | None]:
    """The loop's practice episode, and while it runs what the page shows of a running one: no
    row exists (nothing of it is stored), so what there is comes from the loop's state."""
    assert loop.episode_id is not None
    current = PracticeEpisodeOut(
        id=loop.episode_id, task=loop.task, rollout_prompt=loop.prompt, canonical_prompt=loop.canonical_prompt
    )
    if loop.phase != LoopPhase.RUNNING:
        return current, None
    return current, RunningOut(
        episode_id=loop.episode_id,
        elapsed_s=time.time() - loop.started_at_s if loop.started_at_s is not None else 0.0,
        chunks=view.episode_chunks if view.chunk_episode_id == str(loop.episode_id) else None,
        practice=True,
    )


@router.get("/state")
def state(store: StoreDep, settings: SettingsDep, robot: RobotDep) -> StateOut:
    loop, age, alive = loop_state(store, settings.service_stale_s)
    # Only the loop's own episode: "the newest unlabelled one" here once made the page show one
    # episode while the label box asked about another.
    current = None
    practice = None
    running = None
    if alive and loop is not None and loop.practice and loop.episode_id is not None:
        practice, running = practice_episode(loop, robot.view())
    elif alive and loop is not None and loop.episode_id is not None:
        ep = store.episode(loop.episode_id)
        current = EpisodeOut.of(ep)
        if ep.status == EpisodeStatus.RUNNING:
            # Chunks: counted by the page's server from the robot server's observations of this
            # episode (the loop writes them at the end); None when it saw none of them.
            view = robot.view()
            running = RunningOut(
                episode_id=ep.id,
                elapsed_s=(datetime.now(UTC) - ep.created_at).total_seconds(),
                chunks=view.episode_chunks if view.chunk_episode_id == str(ep.id) else None,
            )
    label_me = awaiting_label(store, loop)
    sup, sup_updated_at = read_state(store, SUPERVISOR_ROW, SupervisorState)
    sup_age_s = (datetime.now(UTC) - sup_updated_at).total_seconds() if sup_updated_at else None
    sup_alive = sup_age_s is not None and sup_age_s <= settings.service_stale_s
    return StateOut(
        loop=LoopOut.model_validate(
            {
                **(encode_state(loop) if loop else {}),
                "age_s": age,
                "alive": alive,
                "person": person_source(store, loop),
            }
        ),
        episode=current,
        practice_episode=practice,
        running=running,
        awaiting_label=EpisodeOut.of(label_me) if label_me else None,
        frame_stale_s=settings.frame_stale_s,
        label_undo_s=settings.label_undo_s,
        vlm=VLMOut(
            supervisor_running=sup_alive,
            available=sup.vlm_available if sup_alive and sup else False,
            proposer=sup.proposer if sup else "",
        ),
    )
