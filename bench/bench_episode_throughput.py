"""Episodes per core-second of the PDE benchmark's path, the reference code against this tree's, in
one run (a benchmark, not a timed test).

    python bench/bench_episode_throughput.py [--sft-checkpoint CKPT] [--reference REV]
        -> bench/results/episode_throughput.json

Each side runs the same small part through bench/pde_arm.py's ``run_arm`` (the real EpisodeLoop,
Actor, Trainer on a temporary SQLite store, and `pde robot-server --backend sim --pacing fast`):
the ``noise`` arm, ``--train-episodes`` loop episodes (one PPO update) and ``--eval-episodes``
held-out evaluation episodes. The reference side runs from a detached git worktree of
``--reference`` (default: the commit before the sim got cheaper), so both sides are the code of
their commit. Sides alternate within each round (reference first in even rounds) so that a loaded
machine weighs on both alike.

Cost is CPU time, not wall time: the worker process's (loop, actor, trainer, store) plus its robot
server's (physics, IK, rendering, messaging), read from /proc when the part ends. Also recorded:
the evaluation episodes' outcomes on both sides (fixed scenes and sampling seeds: equal when the
change leaves episodes bit-identical and no inference was late for the server's idle tick), a
hash of a fixed in-process sim trajectory per side, and the top entries of a cProfile of that
trajectory (the server's control tick: where its time goes).

    python bench/bench_episode_throughput.py --profiles default,fast
        -> bench/results/episode_throughput_profiles.json

compares two sim speed profiles (robot_server/sim/profile.py) instead: both sides run this tree,
the first ("reference") with PDE_ROBOT_SIM_PROFILE set to the first name, the second ("new") to
the second. Their episodes differ by design, so equal outcomes are not expected there.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The last commit before the sim's control tick was made cheaper (robot_server/sim/ik.py,
# robot_server/robots/sim/robot_sim.py) and the actor read a fast-paced chunk's end from the
# observation stream (learner/episode/session.py: chunk_end_on_stream): the reference path.
REFERENCE = "82d8d08"
DEFAULT_CKPT = ROOT / "data/paper_regime/sft-p0.075-seed0/policy-000000.pt"
TASK = "put_green_container_in_front_of_camera"
PROFILE_ENV = "PDE_ROBOT_SIM_PROFILE"  # the robot server's sim_profile setting, read by both sides


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sim_trace(profile_top: int) -> dict[str, Any]:
    """A fixed trajectory of the simulated arm in this process: its hash (bit-identical sides hash
    alike), its CPU per control tick, and cProfile's top entries by own time."""
    import cProfile
    import hashlib
    import pstats
    from dataclasses import replace

    import numpy as np

    from robot_server.robots.base import RobotTarget
    from robot_server.robots.sim import SimRobot
    from robot_server.sim.world import SimWorld, SimWorldConfig

    # The side's sim profile, where it has one (a reference commit may predate profiles)
    profile = os.environ.get(PROFILE_ENV, "")
    if profile:
        from robot_server.sim.profile import load_profile

        config = SimWorldConfig(
            image_width=32, image_height=32, layout_spread=0.2, profile=load_profile(profile)
        )
    else:
        config = SimWorldConfig(image_width=32, image_height=32, layout_spread=0.2)
    world = SimWorld(config)
    robot = SimRobot(world, workspace_m=((0.2, -0.4, 0.0), (0.8, 0.4, 0.6)))
    robot.connect()
    h, ticks, cpu_s = hashlib.sha256(), 0, 0.0
    prof = cProfile.Profile()
    for scene in range(3):
        robot.home(task=TASK, seed=1000 + scene)
        rng = np.random.default_rng(scene)
        state = robot.read_state()
        pos, quat = state.ee_position_m.copy(), state.ee_quat_xyzw.copy()
        for _ in range(12):
            rows = []
            for _ in range(10):
                pos = pos + rng.normal(0.0, 0.01, 3)
                width = float(rng.choice([0.0, 0.08]))
                rows.append(RobotTarget(gripper_width_m=width, ee_position_m=pos.copy(), ee_quat_xyzw=quat))
            for k, target in enumerate(rows):
                target = replace(target, next_target=rows[k + 1]) if k + 1 < len(rows) else target
                t0 = time.process_time()
                prof.runcall(robot.command, target, 0.1)
                cpu_s += time.process_time() - t0
                ticks += 1
                h.update(world.data.qpos.tobytes() + world.data.qvel.tobytes())
    world.close()
    stats = pstats.Stats(prof)
    rows_out = []
    for (file, line, fn), (_, ncalls, tottime, cumtime, _) in sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda kv: -kv[1][2],
    )[:profile_top]:
        where = file.split("site-packages/")[-1] if "site-packages/" in file else Path(file).name
        rows_out.append(
            {
                "function": f"{where}:{line}({fn})",
                "calls": ncalls,
                "own_s": round(tottime, 4),
                "cumulative_s": round(cumtime, 4),
            }
        )
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    return {
        "hash": h.hexdigest(),
        "ticks": ticks,
        "ms_cpu_per_tick_profiled": 1000 * cpu_s / ticks,
        "profiled_total_s": round(total, 3),
        "top_by_own_time": rows_out,
    }


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One side: a small part through this tree's run_arm and its robot server."""
    import torch
    from bench_learning import start_server  # the tree's own: its server runs the tree's code
    from pde_arm import BenchSettings, run_arm

    torch.set_num_threads(1)
    group, endpoint = start_server(Path(args.work_dir) / "logs", args.image_px, args.layout_spread)
    try:
        server_pid = group.services["robot"].process.pid  # type: ignore[union-attr]
        bench = BenchSettings(
            task=TASK,
            budget_episodes=args.train_episodes,
            eval_at=(0,),
            eval_episodes=args.eval_episodes,
            max_chunks=args.max_chunks,
            batch_size=args.train_episodes,  # one PPO update: the trainer's share is in the cost
        )
        cpu0, server0, wall0 = time.process_time(), proc_cpu_s(server_pid), time.perf_counter()
        part = run_arm("noise", 0, 0, Path(args.sft_checkpoint), endpoint, bench, None, None)
        cpu_s, server_s = time.process_time() - cpu0, proc_cpu_s(server_pid) - server0
        wall_s = time.perf_counter() - wall0
    finally:
        group.stop_all()
    episodes = part["episodes"]
    n = len(episodes)
    return {
        "episodes": n,
        "worker_cpu_s": round(cpu_s, 2),
        "server_cpu_s": round(server_s, 2),
        "wall_s": round(wall_s, 1),
        "episodes_per_core_s": n / (cpu_s + server_s),
        "eval_outcomes": [bool(e["success"]) for e in episodes if e["kind"] == "eval"],
        "train_outcomes": [bool(e["success"]) for e in episodes if e["kind"] == "train"],
        "sim_trace": sim_trace(args.profile_top),
    }


