"""Operator intents for the episode loop: "scene reset — start episode" and abort."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Request

from operator_ui.deps import RobotDep, SettingsDep, StoreDep, TokenDep
from operator_ui.schemas import AbortOut, EndIn, EndOut, StartOut, TakeControlOut
from pde_contract.intents import AbortEpisode, EndEpisode, IntentBase, StartEpisode, TakeControl
from pde_contract.service_state import LOOP_ROW, TAKEOVER_ROW, LoopPhase, LoopState, TakeoverState
from pde_storage.protocols import IntentSender, ServiceStates
from pde_storage.service_states import read_state, run_control

router = APIRouter(prefix="/api/loop", tags=["loop"])


def loop_state(store: ServiceStates, stale_s: float) -> tuple[LoopState | None, float | None, bool]:
    """The loop's state (None: it never wrote one this version reads), its age and whether the
    loop is alive (fresh and not stopped)."""
    state, updated_at = read_state(store, LOOP_ROW, LoopState)
    if state is None or updated_at is None:
        return None, None, False
    age = (datetime.now(UTC) - updated_at).total_seconds()
    return state, age, age <= stale_s and state.phase != LoopPhase.STOPPED


def phase_name(state: LoopState | None) -> str | None:
    """For messages: the phase as its plain string."""
    return str(state.phase) if state else None


def running_episode(store: StoreDep, stale_s: float) -> tuple[LoopState, int]:
    """The loop's state and its episode while it runs one; else a 409."""
    state, _, alive = loop_state(store, stale_s)
    if not alive or state is None or state.phase != LoopPhase.RUNNING or state.episode_id is None:
        raise HTTPException(409, f"no episode is running (loop: {phase_name(state)!r}); nothing was changed")
    return state, state.episode_id


def refuse_pending(store: IntentSender, kind: type[IntentBase], what: str) -> None:
    """One request of a kind at a time: a second click while the loop has not taken the first."""
    if store.pending_intents(kind):
        raise HTTPException(409, f"{what} is already pending; nothing was changed")


PRACTICE_REFUSAL = (
    "practice mode: nothing is recorded; leave practice (button 'end practice') first; nothing was changed"
)


def refuse_in_practice(store: ServiceStates) -> None:
    """Whatever would record something (a start, a label, a discard) is refused in practice mode."""
    if run_control(store).practice:
        raise HTTPException(409, PRACTICE_REFUSAL)


@router.post("/start", dependencies=[TokenDep])
def start_episode(request: Request, store: StoreDep, settings: SettingsDep, robot: RobotDep) -> StartOut:
    """Only while the loop waits for it, the run is not paused and the E-STOP is not latched: a
    click at another time must not start a later episode, nor one the robot aborts at once. In
    practice mode it starts a practice episode (stored nowhere), once the loop waits for one. The
    answer says the intent was queued; what the loop did with it comes back in its state
    (``last_start``), which the page waits for."""
    state, _, alive = loop_state(store, settings.service_stale_s)
    if not alive:
        raise HTTPException(
            409, "the episode loop is not running (start `pde learner run`); nothing was changed"
        )
    if state is None or state.phase != LoopPhase.AWAITING_START:
        raise HTTPException(
            409, f"the loop is not waiting for a start (it is {phase_name(state)!r}); nothing was changed"
        )
    practice = run_control(store).practice
    if state.practice != practice:
        raise HTTPException(
            409,
            f"practice was {'switched on' if practice else 'ended'}: the loop resets the scene for a "
            f"{'practice' if practice else 'recorded'} episode first; press Start when it waits again; "
            "nothing was changed",
        )
    if request.app.state.record.busy:  # the page's record session (routers/teleop.py)
        raise HTTPException(
            409, "a take is being recorded on the page: keep or discard it first; nothing was changed"
        )
    if run_control(store).paused:
        raise HTTPException(409, "the run is paused: press 'resume run' first; nothing was changed")
    if robot.view().estopped:
        raise HTTPException(
            409,
            "the E-STOP is latched: when the area is clear, press 'release e-stop', then Start; "
            "nothing was changed",
        )
    refuse_pending(store, StartEpisode, "a start")
    row = store.add_intent(StartEpisode(task=state.task))
    return StartOut(intent_id=row.id, task=state.task, prompt=state.prompt)


@router.post("/abort", dependencies=[TokenDep])
def abort_episode(store: StoreDep, settings: SettingsDep) -> AbortOut:
    state, _, alive = loop_state(store, settings.service_stale_s)
    if not alive or state is None or state.phase != LoopPhase.RUNNING:
        raise HTTPException(409, f"no episode is running (loop: {phase_name(state)!r}); nothing was changed")
    row = store.add_intent(AbortEpisode(episode_id=state.episode_id))
    return AbortOut(intent_id=row.id, episode_id=state.episode_id)


@router.post("/end", dependencies=[TokenDep])
def end_episode(body: EndIn, store: StoreDep, settings: SettingsDep) -> EndOut:
    """End the running episode now and keep it (an abort throws it away): the robot holds, the
    episode is stored and awaits its label; the page then sends ``success`` as the operator's label.
    Taken by the loop's actor wrapper (learner/loop/takeover.py) within a chunk's stop check."""
    episode_id = running_episode(store, settings.service_stale_s)[1]
    row = store.add_intent(EndEpisode(episode_id=episode_id, success=body.success))
    return EndOut(intent_id=row.id, episode_id=episode_id, success=body.success)


def person_source(store: ServiceStates, loop: LoopState | None) -> str | None:
    """The name of the running loop's person source (who may take over, PDE_TELEOP_PERSON), or None:
    published by learner/loop/takeover.py; a row from another loop process does not count."""
    takeover, _ = read_state(store, TAKEOVER_ROW, TakeoverState)
    if takeover is None or loop is None or not loop.pid or takeover.pid != loop.pid:
        return None
    return takeover.person or None


@router.post("/take-control", dependencies=[TokenDep])
def take_control(store: StoreDep, settings: SettingsDep) -> TakeControlOut:
    """A person takes over the running episode now: the loop's person source drives until it
    ends the take, then the policy goes on (learner/actor.py). Only with a person source."""
    state, episode_id = running_episode(store, settings.service_stale_s)
    person = person_source(store, state)
    if person is None:
        raise HTTPException(
            409,
            "no person source is configured for this run: restart `pde learner run` with "
            "PDE_TELEOP_PERSON=spacemouse or page (docs/teleop.md); nothing was changed",
        )
    refuse_pending(store, TakeControl, "a take-over")
    row = store.add_intent(TakeControl(episode_id=episode_id))
    return TakeControlOut(intent_id=row.id, episode_id=episode_id, person=person)
