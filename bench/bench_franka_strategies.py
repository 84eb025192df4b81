"""How should 10-Hz action chunks become FR3 motions? Each strategy streams the same 5 chunks of 10
targets (a 5 cm circle at ~8 cm/s) to franky-sim through FrankaRobot (the real franky/libfranka
path), and we measure the tracking error one period after each target was sent, how long the arm
stood still and the lowest speed around chunk boundaries.

    .venv/bin/python bench/bench_franka_strategies.py      # writes bench/results/franka_strategies.json

Reference (same run): ``preempt``, franky's plain asynchronous preempting CartesianMotion. Ratios
below 1 are better than the reference. ``waypoints`` sends each chunk as one
CartesianWaypointMotion (it cannot be streamed tick by tick, so it is measured here only).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from robot_server.robots.franka import FrankaConfig, FrankaRobot
from robot_server.robots.franka.fci_sim import FciSim
from robot_server.robots.franka.tracking import StateSampler, circle_targets, stream_targets, tracking_report

PERIOD_S = 0.1
CHUNK = 10
CHUNKS = 5
RADIUS_M = 0.05
REVOLUTION_S = 4.0
STRATEGIES = ("preempt", "timed_preempt", "impedance", "waypoints")
REFERENCE = "preempt"


def run_strategy(sim: FciSim, strategy: str, dynamics_factor: float) -> dict[str, float]:
    streaming = "timed_preempt" if strategy == "waypoints" else strategy
    robot = FrankaRobot(
        FrankaConfig(
            host=sim.host,
            realtime="ignore",
            streaming=streaming,  # type: ignore[arg-type]
            relative_dynamics_factor=dynamics_factor,
            home_dynamics_factor=0.6,
            gripper=False,
        )
    )
    robot.connect()
    try:
        robot.home()
        state = robot.read_state()
        quat = state.ee_quat_xyzw
        targets = circle_targets(state.ee_position_m, RADIUS_M, PERIOD_S, CHUNK * CHUNKS, REVOLUTION_S)

        def read() -> tuple[float, np.ndarray]:
            s = robot.read_state()
            return s.robot_time_s, s.ee_position_m

        with StateSampler(read) as sampler:
            wall_start = time.monotonic()
            if strategy == "waypoints":
                import franky

                arm = robot.franky_robot
                assert arm is not None  # connected by home() above
                for c in range(CHUNKS):
                    chunk = targets[c * CHUNK : (c + 1) * CHUNK]
                    now = sampler.now_s()
                    sampler.log.chunk_starts_s.append(now)
                    # One motion per chunk; franky plans through the waypoints, stopping at each.
                    motion = franky.CartesianWaypointMotion(
                        [franky.CartesianWaypoint(franky.Affine(t, quat)) for t in chunk]
                    )
                    for k, t in enumerate(chunk):
                        sampler.log.ticks.append((now + k * PERIOD_S, t))
                    arm.move(motion, asynchronous=True)
                    arm.join_motion(30.0)
            else:
                for k, (target, command) in enumerate(
                    zip(targets, stream_targets(targets, quat), strict=True)
                ):
                    if k % CHUNK == 0:
                        sampler.log.chunk_starts_s.append(sampler.now_s())
                    sampler.log.ticks.append((sampler.now_s(), target))
                    robot.command(command, PERIOD_S)
                    time.sleep(max(0.0, wall_start + (k + 1) * PERIOD_S - time.monotonic()))
            wall_s = time.monotonic() - wall_start
            time.sleep(0.3)
        robot.hold()
        report = tracking_report(sampler.log, PERIOD_S)
        report["wall_time_s"] = wall_s
        report["sim_speed"] = report["duration_s"] / max(wall_s - PERIOD_S, 1e-9)
        if strategy == "waypoints":
            # The chunks' nominal length is CHUNK * PERIOD_S; a slower chunk means stops in it.
            report["chunk_time_s"] = wall_s / CHUNKS
        return report
    finally:
        robot.disconnect()


def main() -> int:
    dynamics_factor = 0.3
    results: dict[str, object] = {
        "benchmark": "franka_strategies",
        "command": "python bench/bench_franka_strategies.py",
        "setup": {
            "trajectory": f"{CHUNKS} chunks x {CHUNK} targets at {1 / PERIOD_S:.0f} Hz on a "
            f"{RADIUS_M * 100:.0f} cm circle ({2 * np.pi * RADIUS_M / REVOLUTION_S:.3f} m/s)",
            "relative_dynamics_factor": dynamics_factor,
            "simulator": "franky-sim 1.0.4 (MuJoCo), realtime pacing, loopback",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}",
            "reference": REFERENCE,
            "tracking_error": "distance from the target one period after it was sent",
            "stop": "speed below 0.01 m/s while the reference moves at ~0.079 m/s",
        },
        "strategies": {},
    }
    strategies: dict[str, dict[str, float]] = {}
    with FciSim(realtime=True) as sim:
        for name in STRATEGIES:
            strategies[name] = run_strategy(sim, name, dynamics_factor)
            print(name, {k: round(v, 4) for k, v in strategies[name].items()}, flush=True)
    ref = strategies[REFERENCE]
    for report in strategies.values():
        report["tracking_error_mean_ratio_vs_reference"] = report["tracking_error_mean_m"] / max(
            ref["tracking_error_mean_m"], 1e-9
        )
        report["stopped_time_ratio_vs_reference"] = report["stopped_time_s"] / max(
            ref["stopped_time_s"], 1e-9
        )
    results["strategies"] = strategies
    smooth = [n for n in STRATEGIES if n != "waypoints" and strategies[n]["inter_chunk_stops"] == 0]
    results["chosen"] = min(smooth or list(STRATEGIES), key=lambda n: strategies[n]["tracking_error_mean_m"])
    out = Path(__file__).resolve().parent / "results" / "franka_strategies.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"chosen: {results['chosen']}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
