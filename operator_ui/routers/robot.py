"""Live camera frames and the e-stop, straight to the robot server (not through the loop)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Response

from operator_ui.deps import RobotDep, TokenDep
from operator_ui.robot_link import observation_age_s
from operator_ui.schemas import EStopIn

router = APIRouter(prefix="/api", tags=["robot"])


def _robot_call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # RobotServerError / RobotUnavailableError: say what failed
        raise HTTPException(503, f"robot server did not accept the request: {e}") from e


@router.get("/cameras")
def cameras(robot: RobotDep) -> dict[str, Any]:
    v = robot.view()
    return {
        "cameras": sorted(v.frames),
        "age_s": observation_age_s(v),
        "error": robot.error,
        "estopped": v.estopped,
        "task_success": v.task_success,
        "ee_position_m": v.ee_position_m,
        "gripper_width_m": v.gripper_width_m,
        "episode_id": v.episode_id,
    }


@router.get("/cameras/{name}.jpg")
def camera_frame(name: str, robot: RobotDep) -> Response:
    frame = robot.view().frames.get(name)
    if frame is None:
        raise HTTPException(
            404, f"no frame from camera {name!r} (robot server: {robot.error or 'connected'})"
        )
    return Response(frame, media_type="image/jpeg", headers={"Cache-Control": "no-store"})


# No token on the e-stop, deliberately: stopping the arm is never harmful, and an operator who
# lost the token must still be able to stop it. Releasing it needs the token.
@router.post("/robot/estop")
def estop(robot: RobotDep, body: EStopIn | None = None) -> dict[str, Any]:
    _robot_call(robot.estop, (body or EStopIn()).reason)
    st = _robot_call(robot.status)
    return {"estopped": st.estopped, "reason": st.estop_reason}


@router.post("/robot/release", dependencies=[TokenDep])
def release(robot: RobotDep) -> dict[str, Any]:
    _robot_call(robot.release_estop)
    st = _robot_call(robot.status)
    return {"estopped": st.estopped}


@router.get("/robot/status")
def status(robot: RobotDep) -> dict[str, Any]:
    st = _robot_call(robot.status)
    return {
        "backend": st.backend,
        "connected": st.connected,
        "estopped": st.estopped,
        "estop_reason": st.estop_reason,
        "episode_id": st.episode_id,
        "holding": st.holding,
        "steps_remaining": st.steps_remaining,
        "task": st.task,
        "last_error": st.last_error,
    }
