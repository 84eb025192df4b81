"""The scripted expert under each sim speed profile (robot_server/sim/profile.py): does the fast
profile keep the benchmark task physically sound? (a benchmark, not a timed test)

    python bench/bench_sim_profiles.py [--seeds 30] [--spreads 0.2,1.0] [--tasks all]
        -> bench/results/sim_profiles.json

For each task (default: the PDE benchmark's), layout spread and profile, the expert
(robot_server/sim/rollout.py, the loop `pde sim record` runs) plays seeds 0..N-1; recorded: its
successes, the chunks
it needed, and the CPU seconds of this process (physics + IK; no rendering: the expert reads the
simulator's state). Same seeds under both profiles; the episodes themselves differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _common

from robot_server.robots.sim import SimRobot
from robot_server.sim.profile import SIM_PROFILES, load_profile
from robot_server.sim.rollout import run_expert_episode
from robot_server.sim.tasks import TASK_NAMES
from robot_server.sim.world import SimWorld, SimWorldConfig

TASK = "put_green_container_in_front_of_camera"  # bench/pde_arm.py's default task


def expert_runs(task: str, profile: str, spread: float, seeds: range) -> dict[str, Any]:
    world = SimWorld(
        SimWorldConfig(image_width=32, image_height=32, layout_spread=spread, profile=load_profile(profile))
    )
    try:
        robot = SimRobot(world)  # as `pde sim record` builds it (no workspace box of its own)
        robot.connect()
        t0 = time.process_time()
        outcomes, chunks = [], []
        for seed in seeds:
            ep = run_expert_episode(robot, task, seed)
            outcomes.append(bool(ep.success))
            chunks.append(len(ep.chunks))
        cpu_s = time.process_time() - t0
    finally:
        world.close()
    return {
        "successes": sum(outcomes),
        "seeds": len(outcomes),
        "failed_seeds": [s for s, ok in zip(seeds, outcomes, strict=True) if not ok],
        "mean_chunks": round(sum(chunks) / len(chunks), 2),
        "cpu_s": round(cpu_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30, help="seeds 0..N-1 per profile and spread")
    ap.add_argument("--spreads", default="0.2,1.0", help="layout spreads (bench_pde's default: 0.2)")
    ap.add_argument("--tasks", default=TASK, help="comma-separated task names, or all")
    ap.add_argument("--out", type=Path, default=_common.RESULTS_DIR / "sim_profiles.json")
    args = ap.parse_args(argv)
    spreads = [float(s) for s in args.spreads.split(",")]
    tasks = list(TASK_NAMES) if args.tasks == "all" else args.tasks.split(",")
    results: dict[str, Any] = {}
    for task in tasks:
        for spread in spreads:
            for name in SIM_PROFILES:
                r = expert_runs(task, name, spread, range(args.seeds))
                results.setdefault(task, {}).setdefault(f"spread{spread:g}", {})[name] = r
                print(
                    f"{task} {spread:g} {name}: {r['successes']}/{r['seeds']}, {r['cpu_s']} CPU s", flush=True
                )
    runs = [by_profile for t in results.values() for by_profile in t.values()]
    totals = {
        name: {
            "successes": sum(r[name]["successes"] for r in runs),
            "episodes": sum(r[name]["seeds"] for r in runs),
            "cpu_s": round(sum(r[name]["cpu_s"] for r in runs), 2),
        }
        for name in SIM_PROFILES
    }
    out = {
        "command": "python bench/bench_sim_profiles.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "benchmark_task": TASK,
        "totals": totals,
        "profiles": {n: vars(p) for n, p in SIM_PROFILES.items()},
        "cost": "CPU seconds of this one process (physics + IK), not wall time; "
        "other processes shared the machine",
        "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
        "expert": results,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
