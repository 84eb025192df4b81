"""Helpers for tests that start services as real processes on loopback."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from pde_contract.client import RobotClient
from pde_contract.messages import ActionChunk, ChunkAccepted

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


# Under pytest's 300 s per-test timeout, so that a hung job is killed here and its output reported.
TORCHRUN_TIMEOUT_S = 200


def _descendants(pid: int) -> list[int]:
    """The live descendants of ``pid`` (Linux: read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def torchrun(
    target: list[str],
    nproc: int = 2,
    env: dict[str, str] | None = None,
    timeout_s: float = TORCHRUN_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node nproc <target>`` on CPU ranks (gloo over loopback).

    ``--standalone`` lets the rendezvous store bind port 0, so no port is probed and handed over (a
    probed port can be taken before torchrun binds it, and torchrun then joins whatever listens
    there as a client). When the job outlives ``timeout_s`` every rank gets SIGABRT (it prints its
    Python stacks), then the ranks and torchrun SIGKILL; the AssertionError carries what they printed."""
    env = {
        **(env if env is not None else subprocess_env()),
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONFAULTHANDLER": "1",  # a SIGABRT makes every rank print its threads' Python stacks
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    proc = subprocess.Popen(
        [*cmd, *target],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # torchrun starts each rank in a session of its own: signal them by pid, not by group.
        ranks = _descendants(proc.pid)
        for pid in ranks:  # stacks first: where a hung rank waits
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
        time.sleep(3)
        for pid in [*ranks, proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate()
        tail = f"{out[-3000:]}\n{err[-6000:]}"
        raise AssertionError(f"torchrun did not finish in {timeout_s} s:\n{tail}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class NotedChunks(RobotClient):
    """The real robot client, the rows of each chunk it sent noted by seq (the server's tick log
    names the chunk and row each tick ran), and in order: when it was sent (``time.monotonic()``
    before the request), its rows and the server's reply (its start tick, what the one before ran)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: dict[int, np.ndarray] = {}
        self.replies: list[tuple[float, np.ndarray, ChunkAccepted]] = []

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted:
        sent_s = time.monotonic()
        accepted = super().submit_chunk(chunk)
        self.sent[chunk.seq] = chunk.actions.copy()
        self.replies.append((sent_s, chunk.actions.copy(), accepted))
        return accepted

    def ran_by_tick(self) -> dict[int, tuple[int, np.ndarray]]:
        """The chunk (its seq) and row that ran at each server tick, from the replies: a chunk's
        rows run from its start tick on, as many as the next chunk's reply says (a chunk replaced
        before its tick ran none); what the last chunk sent ran is not known."""
        ran: dict[int, tuple[int, np.ndarray]] = {}
        for (_, rows, accepted), (_, _, after_it) in itertools.pairwise(self.replies):
            for k in range(after_it.previous_rows_run):
                ran[accepted.start_tick + k] = (accepted.seq, rows[k])
        return ran
