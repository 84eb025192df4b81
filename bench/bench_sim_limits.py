"""How far the *measured* simulated TCP gets outside the workspace box, and how far it moves in one
control tick, under chunks that push at every face, edge and corner of the box (10x the per-tick
step every row), with and without random rotations; then (once) joint_abs targets anywhere (30
random 8-row chunks) and chunks at exactly the step limit in every direction both ways (the servo's
lag catching up). Runs the real executor, safety layer and SimRobot (fast pacing) and reads the
measured state after every tick.

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
from robot_server.safety import FR3_JOINT_LOWER_RAD, FR3_JOINT_UPPER_RAD, SafetyLimits
from robot_server.sim.world import SimWorld, SimWorldConfig

WALLS = [np.array(v, float) for v in itertools.product((-1.0, 0.0, 1.0), repeat=3) if any(v)]


def chunks(
    pattern: str, seed: int, limits: SafetyLimits, rows: int = 20
) -> list[tuple[ActionSpace, np.ndarray]]:
    """The pattern's chunks: "walls" / "walls_rotate" (10x the step into every wall direction,
    twice round), "joint_abs" (joint targets anywhere), "at_the_limit" (exactly the step)."""
    rng = np.random.default_rng(seed)
    out = []
    if pattern.startswith("walls"):
        for wall in WALLS * 2:
            a = np.zeros((rows, 7))
            a[:, :3] = 0.5 * wall / np.linalg.norm(wall)
            if pattern == "walls_rotate":
                a[:, 3:6] = rng.normal(0.0, 0.5, size=(rows, 3))
            a[:, 6] = 0.08
            out.append((ActionSpace.EE_DELTA, a))
    elif pattern == "joint_abs":
        for _ in range(30):
            a = np.zeros((8, 8))
            a[:, :7] = rng.uniform(FR3_JOINT_LOWER_RAD - 0.5, FR3_JOINT_UPPER_RAD + 0.5, size=(8, 7))
            a[:, 7] = 0.04
            out.append((ActionSpace.JOINT_ABS, a))
    else:
        for wall, sign in itertools.product(WALLS, (1.0, -1.0)):
            a = np.zeros((8, 7))
            a[:, :3] = sign * limits.max_step_translation_m * wall / np.linalg.norm(wall)
            a[:, 6] = 0.08
            out.append((ActionSpace.EE_DELTA, a))
    return out


def run(pattern: str, seed: int, limits: SafetyLimits) -> dict[str, float]:
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
    try:
        for seq, (space, a) in enumerate(chunks(pattern, seed, limits)):
            chunk = ActionChunk(seq=seq, episode_id="e", action_space=space, actions=a, control_rate_hz=10.0)
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
        "ticks_over_step_limit": int((step > limits.max_step_translation_m).sum()),
        "ticks_over_step_limit_plus_5mm": int((step > limits.max_step_translation_m + 0.005).sum()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    limits = SafetyLimits()
    runs = [
        {"seed": seed, "pattern": pattern, **run(pattern, seed, limits)}
        for seed in range(args.seeds)
        for pattern in ("walls", "walls_rotate")
    ]
    runs += [
        {"seed": 2, "pattern": pattern, **run(pattern, 2, limits)}
        for pattern in ("joint_abs", "at_the_limit")
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
