"""Teleoperation from the page (its keys and a gamepad) and `pde record` from the page.

``POST /api/teleop/command`` takes the page's input state while it holds control and hands it to
whoever drives with it: the page's record session (``operator_ui/record_session.py``, in this
process), else the running loop's page person (``PDE_TELEOP_PERSON=page``): then it goes into the
database row ``PAGE_TELEOP_ROW`` (``PageTeleopState``) that the loop's ``PageSource`` reads each tick
(learner/loop/takeover.py). Either way the rows run through the robot server's safety path, one
per control tick (teleop/recorder.py, learner/actor.py).
"""

from __future__ import annotations

import itertools
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse

from operator_ui.deps import RobotDep, SettingsDep, StoreDep, TokenDep
from operator_ui.record_session import RecordRefused, RecordSession
from operator_ui.routers.loop import loop_state, person_source
from operator_ui.routers.robot import arm_free
from operator_ui.schemas import (
    LastTakeOut,
    RecordOut,
    RecordResetIn,
    RecordSaveIn,
    RecordSaveOut,
    RecordStepOut,
    TaskCounts,
    TeleopCommandIn,
    TeleopCommandOut,
    TeleopOut,
)
from pde_contract.service_state import PAGE_TELEOP_ROW, LoopPhase, PageTeleopState
from pde_storage.protocols import ServiceStates
from pde_storage.service_states import write_state
from teleop.base import TeleopError
from teleop.page import PageCommand

router = APIRouter(prefix="/api", tags=["teleop"])
# Numbers the commands written for the loop: the loop's source takes a new number as "the page
# spoke now" on its own clock, so the two machines' clocks never mix (learner/loop/takeover.py).
# (with this process's own prefix: a restarted page server's numbers never repeat an earlier one's).
_WRITER = uuid.uuid4().hex[:8]
_written = itertools.count(1)


def get_record(request: Request) -> RecordSession:
    session: RecordSession = request.app.state.record
    return session


RecordDep = Annotated[RecordSession, Depends(get_record)]


def _page_person_running(store: ServiceStates, stale_s: float) -> bool:
    state, _, alive = loop_state(store, stale_s)
    return (
        alive
        and state is not None
        and state.phase == LoopPhase.RUNNING
        and person_source(store, state) == "page"
    )


@router.get("/teleop")
def teleop_config(record: RecordDep, store: StoreDep, settings: SettingsDep) -> TeleopOut:
    s = record.settings
    holder = "record" if record.holds_control else None
    if holder is None and _page_person_running(store, settings.takeover_stale_s):
        holder = "takeover"
    return TeleopOut(
        send_period_ms=s.page_send_period_ms,
        watchdog_ms=s.page_watchdog_ms,
        deadband=s.deadband,
        max_speed_m_s=s.max_speed_m_s,
        max_rotation_rad_s=s.max_rotation_rad_s,
        holder=holder,
    )


@router.post("/teleop/command", dependencies=[TokenDep])
def teleop_command(
    body: TeleopCommandIn, record: RecordDep, store: StoreDep, settings: SettingsDep
) -> TeleopCommandOut:
    try:
        cmd = PageCommand.checked(body.axes, body.gripper_presses, body.end_presses, body.device)
    except TeleopError as e:
        raise HTTPException(422, f"{e}; nothing was sent") from e
    if record.holds_control:
        record.box.put(cmd)
        return TeleopCommandOut(to="record")
    if _page_person_running(store, settings.takeover_stale_s):
        state = PageTeleopState(
            seq=f"{_WRITER}:{next(_written)}",
            axes=list(cmd.axes),
            gripper_presses=cmd.gripper_presses,
            end_presses=cmd.end_presses,
            device=cmd.device,
        )
        write_state(store, PAGE_TELEOP_ROW, state)
        return TeleopCommandOut(to="takeover")
    raise HTTPException(
        409,
        "the page holds no control: record a take (the record panel) or take control of a running "
        "episode with PDE_TELEOP_PERSON=page; nothing was sent",
    )


# --- pde record from the page ---------------------------------------------------------------------


def _refused(e: Exception) -> HTTPException:
    return HTTPException(409, f"{e}; nothing was changed")


@router.get("/record")
def record_state(record: RecordDep, settings: SettingsDep) -> RecordOut:
    v = record.view()
    last = None
    if v.last is not None:
        n = v.last
        last = LastTakeOut(
            task=n.task,
            rows=n.rows,
            rows_dropped=n.rows_dropped,
            rows_clipped=n.rows_clipped,
            watchdog_stops=n.watchdog_stops,
            task_success=n.task_success,
            videos={cam: f"/api/record/video/{cam}?file={p.name}" for cam, p in n.videos.items()},
            kept=n.kept,
            files=n.files,
        )
    return RecordOut(
        phase=v.phase.value,
        task=v.task,
        rows=v.rows,
        error=v.error,
        last=last,
        demos_dir=str(v.demos_dir),
        counts={t: TaskCounts(kept=k, discarded=d) for t, (k, d) in v.counts.items()},
        tasks=settings.catalogue.names,
    )


@router.post("/record/reset", dependencies=[TokenDep])
def record_reset(
    body: RecordResetIn, record: RecordDep, store: StoreDep, settings: SettingsDep, robot: RobotDep
) -> RecordStepOut:
    """The arm to the task's reset pose (the sim also lays out its scene); the page polls
    ``GET /api/record`` until the session is ``ready``."""
    try:
        task = settings.catalogue.get(body.task)
    except (KeyError, ValueError) as e:
        raise HTTPException(422, f"unknown task {body.task!r}: known {settings.catalogue.names}") from e
    arm_free(store, settings, robot)
    try:
        record.reset(task, body.seed)
    except RecordRefused as e:
        raise _refused(e) from e
    return RecordStepOut(phase="resetting", task=task.name)


@router.post("/record/start", dependencies=[TokenDep])
def record_start(record: RecordDep, store: StoreDep, settings: SettingsDep, robot: RobotDep) -> RecordStepOut:
    """The take records from now, driven by the page's keys and gamepad, until stopped."""
    arm_free(store, settings, robot)
    try:
        record.record()
    except RecordRefused as e:
        raise _refused(e) from e
    return RecordStepOut(phase="recording")


@router.post("/record/stop", dependencies=[TokenDep])
def record_stop(record: RecordDep) -> RecordStepOut:
    try:
        record.stop()
    except RecordRefused as e:
        raise _refused(e) from e
    return RecordStepOut(phase="stopping")


@router.post("/record/save", dependencies=[TokenDep])
def record_save(body: RecordSaveIn, record: RecordDep) -> RecordSaveOut:
    try:
        paths = record.save(body.keep, body.note)
    except RecordRefused as e:
        raise _refused(e) from e
    return RecordSaveOut(kept=body.keep, files=[str(p) for p in paths])


@router.get("/record/video/{camera}")
def record_video(camera: str, record: RecordDep) -> FileResponse:
    last = record.view().last
    path = last.videos.get(camera) if last else None
    if path is None or not path.exists():
        have = ", ".join(sorted(last.videos)) if last else "none (no take recorded yet)"
        raise HTTPException(404, f"the last take has no video for camera {camera!r}; cameras: {have}")
    return FileResponse(path, media_type="video/mp4", headers={"Cache-Control": "no-store"})
