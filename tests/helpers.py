"""Helpers for tests that start services as real processes on loopback."""

from __future__ import annotations

import os
import random
import socket
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, never the same twice in a session.

    Drawn at random below the kernel's ephemeral range: a port the kernel picks for ``bind(0)`` is
    also one it hands to outgoing connections (every client socket of every process here), so it
    can be taken before the server that was given it binds; and two calls must not return the same
    port while the first is not bound yet."""
    lo, _ = _ephemeral_range()
    first = max(1024, min(20000, lo - 1000))
    for _ in range(200):
        port = random.randrange(first, lo)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free TCP port on 127.0.0.1 in {first}..{lo - 1} after 200 tries")


def pde_command(*args: str) -> list[str]:
    """``pde <args>`` run from this checkout (not whatever copy is installed)."""
    return [sys.executable, "-m", "pde", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env
