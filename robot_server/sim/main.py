"""``pde sim ...``: tools for the simulated tabletop.

pde sim tasks                                           list the tasks and canonical prompts
pde sim record --tasks all --episodes-per-task 40 --out data/demos
pde sim pictures --out data/pictures                    PNG of both cameras per task, start/end
pde sim eval-expert --tasks all --seeds 20              the expert's success table

``pde sim export-lerobot`` moved to ``pde data export-lerobot`` (pde_storage/main.py); the old
spelling still runs it, after saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("MUJOCO_GL", "egl")


def _tasks(value: str) -> list[str]:
    from robot_server.sim.tasks import TASK_NAMES

    if value == "all":
        return list(TASK_NAMES)
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in TASK_NAMES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown task(s) {bad}; valid: all, {', '.join(TASK_NAMES)}")
    return names


def _size(value: str) -> tuple[int, int]:
    try:
        w, _, h = value.lower().partition("x")
        size = (int(w), int(h or w))
    except ValueError:
        raise argparse.ArgumentTypeError(f"image size {value!r}: use WIDTHxHEIGHT, e.g. 224x224") from None
    if min(size) < 8 or max(size) > 2048:
        raise argparse.ArgumentTypeError(f"image size {value!r}: each side must be 8..2048 pixels")
    return size


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pde sim", description="simulated tabletop tools")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("tasks", help="list the tasks and their canonical prompts")
    rec = sub.add_parser("record", help="record scripted-expert demonstrations (EpisodeFile per episode)")
    rec.add_argument("--tasks", type=_tasks, default="all", help="'all' or comma-separated task names")
    rec.add_argument("--episodes-per-task", type=int, default=40)
    rec.add_argument("--out", required=True, help="output directory")
    rec.add_argument("--image-size", type=_size, default=(224, 224), help="WIDTHxHEIGHT of both cameras")
    rec.add_argument("--chunk-rows", type=int, default=10, help="action rows per chunk (10 Hz)")
    rec.add_argument("--seed", type=int, default=0, help="base seed")
    rec.add_argument("--keep-failed", action="store_true", help="also write episodes the expert failed")
    rec.add_argument(
        "--layout-spread",
        type=float,
        default=1.0,
        help="how far resets scatter the objects, 0..1 (default 1: the whole layout box, any yaw)",
    )
    pic = sub.add_parser("pictures", help="PNG of both camera views per task at start and end")
    pic.add_argument("--out", required=True)
    pic.add_argument("--tasks", type=_tasks, default="all")
    pic.add_argument("--seed", type=int, default=0)
    pic.add_argument("--size", type=int, default=448, help="pixels per camera view (square)")
    ev = sub.add_parser("eval-expert", help="the expert's success rate per task over seeds")
    ev.add_argument("--tasks", type=_tasks, default="all")
    ev.add_argument("--seeds", type=int, default=20)
    ev.add_argument("--json", help="also write the table to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export-lerobot"]:
        print(
            "pde sim export-lerobot is deprecated: it moved to `pde data export-lerobot` (same options)",
            file=sys.stderr,
        )
        from pde_storage.main import main as data_main

        return data_main(argv)
    args = _parser().parse_args(argv)
    tasks = (
        args.tasks
        if isinstance(getattr(args, "tasks", None), list)
        else _tasks(getattr(args, "tasks", "all"))
    )
    if args.command == "tasks":
        from robot_server.sim.tasks import CANONICAL_PROMPTS

        for i, (name, prompt) in enumerate(CANONICAL_PROMPTS.items(), 1):
            print(f"{i:2d}  {name:<50} {prompt}")
        return 0
    if args.command == "record":
        return _record(args, tasks)
    if args.command == "pictures":
        from robot_server.sim.pictures import make_pictures

        for path in make_pictures(args.out, tasks, seed=args.seed, size_px=args.size):
            print(path)
        return 0
    if args.command == "eval-expert":
        return _eval_expert(tasks, args.seeds, args.json)
    return 2


def _record(args: argparse.Namespace, tasks: list[str]) -> int:
    from tqdm import tqdm

    from robot_server.sim.recorder import RecordConfig, record_demos

    if args.episodes_per_task < 1:
        print(
            f"pde sim record: --episodes-per-task {args.episodes_per_task} must be at least 1",
            file=sys.stderr,
        )
        return 2
    config = RecordConfig(
        tasks=tasks,
        episodes_per_task=args.episodes_per_task,
        image_width=args.image_size[0],
        image_height=args.image_size[1],
        chunk_rows=args.chunk_rows,
        base_seed=args.seed,
        keep_failed=args.keep_failed,
        layout_spread=args.layout_spread,
    )
    t0 = time.perf_counter()
    with tqdm(total=len(tasks) * args.episodes_per_task, unit="ep", desc="demos") as bar:
        done: dict[str, int] = {}

        def progress(task: str, success: bool) -> None:
            if success or args.keep_failed:
                done[task] = done.get(task, 0) + 1
                bar.update(1)
            bar.set_postfix_str(task[:32])

        reports = record_demos(args.out, config, progress)
    wall = time.perf_counter() - t0
    short = False
    for r in reports.values():
        print(f"{r.task:<50} recorded {r.recorded:3d}  expert success {r.successes}/{r.attempts}")
        short |= r.recorded < args.episodes_per_task
    print(f"wrote {sum(r.recorded for r in reports.values())} episodes to {args.out} in {wall:.1f} s")
    if short:
        print("some tasks have fewer episodes than asked: the expert failed too often", file=sys.stderr)
        return 1
    return 0


def _eval_expert(tasks: list[str], n_seeds: int, json_path: str | None) -> int:
    from robot_server.robots.sim import SimRobot
    from robot_server.sim.rollout import run_expert_episode
    from robot_server.sim.world import SimWorld

    world = SimWorld()
    robot = SimRobot(world)
    robot.connect()
    table = {}
    try:
        for task in tasks:
            wins = sum(bool(run_expert_episode(robot, task, seed).success) for seed in range(n_seeds))
            table[task] = {"successes": wins, "seeds": n_seeds, "rate": wins / n_seeds}
            print(f"{task:<50} {wins:2d}/{n_seeds}", flush=True)
    finally:
        world.close()
    if json_path:
        with open(json_path, "w") as f:
            json.dump(table, f, indent=1)
    return 0 if all(v["rate"] >= 0.9 for v in table.values()) else 1