def run_side(tree: Path, args: argparse.Namespace, work_dir: Path, sim_profile: str = "") -> dict[str, Any]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--tree",
        str(tree),
        "--work-dir",
        str(work_dir),
        "--sft-checkpoint",
        str(args.sft_checkpoint),
        "--train-episodes",
        str(args.train_episodes),
        "--eval-episodes",
        str(args.eval_episodes),
        "--max-chunks",
        str(args.max_chunks),
        "--image-px",
        str(args.image_px),
        "--layout-spread",
        str(args.layout_spread),
        "--profile-top",
        str(args.profile_top),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl"}
    if sim_profile:  # the worker's robot server (a child) and its sim trace read it
        env[PROFILE_ENV] = sim_profile
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the side at {tree} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def git(*argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *argv], capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-checkpoint", type=Path, default=DEFAULT_CKPT, help="the policy both sides run")
    ap.add_argument("--reference", default=REFERENCE, help="the reference path's commit")
    ap.add_argument("--rounds", type=int, default=2, help="each round runs both sides once")
    ap.add_argument("--train-episodes", type=int, default=16, help="loop episodes per side (one PPO update)")
    ap.add_argument("--eval-episodes", type=int, default=8, help="held-out evaluation episodes per side")
    ap.add_argument("--max-chunks", type=int, default=20)
    ap.add_argument("--image-px", type=int, default=128, help="the sim's render size (bench_pde's default)")
    ap.add_argument("--layout-spread", type=float, default=0.2)
    ap.add_argument("--profile-top", type=int, default=12)
    ap.add_argument(
        "--profiles",
        default="",
        help="A,B: compare sim profiles A (reference) and B (new) on this tree instead of two commits",
    )
    ap.add_argument("--out", type=Path, help="default: bench/results/episode_throughput[_profiles].json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:  # this tree's code only: drop this file's folder, put the tree's first
        sys.path[:] = [str(args.tree / "bench"), str(args.tree)] + [
            p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent
        ]
        print(json.dumps(worker(args)))
        return 0
    profiles = args.profiles.split(",") if args.profiles else []
    if profiles:
        from robot_server.sim.profile import load_profile

        if len(profiles) != 2:
            raise SystemExit(f"--profiles {args.profiles!r}: name two profiles, e.g. default,fast")
        for name in profiles:
            try:
                load_profile(name)
            except ValueError as e:
                raise SystemExit(f"--profiles: {e}") from None
    if args.out is None:
        args.out = ROOT / (
            "bench/results/episode_throughput_profiles.json"
            if profiles
            else "bench/results/episode_throughput.json"
        )
    if not args.sft_checkpoint.is_file():
        raise SystemExit(
            f"--sft-checkpoint {args.sft_checkpoint}: no such file (scripts/premise.sh makes one)"
        )
    # A SIGTERM unwinds like Ctrl-C, so the reference worktree is removed (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = "python bench/bench_episode_throughput.py " + " ".join(sys.argv[1:] if argv is None else argv)
    head = git("rev-parse", "HEAD")
    reference = head if profiles else git("rev-parse", args.reference)
    side_profiles = dict(zip(("reference", "new"), profiles, strict=True)) if profiles else {}
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pde-throughput-") as tmp:
        ref_tree = Path(tmp) / "reference"
        if profiles:
            ref_tree = ROOT
        else:
            git("worktree", "add", "--detach", str(ref_tree), reference)
        try:
            for r in range(args.rounds):
                sides = {"reference": ref_tree, "new": ROOT}
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                done = {}
                for name in order:
                    done[name] = run_side(
                        sides[name], args, Path(tmp) / f"{name}-{r}", side_profiles.get(name, "")
                    )
                    print(
                        f"round {r} {name}: {done[name]['episodes_per_core_s']:.3f} episodes/core-s",
                        flush=True,
                    )
                rounds.append({"order": order, **done})
        finally:
            if not profiles:
                git("worktree", "remove", "--force", str(ref_tree))

    def total(side: str) -> dict[str, float]:
        eps = sum(r[side]["episodes"] for r in rounds)
        cpu = sum(r[side]["worker_cpu_s"] + r[side]["server_cpu_s"] for r in rounds)
        server = sum(r[side]["server_cpu_s"] for r in rounds)
        return {
            "episodes": eps,
            "core_s": round(cpu, 2),
            "server_core_s": round(server, 2),
            "episodes_per_core_s": eps / cpu,
        }

    ref, new = total("reference"), total("new")
    # Equal outcomes need every inference to end before the fast-paced server's next idle tick
    # (100 ms): on a loaded machine a late one can move an episode on either side, so each side's
    # agreement with itself across rounds is recorded beside the comparison.
    same_eval = [r["reference"]["eval_outcomes"] == r["new"]["eval_outcomes"] for r in rounds]
    self_consistent = {
        side: len({tuple(r[side]["eval_outcomes"]) for r in rounds}) == 1 for side in ("reference", "new")
    }
    same_trace = len({r[s]["sim_trace"]["hash"] for r in rounds for s in ("reference", "new")}) == 1
    result = {
        "command": command,
        "commits": {"reference": reference, "new": head},
        "setup": {
            "arm": "noise",
            "task": TASK,
            "train_episodes": args.train_episodes,
            "eval_episodes": args.eval_episodes,
            "max_chunks": args.max_chunks,
            "image_px": args.image_px,
            "layout_spread": args.layout_spread,
            "sft_checkpoint": str(args.sft_checkpoint),
            "rounds": args.rounds,
            "sim_profiles": side_profiles or "the server's default on both sides",
            "cost": "CPU seconds of the worker process + its robot server, not wall time",
        },
        "reference": ref,
        "new": new,
        "speedup": new["episodes_per_core_s"] / ref["episodes_per_core_s"],
        "eval_outcomes_identical_per_round": same_eval,
        "eval_outcomes_same_in_every_round": self_consistent,
        "sim_trace_identical": same_trace,
        "profile_top": {
            side: rounds[-1][side]["sim_trace"]["top_by_own_time"] for side in ("reference", "new")
        },
        "sim_ms_cpu_per_tick_profiled": {
            side: [round(r[side]["sim_trace"]["ms_cpu_per_tick_profiled"], 3) for r in rounds]
            for side in ("reference", "new")
        },
        "rounds": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(
        f"reference {ref['episodes_per_core_s']:.3f}, new {new['episodes_per_core_s']:.3f} episodes/core-s: "
        f"x{result['speedup']:.2f}; evaluation outcomes identical per round: {same_eval} (each side "
        f"alike in every round: {self_consistent}); "
        f"sim trace identical: {same_trace}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
