"""The operator page's E-STOP and /healthz under connection floods from the operator's own address.

`pde ui` runs as a real process started with a soft file limit of 1024 (it lifts it to the hard one),
in front of a robot server (bench/_server.py's fake backend: the E-STOP is confirmed, 200). For
each attack phase a separate process floods 127.0.0.1, the address the probes come from too:

- ``slow_header``: connections that send part of their headers and trickle a byte now and then,
  reopened as the server closes them;
- ``gb_claim``: POSTs that promise a 1 GB body and trickle it;
- ``idle``: 1,100 connections that never send a byte (more than the page's 1024 files).

Meanwhile the probe sends a token-free E-STOP and a /healthz, alternately, each on a fresh
connection (a browser's worst case), every ``probe_period_s``; a probe fails when it gets no answer,
a reset, or a status other than 200. Target: 0 failed, every probe under 200 ms.

    python bench/bench_http_flood.py            # writes bench/results/http_flood.json
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Any

import _common
from _server import ServerProcess, ServerSpec

from tests.helpers import free_port, pde_command, subprocess_env

TARGET_MS = 200.0
PHASES = {  # attack -> connections it holds open
    "slow_header": 3000,
    "gb_claim": 500,
    "idle": 1100,
}
UI_FILE_LIMIT = 1024


def _open(port: int) -> socket.socket | None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1.0)
    except OSError:
        return None
    s.setblocking(False)
    return s


FIRST_BYTES = {
    "slow_header": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
    "gb_claim": b"POST /api/robot/estop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000000000\r\n\r\n{",
    "idle": b"",
}


def _attack(kind: str, port: int, n: int, stop: Any, out: Any) -> None:
    """Hold ``n`` connections of this kind open until ``stop``; reopen what the server closes."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held: list[socket.socket] = []
    opened = closed = 0
    while not stop.is_set():
        while len(held) < n and not stop.is_set():
            s = _open(port)
            if s is None:
                break
            with suppress(OSError):
                s.send(FIRST_BYTES[kind])
            held.append(s)
            opened += 1
        alive = []
        for s in held:  # trickle one byte (idle: just see whether the server closed it)
            try:
                if kind != "idle":
                    s.send(b"x")
                if s.recv(1, socket.MSG_PEEK) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                alive.append(s)  # open, nothing to read: held
                continue
            except OSError:
                pass
            s.close()
            closed += 1
        held = alive
        stop.wait(0.5)
    for s in held:
        s.close()
    out.put({"opened": opened, "closed_by_server": closed})


def _probe(port: int, estop: bool) -> tuple[float, str | None]:
    """(ms, failure or None) of one request on a fresh connection."""
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5.0)
        if estop:
            body = b'{"reason": "bench_http_flood probe"}'
            c.request("POST", "/api/robot/estop", body, {"Content-Type": "application/json"})
        else:
            c.request("GET", "/healthz")
        r = c.getresponse()
        r.read()
        c.close()
        failure = None if r.status == 200 else f"HTTP {r.status}"
    except OSError as e:
        failure = f"{type(e).__name__}: {e}"
    return (time.perf_counter() - t0) * 1000, failure


def _summary(samples: list[tuple[float, str | None]]) -> dict[str, Any]:
    ms = [m for m, _ in samples]
    failures = [f for _, f in samples if f]
    return {
        "n": len(samples),
        "failed": len(failures),
        "over_target": sum(1 for m, f in samples if f is None and m >= TARGET_MS),
        "median_ms": round(statistics.median(ms), 1) if ms else None,
        "max_ms": round(max(ms), 1) if ms else None,
        "failures": sorted(set(failures))[:5],
    }


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _limit_files() -> None:
    """The common soft limit (1024); `pde ui` lifts it to the hard one (http_limits.raise_file_limit)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (UI_FILE_LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def run_phase(
    kind: str, n: int, port: int, ui_pid: int, phase_s: float, probe_period_s: float
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    attacker = None
    if kind != "baseline":
        attacker = ctx.Process(target=_attack, args=(kind, port, n, stop, out), daemon=True)
        attacker.start()
    estops: list[tuple[float, str | None]] = []
    health: list[tuple[float, str | None]] = []
    max_fds = 0
    t_end = time.monotonic() + phase_s
    i = 0
    while time.monotonic() < t_end:
        (estops if i % 2 == 0 else health).append(_probe(port, estop=i % 2 == 0))
        max_fds = max(max_fds, _fds(ui_pid))
        i += 1
        time.sleep(probe_period_s)
    stop.set()
    attack: dict[str, Any] = {}
    if attacker is not None:
        attack = out.get(timeout=60)
        attacker.join(30)
    time.sleep(2.0)  # the attack's leftovers time out before the next phase
    result = {
        "attack": kind,
        "connections_held": n if kind != "baseline" else 0,
        **attack,
        "estop": _summary(estops),
        "healthz": _summary(health),
        "ui_open_files_max": max_fds,
    }
    print(result, flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phase-s", type=float, default=12.0)
    p.add_argument("--probe-period-s", type=float, default=0.1)
    p.add_argument("--out", default="http_flood")
    p.add_argument("--ui-env", nargs="*", default=[], help="more PDE_UI_*=value for `pde ui`")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-http-flood-"))
    port = free_port()
    with ServerProcess(ServerSpec(backend="fake", width=96, height=96)) as robot:
        env = subprocess_env(
            PDE_UI_DATABASE_URL=f"sqlite:///{tmp}/pde.db",
            PDE_UI_DATA_DIR=str(tmp),
            PDE_UI_PORT=str(port),
            PDE_UI_TOKEN="bench-token-0123456789abcdef",
            PDE_UI_ROBOT_CMD_ENDPOINT=robot.cmd_endpoint,
            PDE_UI_HOST="127.0.0.1",
            **dict(kv.split("=", 1) for kv in args.ui_env),
        )
        log = tmp / "ui.log"
        ui = subprocess.Popen(
            pde_command("ui"),
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=_limit_files,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline or ui.poll() is not None:
                        raise RuntimeError(f"pde ui did not start: {log.read_text()[-2000:]}") from None
                    time.sleep(0.2)
            load_at_start = [round(x, 2) for x in os.getloadavg()]
            phases = [run_phase("baseline", 0, port, ui.pid, args.phase_s / 2, args.probe_period_s)]
            for kind, n in PHASES.items():
                phases.append(run_phase(kind, n, port, ui.pid, args.phase_s, args.probe_period_s))
        finally:
            ui.terminate()
            ui.wait(15)
        tracebacks = log.read_text().count("Traceback")
    failed = sum(ph["estop"]["failed"] + ph["healthz"]["failed"] for ph in phases)
    slow = sum(ph["estop"]["over_target"] + ph["healthz"]["over_target"] for ph in phases)
    _common.write_result(
        args.out,
        {
            "target": f"0 failed, every probe under {TARGET_MS:.0f} ms",
            "met": failed == 0 and slow == 0,
            "failed_probes": failed,
            "probes_over_target": slow,
            "ui_soft_file_limit_at_start": UI_FILE_LIMIT,
            "ui_settings": dict(kv.split("=", 1) for kv in args.ui_env) or "defaults",
            "phase_s": args.phase_s,
            "probe_period_s": args.probe_period_s,
            "load_average_1_5_15_at_start": load_at_start,
            "ui_log_tracebacks": tracebacks,
            "phases": phases,
        },
        " ".join(["python", *sys.argv]),
    )


if __name__ == "__main__":
    main()
