"""Health of the page and of each service it knows about."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter

from operator_ui.deps import RobotDep, SettingsDep, StoreDep, TokenDep
from operator_ui.robot_link import observation_age_s

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(store: StoreDep) -> dict[str, Any]:
    store.tasks()  # the database answers
    return {"ok": True}


@router.get("/api/health")
def health(store: StoreDep, robot: RobotDep, settings: SettingsDep) -> dict[str, Any]:
    now = datetime.now(UTC)
    services: dict[str, Any] = {"database": {"ok": True, "detail": store.dialect}}
    view = robot.view()
    age = observation_age_s(view)
    services["robot_server"] = {
        "ok": age is not None and age < settings.robot_down_s and not view.fault_blocking,
        "detail": view.fault
        or (f"last observation {age:.1f} s ago" if age is not None else "no observation yet")
        + (f" ({robot.error})" if robot.error else ""),
        "estopped": view.estopped,
        "fault": view.fault,
        "fault_blocking": view.fault_blocking,
        "guiding": view.guiding,
        "estop_reason": view.estop_reason,
        "limits": view.limits,
    }
    for name, row in store.service_states().items():
        if name.startswith("_"):
            continue
        age_s = (now - row.updated_at).total_seconds()
        stopped = row.state.get("phase") == "stopped"
        services[name] = {
            "ok": age_s <= settings.service_stale_s and not stopped,
            "detail": f"{row.state.get('phase', '')} · last heard {age_s:.0f} s ago",
            "state": row.state,
        }
    return {"services": services}


@router.get("/api/token/check", dependencies=[TokenDep])
def token_check() -> dict[str, bool]:
    """200 when the token is right (401 missing, 403 wrong): the page checks it on load."""
    return {"ok": True}
