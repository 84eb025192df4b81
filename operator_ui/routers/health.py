"""Health of the page and of each service it knows about, and the one list of what is wrong with
them, each with the one thing to do (the page shows it as a banner)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from operator_ui.deps import RobotDep, SettingsDep, StoreDep, TokenDep
from operator_ui.robot_link import RobotLink, observation_age_s
from operator_ui.schemas import (
    HealthOut,
    OkOut,
    ProblemOut,
    RobotHealthOut,
    ServiceHealthOut,
    ServiceStateHealthOut,
    state_out,
)
from operator_ui.settings import UISettings
from pde_contract.service_state import LOOP_ROW, SERVICE_STATES, LoopPhase, LoopState, decode_state
from pde_storage.protocols import OperatorStore

router = APIRouter(tags=["health"])

# service -> (what the operator calls it, how to start it: the command, its compose service in
# docker-compose.yml). Keys are the health entries: the robot link, and the service-state rows.
START = {
    "robot_server": ("robot server", "`pde robot-server`", "robot_server"),
    "loop": ("episode loop (learner)", "`pde learner run`", "learner"),
    "supervisor": ("supervisor", "`pde supervisor`", "supervisor"),
    "database": ("database", "PostgreSQL, or free the disk of the SQLite file", "postgres"),
}


def problem(service: str, what: str) -> ProblemOut:
    """One banner line: which service, what is wrong, and how to start it again."""
    name, start, compose = START[service]
    return ProblemOut(
        service=service,
        title=f"{name.upper()} DOWN",
        what=what,
        action=f"start it: {start} (in compose: `docker compose up -d {compose}`)",
    )


@router.get("/healthz")
def healthz(store: StoreDep) -> OkOut:
    store.tasks()  # the database answers
    return OkOut(ok=True)


def _robot_entry(robot: RobotLink, settings: UISettings) -> tuple[RobotHealthOut, list[ProblemOut]]:
    view = robot.view()
    age = observation_age_s(view)
    silent = age is None or age >= settings.robot_down_s
    entry = RobotHealthOut(
        ok=not silent and not view.fault_blocking,
        detail=view.fault
        or (f"last observation {age:.1f} s ago" if age is not None else "no observation yet")
        + (f" ({robot.error})" if robot.error else ""),
        estopped=view.estopped,
        fault=view.fault,
        fault_blocking=view.fault_blocking,
        guiding=view.guiding,
        estop_reason=view.estop_reason,
        limits=view.limits,
    )
    # A fault has its own banner (with the robot server's own advice); silence is this one.
    what = (
        "no observation since this page started"
        if age is None
        else f"no observation for {age:.0f} s: no live view, and the loop cannot run episodes"
    )
    return entry, [problem("robot_server", what)] if silent else []


def _service_entries(
    store: OperatorStore, settings: UISettings
) -> tuple[dict[str, ServiceStateHealthOut], list[ProblemOut]]:
    now = datetime.now(UTC)
    rows = store.service_states()
    entries: dict[str, ServiceStateHealthOut] = {}
    phases: dict[str, str] = {}
    problems = []
    for name, kind in SERVICE_STATES.items():
        row = rows.get(name)
        state = decode_state(row.state, kind) if row else None
        if row is None or state is None:
            continue
        age_s = (now - row.updated_at).total_seconds()
        stopped = state.phase == "stopped"
        ok = age_s <= settings.service_stale_s and not stopped
        entries[name] = ServiceStateHealthOut(
            ok=ok, detail=f"{state.phase} · last heard {age_s:.0f} s ago", state=state_out(state)
        )
        phases[name] = state.phase
        if not ok and name in START:
            # A loop that stopped on a refusal (e.g. a lab task on the sim backend) says why.
            why = (
                f"stopped: {state.last_error}"
                if isinstance(state, LoopState) and state.last_error
                else "stopped"
            )
            problems.append(problem(name, why if stopped else f"not running: last heard {age_s:.0f} s ago"))
        if ok and isinstance(state, LoopState) and state.phase == LoopPhase.WAITING_FOR_POLICY:
            problems.append(
                ProblemOut(
                    service=name,
                    title="NO POLICY YET",
                    what=state.detail or "the loop waits for a policy checkpoint",
                    action="train the SFT policy (`pde learner sft`, docs/teleop.md): the loop starts on it",
                )
            )
    loop = entries.get("loop")
    if loop is None:
        problems.append(problem("loop", "not running: it never wrote its state to this database"))
    elif (
        loop.ok
        and phases[LOOP_ROW] == LoopPhase.WAITING_FOR_SUPERVISOR
        and not ("supervisor" in entries and entries["supervisor"].ok)
    ):
        problems = [p for p in problems if p.service != "supervisor"]
        problems.append(problem("supervisor", "not running, and the loop waits for its candidate prompts"))
    return entries, problems


@router.get("/api/health")
def health(store: StoreDep, robot: RobotDep, settings: SettingsDep) -> HealthOut:
    robot_entry, problems = _robot_entry(robot, settings)
    services: dict[str, ServiceHealthOut] = {
        "database": ServiceHealthOut(ok=True, detail=store.dialect),
        "robot_server": robot_entry,
    }
    try:
        entries, more = _service_entries(store, settings)
    except Exception as e:  # the page's server is up but its database is not: say that, not a 500
        services["database"] = ServiceHealthOut(ok=False, detail=f"{type(e).__name__}: {e}")
        more = [problem("database", f"the page cannot read it ({type(e).__name__})")]
        entries = {}
    services.update(entries)
    problems += more
    if settings.restarted_by:
        for p in problems:
            if p.service != "database":
                p.action = (
                    f"{settings.restarted_by} restarts it by itself; if it stays down, its terminal says "
                    "why and where the service's log is"
                )
    return HealthOut(services=services, problems=problems)


@router.get("/api/token/check", dependencies=[TokenDep])
def token_check() -> OkOut:
    """200 when the token is right (401 missing, 403 wrong): the page checks it on load."""
    return OkOut(ok=True)
