"""Settings of the operator page (env prefix PDE_UI_; the shared PDE_DATABASE_URL, PDE_DATA_DIR
and PDE_ROBOT_CMD_ENDPOINT are read too)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pde_contract.settings import (
    DataLayout,
    data_dir_field,
    database_url_field,
    robot_cmd_endpoint_field,
    tasks_file_field,
)
from pde_contract.tasks import TaskCatalogue, load_tasks

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# Values people leave in .env files; never accepted as a token on a reachable port.
PLACEHOLDER_TOKENS = frozenset(
    {
        "",
        "changeme",
        "change-me",
        "change_me",
        "placeholder",
        "token",
        "secret",
        "password",
        "xxx",
        "todo",
        "test",
        "admin",
        "pde",
        "none",
        "null",
    }
)
MIN_TOKEN_CHARS = 16


class UISettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_UI_", populate_by_name=True)

    host: str = "127.0.0.1"
    """Bind address. Anything but localhost needs a real token (>= 16 characters, no placeholder)."""
    port: int = 8000
    allowed_hosts: str = ""
    """More host names (or addresses) the page answers to, comma-separated, e.g.
    ``pde-cell.lab.local,192.168.1.20``: the names a tablet on the lab network uses. localhost,
    loopback addresses and the bound address are always allowed; a request with any other Host
    gets 421 (operator_ui/host_guard.py)."""
    token: str = ""
    """Required on every request that changes something (header ``Authorization: Bearer <token>``).
    Empty on localhost: a random one is generated and printed at start-up."""
    database_url: str = database_url_field("PDE_UI_")
    data_dir: Path = data_dir_field("PDE_UI_")
    robot_cmd_endpoint: str = robot_cmd_endpoint_field("PDE_UI_")
    robot_timeout_s: float = 1.0
    """Timeout of one request to the robot server (e-stop, status)."""
    frame_stale_s: float = 1.0
    """A live-view frame older than this is badged stale on the page."""
    robot_down_s: float = 2.0
    """No observation for this long: the robot server is shown as down."""
    robot_home_timeout_s: float = 60.0
    """The page's "home arm" waits this long for the arm to get there."""
    episodes_target: int = 0
    """Episodes planned per day (the page shows done / target and when the target is reached);
    0: no target."""
    label_undo_s: float = 3.0
    """A label waits this long on the page (Undo) before it is sent and the loop moves on."""
    service_stale_s: float = 2.0
    """A service whose last heartbeat is older than this is shown as down, and a Start is refused.
    The loop and the supervisor beat every 0.5 s (PDE_LOOP_HEARTBEAT_PERIOD_S,
    PDE_SUPERVISOR_HEARTBEAT_PERIOD_S); with the page's health poll (0.5 s) a killed one is
    bannered 2.5 s after its last beat at most. Keep it >= 3 beats: a busy machine delays beats."""
    takeover_stale_s: float = 10.0
    """How old the loop's heartbeat may be while the page still routes a person's keys to the
    loop's takeover (a liveness call, not a banner): a loop whose beats a loaded machine delays past
    ``service_stale_s`` keeps its person's keys and hand-back (commands to a dead loop are read by
    nobody: harmless)."""
    restarted_by: str = ""
    """Set by a process supervisor that restarts crashed services itself (``pde demo`` sets "pde
    demo"): a down service's banner then says so instead of giving the command to start it."""
    request_read_timeout_s: float = 5.0
    """A request's headers and body must arrive within this of its first byte (or of the
    connection's opening), else the connection is closed (operator_ui/http_limits.py)."""
    keep_alive_s: int = 5
    """An idle keep-alive connection is closed after this (uvicorn's timeout_keep_alive)."""
    max_request_bytes: int = 1_048_576
    """Most bytes one request may send (headers and body); more closes the connection unread."""
    max_connections: int = 256
    """Open connections in all; one more is closed as soon as it is accepted."""
    max_connections_per_client: int = 64
    """Open connections from one address (a browser opens about 6 per page)."""
    tasks_file: str = tasks_file_field()
    """PDE_TASKS_FILE: the reset guide shows each task's reset_instructions from it."""

    _catalogue: TaskCatalogue = PrivateAttr()

    @model_validator(mode="after")
    def _read_tasks(self) -> UISettings:
        self._catalogue = load_tasks(self.tasks_file)  # read once: TasksFileError names the bad field
        return self

    @field_validator("allowed_hosts")
    @classmethod
    def _plain_names(cls, value: str) -> str:
        for name in (n.strip() for n in value.split(",")):
            if "/" in name or " " in name:
                raise ValueError(
                    f"PDE_UI_ALLOWED_HOSTS: {name!r} is not a host name: give names or addresses only "
                    "(e.g. 'pde-cell.lab.local,192.168.1.20'), no scheme, path or spaces"
                )
        return value

    @property
    def allowed_host_names(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.allowed_hosts.split(",") if n.strip())

    @property
    def catalogue(self) -> TaskCatalogue:
        return self._catalogue

    @property
    def media_dir(self) -> Path:
        return DataLayout(self.data_dir).media


def is_local(host: str) -> bool:
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_problem(token: str) -> str | None:
    """Why ``token`` is unfit for a page reachable from other machines, or None."""
    if token.strip().lower() in PLACEHOLDER_TOKENS or token.strip().startswith("<"):
        return "it is empty or a placeholder"
    if len(token) < MIN_TOKEN_CHARS:
        return f"it is shorter than {MIN_TOKEN_CHARS} characters"
    return None


def check_exposure(settings: UISettings) -> None:
    """Refuse to serve beyond localhost without a real token."""
    if is_local(settings.host):
        return
    problem = token_problem(settings.token)
    if problem:
        raise ValueError(
            f"refusing to bind {settings.host}: the page would be reachable from other machines and the "
            f"token (PDE_UI_TOKEN) is unfit: {problem}. Set PDE_UI_TOKEN to a long random string "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`) or bind 127.0.0.1."
        )
