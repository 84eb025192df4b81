"""How far the *measured* simulated TCP gets outside the workspace box, and how far it moves in one
control tick, under chunks that push at every face, edge and corner of the box (10x the per-tick
step every row), with and without random rotations. Runs the real executor, safety layer and
SimRobot (fast pacing) and reads the measured state after every tick.

    python bench/bench_sim_limits.py --seeds 3
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from _common import write_result

from pde_contract.messages import ActionChunk, ActionSpace, RobotState
from robot_server.executor import ChunkExecutor, ExecutorConfig
from robot_server.robots.sim import SimRobot
from robot_server.safety import SafetyLimits
from robot_server.sim.world import SimWorld, SimWorldConfig


def run(rotate: bool, seed: int, limits: SafetyLimits, rows: int = 20) -> dict[str, float]:
    world = SimWorld(SimWorldConfig(scene="table"))
    robot = SimRobot(
        world,
        max_tcp_step_m=limits.max_step_translation_m,
        workspace_m=(limits.workspace_min_m, limits.workspace_max_m),
    )
    robot.connect()
    states: list[RobotState] = []
    ex = ChunkExecutor(
        robot, ExecutorConfig(realtime=False, heartbeat_timeout_s=0, limits=limits), on_tick=states.append
    )
    ex.start()
    rng = np.random.default_rng(seed)
    walls = [np.array(v, float) for v in itertools.product((-1.0, 0.0, 1.0), repeat=3) if any(v)]
    try:
        for seq, wall in enumerate(walls * 2):
            a = np.zeros((rows, 7))
            a[:, :3] = 0.5 * wall / np.linalg.norm(wall)
            if rotate:
                a[:, 3:6] = rng.normal(0.0, 0.5, size=(rows, 3))
            a[:, 6] = 0.08
            chunk = ActionChunk(
                seq=seq, episode_id="e", action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=10.0
            )
            ex.submit(chunk, b"bench")
            while ex.snapshot().executing_chunk_seq >= 0:
                time.sleep(0.002)
            n = len(states)
            while len(states) < n + 2:  # a few holding ticks
                time.sleep(0.01)
    finally:
        ex.close()
        world.close()
    p = np.array([s.ee_position_m for s in states])
    lo, hi = np.array(limits.workspace_min_m), np.array(limits.workspace_max_m)
    outside = np.linalg.norm(np.maximum(lo - p, 0.0) + np.maximum(p - hi, 0.0), axis=1)
    step = np.linalg.norm(np.diff(p, axis=0), axis=1)
    return {
        "ticks": len(p),
        "max_outside_box_mm": round(float(outside.max()) * 1000, 1),
        "max_step_per_tick_mm": round(float(step.max()) * 1000, 1),
        "ticks_over_step_limit_plus_5mm": int((step > limits.max_step_translation_m + 0.005).sum()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    limits = SafetyLimits()
    runs = [
        {"seed": seed, "rotate": rotate, **run(rotate, seed, limits)}
        for seed in range(args.seeds)
        for rotate in (False, True)
    ]
    for r in runs:
        print(r, flush=True)
    write_result(
        "sim_limits",
        {"per_tick_step_limit_m": limits.max_step_translation_m, "runs": runs},
        " ".join(["python", *sys.argv]),
    )


if __name__ == "__main__":
    main()
