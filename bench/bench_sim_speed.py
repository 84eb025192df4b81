"""Simulated FR3 speed vs real time: the scripted expert's episodes at 10 Hz control (50 physics
steps of 2 ms per tick, differential IK), with both 224x224 cameras rendered and JPEG-encoded
every control tick, as the robot server publishes them. Reference, same run: real time (sim
seconds / wall seconds = 1), plus the same loop without cameras and with cameras at 30 fps. The
machine is shared: the load average and the process's CPU time are recorded next to wall time.

    .venv/bin/python bench/bench_sim_speed.py [--episodes-per-task 2]
writes bench/results/sim_speed.json. Goal: >= 8x real time with two 224x224 cameras.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from robot_server.cameras.sim import SimCamera
from robot_server.robots.sim import SimRobot
from robot_server.sim.expert import CONTROL_RATE_HZ, Expert
from robot_server.sim.rollout import EeDeltaDriver, expert_rng
from robot_server.sim.tasks import load
from robot_server.sim.tasks.tabletop import TabletopTask
from robot_server.sim.world import CAMERA_NAMES, SimWorld, SimWorldConfig

TASKS = (
    "put_green_container_in_bowl",
    "open_top_drawer_and_put_tape_inside",
    "put_green_container_on_bottom_rack",
)
RESULT = Path(__file__).resolve().parent / "results" / "sim_speed.json"


def run(
    robot: SimRobot, cameras: list[SimCamera], frames_per_tick: int, episodes_per_task: int
) -> dict[str, float]:
    ticks = 0
    jpeg_bytes = 0
    wall = 0.0
    cpu = 0.0
    for task_name in TASKS:
        for seed in range(episodes_per_task):
            task = load(task_name)
            assert isinstance(task, TabletopTask)
            robot.home(task=task_name, seed=seed)
            driver = EeDeltaDriver(robot)
            expert = Expert(robot.world, task, expert_rng(seed), driver.pos, driver.quat_xyzw)
            t0, c0 = time.perf_counter(), time.process_time()
            while not expert.done:
                driver.step(expert.next_chunk(1)[0])
                robot.read_state()
                for _ in range(frames_per_tick):
                    for cam in cameras:
                        jpeg_bytes += len(cam.read().jpeg)
                ticks += 1
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
    sim_s = ticks / CONTROL_RATE_HZ
    return {
        "ticks": ticks,
        "sim_s": round(sim_s, 2),
        "wall_s": round(wall, 3),
        "x_real_time": round(sim_s / wall, 2),
        "ms_per_tick": round(1000 * wall / ticks, 3),
        # CPU seconds of this process (all its threads, renderer included): what the ratio would be
        # with a core to itself; the machine is shared, so wall time depends on the others' load
        "cpu_s": round(cpu, 3),
        "x_real_time_per_cpu_second": round(sim_s / cpu, 2),
        "mean_jpeg_bytes": round(jpeg_bytes / max(1, ticks * frames_per_tick * len(cameras))),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes-per-task", type=int, default=2)
    args = p.parse_args()
    world = SimWorld(SimWorldConfig(image_width=224, image_height=224))
    robot = SimRobot(world)
    robot.connect()
    cameras = [SimCamera(world, name) for name in CAMERA_NAMES]
    for c in cameras:
        c.connect()
    load_before = os.getloadavg()
    try:
        results = {
            "two_224_cameras_every_tick": run(robot, cameras, 1, args.episodes_per_task),
            "no_cameras": run(robot, [], 0, args.episodes_per_task),
            "two_224_cameras_30fps": run(robot, cameras, 3, args.episodes_per_task),
        }
    finally:
        world.close()
    out = {
        "bench": "sim_speed",
        "reference": "real time (ratio = simulated seconds / wall seconds)",
        "goal": ">= 8x real time with two 224x224 cameras",
        "goal_met": results["two_224_cameras_every_tick"]["x_real_time"] >= 8.0,
        "control_rate_hz": CONTROL_RATE_HZ,
        "physics_timestep_s": world.timestep_s,
        "tasks": list(TASKS),
        "episodes_per_task": args.episodes_per_task,
        "results": results,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "mujoco_gl": os.environ.get("MUJOCO_GL"),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "command": "python bench/bench_sim_speed.py --episodes-per-task " + str(args.episodes_per_task),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
