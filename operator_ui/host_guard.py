"""Which requests the page answers at all: a Host it is known by, and for a request that changes
something, an ``Origin`` (when the browser sends one) that is the page itself.

Without it any web page the operator opens can drive this one: a DNS-rebinding page (its name
resolves to 127.0.0.1 a moment after it loaded) reads the cameras, episodes and state with
``Host: evil.example``, and a plain cross-site form can POST the token-free E-STOP. Checked before
routing, so no route (the E-STOP, /healthz, the static files) is left out.

- **Host** (every request): its name (port ignored) must be ``localhost``, a loopback address, the
  bound address, or one of ``PDE_UI_ALLOWED_HOSTS``; anything else gets 421 and the name to add.
- **Origin** (POST, PUT, PATCH, DELETE): browsers send it on every such request, so a present one
  must be this page (scheme, host and port of the request's own Host, that host allowed);
  ``Origin: null`` (sandboxed frames, file://) is refused too: 403. A request without ``Origin``
  is not from a browser's page (curl, ``pde`` tools, scripts): allowed; what changes state
  still needs the token, and the E-STOP must work from a script."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from operator_ui.settings import LOCAL_HOSTS

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


def split_host(host: str) -> tuple[str, int | None]:
    """``Host``'s name (lower case, no trailing dot, IPv6 without brackets) and port, if given."""
    host = host.strip().lower()
    port: int | None = None
    if host.startswith("["):  # [::1]:8000
        name, _, rest = host[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif host.count(":") == 1:
        name, _, p = host.partition(":")
        port = int(p) if p.isdigit() else None
    else:
        name = host
    return name.rstrip("."), port


def allowed_hosts(bind: str, configured: Iterable[str]) -> frozenset[str]:
    """The names the page answers to: loopback, the bound address (unless a wildcard) and the
    lab's own (``PDE_UI_ALLOWED_HOSTS``)."""
    names = {*LOCAL_HOSTS, *(split_host(n)[0] for n in configured)}
    if bind not in WILDCARD_BINDS:
        names.add(split_host(bind)[0])
    return frozenset(names)


def _loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def origin_problem(origin: str, host: str, hosts: frozenset[str]) -> str | None:
    """Why a state-changing request with this ``Origin`` is not from this page, or None."""
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return f"Origin {origin!r} is not a web page of this server"
    try:
        origin_port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return f"Origin {origin!r} has no valid port"
    name, port = split_host(host)
    if parts.hostname.rstrip(".") != name or origin_port != (port or DEFAULT_PORTS[parts.scheme]):
        return f"Origin {origin!r} is another site than this page ({host!r})"
    if name not in hosts and not _loopback(name):
        return f"Origin {origin!r} is not an allowed host"
    return None


class HostOriginGuard:
    """ASGI middleware: the Host and Origin checks above, before any routing."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        name = split_host(host)[0]
        if name not in self.hosts and not _loopback(name):
            detail = (
                f"this page does not answer to the host name {host!r} (a page another site loaded, or "
                f"a name this server was not told about). If it is your lab's name for this machine, "
                f"add {name!r} to PDE_UI_ALLOWED_HOSTS (comma-separated) and restart `pde ui`; "
                "nothing was changed"
            )
            await JSONResponse({"detail": detail}, status_code=421)(scope, receive, send)
            return
        origin = headers.get("origin")
        if scope["method"] not in SAFE_METHODS and origin is not None:
            problem = origin_problem(origin, host, self.hosts)
            if problem:
                detail = (
                    f"{problem}: only the operator page itself (or a client that sends no Origin, "
                    "with the token) may change anything; nothing was changed"
                )
                await JSONResponse({"detail": detail}, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)
