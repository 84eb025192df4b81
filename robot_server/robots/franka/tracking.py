"""Measure how well a target stream was tracked: error against the schedule and stops.

Used by the franka tests and bench/bench_franka_strategies.py. Positions are sampled from the
robot state with the robot's own clock, so host scheduling jitter does not fake speed dips.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from robot_server.robots.base import RobotTarget


@dataclass
class TrackingLog:
    # (robot_time_s, position[3]) samples and (robot_time_s at send, target position[3]) ticks
    samples: list[tuple[float, np.ndarray]] = field(default_factory=list)
    ticks: list[tuple[float, np.ndarray]] = field(default_factory=list)
    chunk_starts_s: list[float] = field(default_factory=list)


class StateSampler:
    """Samples ``read() -> (robot_time_s, position_m)`` in a thread while active."""

    def __init__(self, read: Callable[[], tuple[float, np.ndarray]], period_s: float = 0.004) -> None:
        self._read = read
        self._period_s = period_s
        self._stop = threading.Event()
        self.log = TrackingLog()
        self._thread = threading.Thread(target=self._loop, name="tracking-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                t, x = self._read()
                self.log.samples.append((t, np.asarray(x, float).copy()))
            except Exception:
                pass
            time.sleep(self._period_s)

    def now_s(self) -> float:
        return self._read()[0]

    def __enter__(self) -> StateSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


def tracking_report(
    log: TrackingLog, period_s: float, stop_speed_m_s: float = 0.01, speed_window_s: float = 0.0
) -> dict[str, float]:
    """Error of the position one period after each target was sent (where the arm is due), the
    lowest speed between the first and the last tick, and how long the arm stood still there.
    ``stop_speed_m_s``: slower than this counts as stopped. ``speed_window_s`` > 0: speeds over
    at least that much robot time (a simulator starved of CPU can report a new clock with the
    previous position, which between two samples reads as standing still)."""
    if len(log.samples) < 3 or not log.ticks:
        raise ValueError("not enough samples to judge tracking")
    t = np.array([s[0] for s in log.samples])
    x = np.stack([s[1] for s in log.samples])
    # One sample per robot-clock value: repeated reads of the same state are not "standing still".
    keep = np.r_[True, np.diff(t) > 0]
    t, x = t[keep], x[keep]
    errors = []
    for sent_s, target in log.ticks:
        i = int(np.searchsorted(t, sent_s + period_s))
        if i < len(t):
            errors.append(float(np.linalg.norm(x[i] - target)))
    start_s, end_s = log.ticks[0][0] + period_s, log.ticks[-1][0] + period_s
    inside = (t >= start_s) & (t <= end_s)
    ti, xi = t[inside], x[inside]
    if speed_window_s > 0.0:
        # each sample paired with the first one at least the window later (or the last one)
        j = np.minimum(np.searchsorted(ti, ti[:-1] + speed_window_s), len(ti) - 1)
        speed = np.linalg.norm(xi[j] - xi[:-1], axis=1) / (ti[j] - ti[:-1])
    else:
        speed = np.linalg.norm(np.diff(xi, axis=0), axis=1) / np.diff(ti)
    stopped_s = float(np.sum(np.diff(ti)[speed < stop_speed_m_s]))
    boundary_min = []
    for c in log.chunk_starts_s[1:]:
        near = (ti[1:] > c - period_s) & (ti[1:] < c + period_s)
        if near.any():
            boundary_min.append(float(speed[near].min()))
    sent = np.array([tick[0] for tick in log.ticks])
    return {
        "tick_gap_max_s": float(np.diff(sent).max()) if len(sent) > 1 else 0.0,
        "tracking_error_mean_m": float(np.mean(errors)),
        "tracking_error_max_m": float(np.max(errors)),
        "speed_min_m_s": float(speed.min()),
        "speed_mean_m_s": float(speed.mean()),
        "stopped_time_s": stopped_s,
        "inter_chunk_speed_min_m_s": float(min(boundary_min)) if boundary_min else float("nan"),
        "inter_chunk_stops": float(sum(v < stop_speed_m_s for v in boundary_min)),
        "duration_s": float(end_s - start_s),
    }


def circle_targets(
    center_m: np.ndarray, radius_m: float, period_s: float, steps: int, revolution_s: float
) -> list[np.ndarray]:
    """Positions on a circle in the y-z plane starting at ``center_m`` + (0, 0, 0)."""
    w = 2.0 * np.pi / revolution_s
    return [
        center_m
        + np.array([0.0, radius_m * np.sin(w * k * period_s), radius_m * (np.cos(w * k * period_s) - 1)])
        for k in range(1, steps + 1)
    ]


def stream_targets(
    positions_m: list[np.ndarray], quat_xyzw: np.ndarray, width_m: float = 0.08
) -> list[RobotTarget]:
    """Targets as the executor sends the rows of one stream: each names the next one (the last
    none), so the arm passes them moving and comes to rest at the last."""
    targets: list[RobotTarget] = []
    for p in reversed(positions_m):
        nxt = targets[-1] if targets else None
        targets.append(RobotTarget(width_m, ee_position_m=p, ee_quat_xyzw=quat_xyzw, next_target=nxt))
    return targets[::-1]
