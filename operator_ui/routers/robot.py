"""Live camera frames and the e-stop, straight to the robot server (not through the loop)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import msgspec
from fastapi import APIRouter, HTTPException, Request, Response

from operator_ui.deps import RobotDep, SettingsDep, StoreDep, TokenDep
from operator_ui.robot_link import RobotLink, fault_blocks_motion, fault_text, observation_age_s
from operator_ui.routers.loop import loop_state
from operator_ui.schemas import CamerasOut, EStopIn, EStopOut, HomeOut, RobotStatusOut
from operator_ui.settings import UISettings
from pde_contract.service_state import LOOP_MOVES_ARM, LoopState
from pde_storage.protocols import ServiceStates

router = APIRouter(prefix="/api", tags=["robot"])
T = TypeVar("T")
# The frame's age in seconds on the page's server clock (see robot_link.CameraFrame.age_s).
FRAME_AGE_HEADER = "X-Frame-Age-S"


def _robot_call(fn: Callable[[], T], what: str) -> T:
    try:
        return fn()
    except Exception as e:  # RobotServerError (timeout, refused): say what failed and what happened
        raise HTTPException(
            503,
            f"{what} failed: the robot server did not confirm it ({e}). The request was dropped and "
            "will not run later; check the robot (use the hardware e-stop if it must stop now).",
        ) from e


def _estopped_now(robot: RobotLink, fallback: bool) -> bool:
    try:
        return robot.status().estopped
    except Exception:  # the command itself was acknowledged; the status is only a confirmation
        return fallback


@router.get("/cameras")
def cameras(robot: RobotDep, settings: SettingsDep) -> CamerasOut:
    v = robot.view()
    now = time.monotonic()
    age = observation_age_s(v, now)
    return CamerasOut(
        cameras=sorted(v.frames),
        age_s=age,
        frame_age_s={name: f.age_s(now) for name, f in sorted(v.frames.items())},
        stale=age is None or age > settings.frame_stale_s,
        error=robot.error,
        estopped=v.estopped,
        fault=v.fault,
        task_success=v.task_success,
        ee_position_m=list(v.ee_position_m),
        gripper_width_m=v.gripper_width_m,
        episode_id=v.episode_id,
    )


@router.get("/cameras/{name}.jpg")
def camera_frame(name: str, robot: RobotDep) -> Response:
    frame = robot.view().frames.get(name)
    if frame is None:
        raise HTTPException(
            404, f"no frame from camera {name!r} (robot server: {robot.error or 'connected'})"
        )
    return Response(
        frame.jpeg,
        media_type="image/jpeg",
        headers={"Cache-Control": "no-store", FRAME_AGE_HEADER: f"{frame.age_s(time.monotonic()):.3f}"},
    )


# No token on the e-stop, deliberately: stopping the arm is never harmful, and an operator who
# lost the token must still be able to stop it. Releasing it needs the token.
@router.post("/robot/estop")
def estop(robot: RobotDep, body: EStopIn | None = None) -> EStopOut:
    reason = (body or EStopIn()).reason
    _robot_call(lambda: robot.estop(reason), "E-STOP")
    return EStopOut(estopped=_estopped_now(robot, True), reason=reason)


@router.post("/robot/release", dependencies=[TokenDep])
def release(robot: RobotDep) -> EStopOut:
    _robot_call(robot.release_estop, "release of the e-stop")
    return EStopOut(estopped=_estopped_now(robot, False))


def arm_free(store: ServiceStates, settings: UISettings, robot: RobotLink) -> LoopState | None:
    """The loop's state when the page may move the arm: the loop does not (it resets or runs an
    episode) and the E-STOP is not latched; else a 409 saying which."""
    state, _, alive = loop_state(store, settings.service_stale_s)
    if alive and state is not None and state.phase in LOOP_MOVES_ARM:
        raise HTTPException(
            409,
            f"the loop moves the arm now ({state.phase}): abort or end the episode first; "
            "nothing was changed",
        )
    if robot.view().estopped:
        raise HTTPException(409, "the E-STOP is latched: release it first; nothing was changed")
    return state


@router.post("/robot/home", dependencies=[TokenDep])
def home(request: Request, robot: RobotDep, store: StoreDep, settings: SettingsDep) -> HomeOut:
    """Reset the arm from the page (the loop's own reset: home or the task's reset pose, and in a
    simulator the scene of the loop's task and seed), only while the loop does not move it."""
    state = arm_free(store, settings, robot)
    if request.app.state.record.moving:
        raise HTTPException(409, "a take is being recorded on the page: stop it first; nothing was changed")
    task = (state.task if state else None) or ""
    seed = state.seed if state else None
    spec = settings.catalogue.tasks.get(task)
    pose = spec.reset_joints_rad if spec else None
    _robot_call(lambda: robot.home(task, seed, pose, settings.robot_home_timeout_s), "homing the arm")
    return HomeOut(task=task, seed=seed, pose="the task's reset pose" if pose else "home")


@router.get("/robot/status")
def status(robot: RobotDep) -> RobotStatusOut:
    st = _robot_call(robot.status, "status request")
    # The Status's own fields by name; the fault as the operator's text.
    return RobotStatusOut.model_validate(
        {**msgspec.structs.asdict(st), "fault": fault_text(st), "fault_blocking": fault_blocks_motion(st)}
    )
