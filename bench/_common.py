"""Shared bits of the robot-server benchmarks: statistics, payloads, result files."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `python bench/bench_x.py` from a checkout
    sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

RESULTS_DIR = REPO_ROOT / "bench" / "results"
# The benchmarks' fast-paced sim servers (start_server in bench_learning and bench_premise): their
# wall-clock watchdogs, which drop the running chunk, set for the shared 2-core machine. At the
# defaults the heartbeat watchdog (0.2 s) dropped 3-4 chunks per 100 `pde learner eval` episodes (a
# client's heartbeat late under load), and the command-thread stall watchdog (2 s) one beside a CPU
# hog: each makes that episode depend on the load. Both stay on: a client that dies, or a stuck
# command thread, still stops the sim arm within these.
SIM_SERVER_WATCHDOG_ENV = {
    "PDE_ROBOT_HEARTBEAT_TIMEOUT_S": "2.0",
    "PDE_ROBOT_COMMAND_STALL_TIMEOUT_S": "10.0",
}
SIZES: dict[str, tuple[int, int]] = {"224x224": (224, 224), "640x480": (640, 480)}


def stats_us(samples_s: list[float] | np.ndarray) -> dict[str, float]:
    a = np.asarray(samples_s, dtype=np.float64) * 1e6
    return {
        "n": int(a.size),
        "p50_us": round(float(np.percentile(a, 50)), 1),
        "p90_us": round(float(np.percentile(a, 90)), 1),
        "p99_us": round(float(np.percentile(a, 99)), 1),
        "max_us": round(float(a.max()), 1),
        "mean_us": round(float(a.mean()), 1),
    }


def call_latency_ms(
    call: Callable[[], Any], runs: int, sync: Callable[[], None], warmup_calls: int = 3
) -> dict[str, float]:
    """p50/p90/p99 ms of ``call`` over ``runs`` calls after ``warmup_calls`` (kernels, allocator,
    compilation, CUDA graph capture), ``sync`` (the GPU's) around each."""
    times = []
    for i in range(runs + warmup_calls):
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        if i >= warmup_calls:
            times.append((time.perf_counter() - t0) * 1e3)
    a = np.asarray(times)
    return {
        "p50_ms": round(float(np.median(a)), 2),
        "p90_ms": round(float(np.percentile(a, 90)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
        "n": len(a),
    }


def versions(**modules: Any) -> dict[str, str]:
    """Each named module's ``__version__``, Python's and this checkout's commit (for checks that run
    in another venv, e.g. LeRobot's)."""
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
        ).stdout.strip()
    except FileNotFoundError:  # a machine without git (a GPU machine's copy of the tree)
        commit = ""
    return {
        **{name: str(m.__version__) for name, m in modules.items()},
        "python": platform.python_version(),
        "ours": commit or "unknown",
    }


def jpeg_frame(width: int, height: int, seed: int) -> bytes:
    """A JPEG (quality 90) of a smooth random picture: sizes like a real camera frame."""
    import cv2

    rng = np.random.default_rng(seed)
    small = (rng.random((height // 8, width // 8, 3)) * 255).astype(np.uint8)
    img = cv2.GaussianBlur(cv2.resize(small, (width, height)), (5, 5), 0)
    noise = rng.integers(0, 12, img.shape, dtype=np.uint8)
    ok, buf = cv2.imencode(".jpg", cv2.add(img, noise), [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return buf.tobytes()


def sleep_until(t_mono: float) -> None:
    while True:
        d = t_mono - time.monotonic()
        if d <= 0:
            return
        time.sleep(d)


def write_result(name: str, result: dict[str, Any], command: str, quiet: bool = False) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": name,
        "command": command,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        **result,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    if not quiet:  # quiet: a partial result written on the way
        print(json.dumps(out, indent=2))
        print(f"wrote {path}")
    return path


def measure(call: Callable[[], object], n: int, paced_hz: float | None) -> list[float]:
    """Seconds per call, back to back or paced at ``paced_hz`` on a fixed grid."""
    out = []
    t_next = time.monotonic()
    for _ in range(n):
        if paced_hz:
            t_next += 1.0 / paced_hz
            sleep_until(t_next)
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a success rate (sound at 0 and n successes, unlike +-1.96 se)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * float(np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def success_interval(successes: int, n: int) -> dict[str, float]:
    """A success count as the learning benchmarks record it: count, rate and Wilson 95% bounds."""
    lo, hi = wilson_interval(successes, n)
    return {
        "successes": successes,
        "n": n,
        "rate": successes / max(1, n),
        "wilson95_low": lo,
        "wilson95_high": hi,
    }
