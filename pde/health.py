"""``pde health <service>``: exit 0 when the service is healthy, 1 when not (compose healthchecks).

- robot-server: the server answers a Health request over its command socket and says ok (with the
  robot link's keys from the environment; pde_contract/link.py).
- ui: the page's ``/healthz`` answers 200 (it reads the database to answer).
- learner / supervisor: their heartbeat row in the shared database (``Store.set_service_state``,
  written by the episode loop as "loop" and by the supervisor as "supervisor") is recent and does
  not say "stopped".

Each check reads the same settings as the service itself (environment, ``PDE_<SERVICE>_...`` and
the shared ``PDE_DATABASE_URL``), so in a container it needs no arguments.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pde_contract.link import ENV_SERVER_SECRET_KEY, ClientCurve, LinkKeyError, client_curve_from_env
from pde_contract.service_state import LOOP_ROW, SERVICE_STATES, SUPERVISOR_ROW, SupervisorState, decode_state
from pde_contract.settings import resolve_database_url

# service -> name of its row in the store's service_states table
HEARTBEAT_ROWS = {"learner": LOOP_ROW, "supervisor": SUPERVISOR_ROW}
DEFAULT_MAX_AGE_S = 30.0
STUCK_POLL_S = 600.0  # a supervisor poll never takes this long unless something hangs


class Unhealthy(Exception):
    """Why a service is not healthy (printed, exit code 1)."""


def as_probe(check: Callable[[], object]) -> Callable[[], bool]:
    """A check (raises Unhealthy) as the yes/no probe ``ProcessGroup.wait_healthy`` polls."""

    def probe() -> bool:
        try:
            check()
        except Unhealthy:
            return False
        return True

    return probe


def check_robot_server(endpoint: str | None, timeout_s: float) -> str:
    from pde_contract.client import RobotClient
    from robot_server.settings import RobotServerSettings

    if endpoint is None:
        # Inside the robot server's container its own settings say where it listens; elsewhere the
        # shared PDE_ROBOT_CMD_ENDPOINT does.
        import os

        endpoint = os.environ.get("PDE_ROBOT_CMD_ENDPOINT") or RobotServerSettings().cmd_endpoint
    endpoint = endpoint.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")
    try:
        curve = _link_keys()
    except LinkKeyError as e:
        raise Unhealthy(str(e)) from e
    with RobotClient(cmd_endpoint=endpoint, name="pde-health", timeout_s=timeout_s, curve=curve) as client:
        try:
            info = client.health()
        except Exception as e:
            raise Unhealthy(f"robot server at {endpoint} does not answer: {e}") from e
    if not info.ok:
        raise Unhealthy(f"robot server at {endpoint} reports not ok: {info.detail}")
    return f"robot server at {endpoint} ok ({info.control_loop_hz:.1f} Hz control loop)"


def _link_keys() -> ClientCurve | None:
    """A client's own keys; in the robot server's container (which has none) the server's pair,
    which the server always accepts."""
    import os

    curve = client_curve_from_env()
    if curve is None and os.environ.get(ENV_SERVER_SECRET_KEY):
        curve = ClientCurve.as_server(os.environ[ENV_SERVER_SECRET_KEY])
    return curve


def check_ui(url: str | None, timeout_s: float) -> str:
    if url is None:
        from operator_ui.settings import UISettings

        s = UISettings()
        host = "127.0.0.1" if s.host in ("0.0.0.0", "::", "") else s.host
        url = f"http://{host}:{s.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            if r.status != 200:
                raise Unhealthy(f"{url} answered HTTP {r.status}")
    except (urllib.error.URLError, OSError) as e:
        raise Unhealthy(f"{url} does not answer: {e}") from e
    return f"page at {url} ok"


def check_heartbeat(service: str, database_url: str | None, max_age_s: float) -> str:
    from pde_storage import Store

    if database_url is None:
        database_url = resolve_database_url()
    row_name = HEARTBEAT_ROWS[service]
    _require_sqlite_file(database_url)
    # migrate=False: a health probe never changes the schema (the services do at start-up); the
    # media folder is never touched by service_states().
    store = Store(database_url, tempfile.gettempdir(), migrate=False)
    try:
        row = store.service_states().get(row_name)
    except Exception as e:
        raise Unhealthy(f"cannot read the database {database_url.split('@')[-1]}: {e}") from e
    finally:
        store.close()
    state = decode_state(row.state, SERVICE_STATES[row_name]) if row is not None else None
    if row is None or state is None:
        raise Unhealthy(f"{service} has not written its heartbeat ({row_name!r}) to the database yet")
    age_s = (datetime.now(UTC) - row.updated_at).total_seconds()
    phase = str(state.phase)
    if phase == "stopped":
        raise Unhealthy(f"{service} says it stopped ({age_s:.0f} s ago)")
    if age_s > max_age_s:
        raise Unhealthy(f"{service}'s last heartbeat is {age_s:.0f} s old (limit {max_age_s:.0f} s)")
    poll_s = state.poll_running_s if isinstance(state, SupervisorState) else 0.0
    if poll_s > STUCK_POLL_S:  # alive (its heartbeat has its own thread) but its work is stuck
        raise Unhealthy(
            f"{service} is alive but one poll has been running for {poll_s:.0f} s (limit "
            f"{STUCK_POLL_S:.0f} s): see its log; restarting it is safe"
        )
    return f"{service} ok (heartbeat {age_s:.1f} s ago{', ' + phase if phase else ''})"


def _require_sqlite_file(database_url: str) -> None:
    """SQLite would create an empty file on connect; a probe must not leave one behind."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    file = url.database if url.get_backend_name() == "sqlite" and url.database != ":memory:" else None
    if file and not Path(file).exists():
        raise Unhealthy(f"the database file {url.database} does not exist (no service has started)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pde health", description=__doc__.split("\n\n")[0])
    p.add_argument("service", choices=["robot-server", "ui", "learner", "supervisor"])
    p.add_argument("--endpoint", help="robot server command endpoint (default from the environment)")
    p.add_argument("--url", help="page health URL (default http://$PDE_UI_HOST:$PDE_UI_PORT/healthz)")
    p.add_argument("--database-url", help="default: $PDE_DATABASE_URL or sqlite:///data/pde.db")
    p.add_argument(
        "--max-age-s",
        type=float,
        default=DEFAULT_MAX_AGE_S,
        help=f"heartbeat older than this is unhealthy (default {DEFAULT_MAX_AGE_S:.0f})",
    )
    p.add_argument("--timeout-s", type=float, default=3.0)
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    checks: dict[str, Callable[[], str]] = {
        "robot-server": lambda: check_robot_server(args.endpoint, args.timeout_s),
        "ui": lambda: check_ui(args.url, args.timeout_s),
        "learner": lambda: check_heartbeat("learner", args.database_url, args.max_age_s),
        "supervisor": lambda: check_heartbeat("supervisor", args.database_url, args.max_age_s),
    }
    try:
        message = checks[args.service]()
    except Unhealthy as e:
        print(f"pde health {args.service}: UNHEALTHY: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"pde health {args.service}: {message}")
    return 0
