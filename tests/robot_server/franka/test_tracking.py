"""tracking_report on hand-made samples."""

from __future__ import annotations

import numpy as np

from robot_server.robots.franka.tracking import TrackingLog, tracking_report


def test_a_repeated_position_under_a_new_clock_is_not_a_stop_with_a_speed_window() -> None:
    # 0.1 m/s along x sampled every 4 ms, except one sample that repeats the previous position
    t = np.arange(0.0, 0.5, 0.004)
    x = 0.1 * t
    x[60] = x[59]  # a starved simulator: new clock, old state
    log = TrackingLog(
        samples=[(float(ti), np.array([xi, 0.0, 0.0])) for ti, xi in zip(t, x, strict=True)],
        ticks=[(float(s), np.array([0.1 * (s + 0.1), 0.0, 0.0])) for s in np.arange(0.0, 0.3, 0.1)],
    )
    assert tracking_report(log, 0.1)["speed_min_m_s"] < 0.01  # reads as a stop
    windowed = tracking_report(log, 0.1, speed_window_s=0.02)
    assert windowed["speed_min_m_s"] > 0.07 and windowed["stopped_time_s"] == 0.0
