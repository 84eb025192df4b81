"""Learning check (a benchmark, not a timed test): from the weak SFT policy, plain single-prompt PPO
on the canonical prompt raises canonical-prompt success on a simulated task, over 3 seeds.

One command (records demos, trains the SFT start, runs everything; cached steps are reused):

    .venv/bin/python bench/bench_learning.py            -> bench/results/learning.json + learning.png

Pipeline: scripted-expert demos (robot_server.sim, written as EpisodeFiles) -> `learner.sft` (cached)
-> a `pde robot-server --backend sim --pacing fast` subprocess -> per seed: evaluate the SFT policy
on fixed evaluation scenes, then PPO iterations (collect episodes with the actor under the canonical
prompt, terminal reward from the simulator's success check, one Trainer.update), then evaluate again
on the same scenes. The learner talks to the simulator only through the robot server.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

from _common import SIM_SERVER_WATCHDOG_ENV, success_interval  # noqa: E402

from learner.actor import Actor, ActorSettings  # noqa: E402
from learner.checkpoints import CheckpointStore  # noqa: E402
from learner.policies import flow_sde  # noqa: E402
from learner.policies.base import Policy  # noqa: E402
from learner.policies.vla import SmallVLAPolicy, VLAConfig  # noqa: E402
from learner.ppo import PPOConfig  # noqa: E402
from learner.rewards import reward_from_label  # noqa: E402
from learner.sft import SFTConfig, run_sft  # noqa: E402
from learner.trainer import Trainer  # noqa: E402
from pde.health import as_probe, check_robot_server  # noqa: E402
from pde.procs import ProcessGroup  # noqa: E402
from pde_contract.client import RobotClient  # noqa: E402
from pde_contract.episodes import EpisodeFile, write_episode  # noqa: E402

EVAL_SEED_BASE = 100_000  # evaluation scenes never used for demos or training
TRAIN_SEED_BASE = 200_000


def record_demos(demo_dir: Path, tasks: list[str], per_task: int, image_px: int, spread: float) -> None:
    """Scripted-expert demonstrations (the sim team's expert), skipped when already there."""
    todo = [t for t in tasks if len(list((demo_dir / t).glob("*.msgpack"))) < per_task]
    if not todo:
        return
    from robot_server.cameras.sim import SimCamera
    from robot_server.robots.sim import SimRobot
    from robot_server.sim.rollout import run_expert_episode
    from robot_server.sim.world import SimWorld, SimWorldConfig

    world = SimWorld(SimWorldConfig(image_width=image_px, image_height=image_px, layout_spread=spread))
    robot = SimRobot(world)
    robot.connect()
    cams = [SimCamera(world, "external"), SimCamera(world, "wrist")]
    for c in cams:
        c.connect()
    for task in todo:
        for seed in range(per_task):
            ep = run_expert_episode(robot, task, seed, cams)
            write_episode(demo_dir / task / f"{task}-{seed:04d}.msgpack", ep)
        print(f"recorded {per_task} demos of {task}", flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    log_dir: Path, image_px: int, spread: float, sim_profile: str = ""
) -> tuple[ProcessGroup, str]:
    """``sim_profile``: the server's --sim-profile (robot_server/sim/profile.py); "" leaves it to
    the server's settings (PDE_ROBOT_SIM_PROFILE, else the default)."""
    cmd_port, obs_port = free_port(), free_port()
    group = ProcessGroup(log_dir)
    argv = [
        sys.executable,
        "-m",
        "pde",
        "robot-server",
        "--backend",
        "sim",
        "--pacing",
        "fast",
        "--image-size",
        f"{image_px}x{image_px}",
        "--sim-layout-spread",
        str(spread),
        "--cmd-port",
        str(cmd_port),
        "--obs-port",
        str(obs_port),
    ]
    if sim_profile:
        argv += ["--sim-profile", sim_profile]
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl", **SIM_SERVER_WATCHDOG_ENV}
    group.start("robot", argv, env=env)
    endpoint = f"tcp://127.0.0.1:{cmd_port}"

    group.wait_healthy("robot", as_probe(lambda: check_robot_server(endpoint, 0.5)), timeout_s=180)
    return group, endpoint


def rollouts(
    actor: Actor, task: str, prompt: str, seeds: list[int], max_chunks: int, tag: str
) -> list[EpisodeFile]:
    eps = []
    for s in seeds:
        eps.append(
            actor.run_episode(
                episode_id=f"{tag}-{s}",
                task=task,
                canonical_prompt=prompt,
                rollout_prompt=prompt,
                max_chunks=max_chunks,
                seed=s,
            )
        )
    return eps


def training_seeds(rng: np.random.Generator, it: int, args: argparse.Namespace) -> list[int]:
    """Scene seeds of one PPO iteration: episodes_per_iteration / group_size scenes, each rolled
    out group_size times (the group advantage compares rollouts of the same scene)."""
    n_scenes = max(1, args.episodes_per_iteration // args.group_size)
    if args.train_scenes:  # a fixed set of training scenes, cycled
        scenes = [TRAIN_SEED_BASE + (it * n_scenes + i) % args.train_scenes for i in range(n_scenes)]
    else:
        scenes = [int(s) for s in TRAIN_SEED_BASE + rng.integers(0, 1_000_000, n_scenes)]
    return [s for s in scenes for _ in range(args.group_size)][: args.episodes_per_iteration]


def success_rate(eps: list[EpisodeFile]) -> float:
    return float(np.mean([bool(e.success) for e in eps]))


def plot(curves: dict[str, list[float]], evals: list[str], title: str, path: Path) -> None:
    """Success per PPO iteration per seed (thin) and their mean (thick), drawn with OpenCV."""
    w, h, m = 720, 440, 60
    img = np.full((h, w, 3), 255, np.uint8)
    n = max(len(c) for c in curves.values())
    x = lambda i: int(m + (w - 2 * m) * i / max(1, n - 1))  # noqa: E731
    y = lambda v: int(h - m - (h - 2 * m) * v)  # noqa: E731
    cv2.line(img, (m, h - m), (w - m, h - m), (0, 0, 0), 1)
    cv2.line(img, (m, m), (m, h - m), (0, 0, 0), 1)
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        cv2.putText(img, f"{v:.2f}", (5, y(v) + 4), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1)
        cv2.line(img, (m, y(v)), (w - m, y(v)), (220, 220, 220), 1)
    for i in range(n):
        cv2.putText(img, str(i), (x(i) - 4, h - m + 18), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1)
    colors = [(200, 80, 80), (80, 160, 80), (80, 80, 200), (160, 80, 160)]
    for k, (name, c) in enumerate(curves.items()):
        pts = np.array([(x(i), y(v)) for i, v in enumerate(c)], np.int32)
        cv2.polylines(img, [pts], False, colors[k % len(colors)], 1)
        cv2.putText(
            img, name, (w - m - 120, m + 15 * k), cv2.FONT_HERSHEY_SIMPLEX, 0.4, colors[k % len(colors)], 1
        )
    mean = np.mean([c for c in curves.values()], axis=0)
    cv2.polylines(img, [np.array([(x(i), y(v)) for i, v in enumerate(mean)], np.int32)], False, (0, 0, 0), 3)
    cv2.putText(img, title, (m, 25), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1)
    for i, line in enumerate(evals):
        cv2.putText(img, line, (m, 42 + 13 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (0, 0, 0), 1)
    cv2.putText(
        img,
        "PPO iteration (0 = SFT policy)",
        (w // 2 - 100, h - 15),
        cv2.FONT_HERSHEY_SIMPLEX,
        0.45,
        (0, 0, 0),
        1,
    )
    cv2.imwrite(str(path), img)


def eval_summary(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean success before/after PPO over seeds and how many seeds improved, for the sampled
    evaluation and (when run) the mean-chunk one."""
    out: dict[str, Any] = {}
    for key, name in (
        ("eval_success", "seeds_improved"),
        ("eval_mean_chunk_success", "seeds_improved_mean_chunk"),
    ):
        before = [float(r.get(f"{key}_before", float("nan"))) for r in per_seed]
        after = [float(r.get(f"{key}_after", float("nan"))) for r in per_seed]
        if any(np.isnan(before + after)):
            continue
        out[f"{key}_before_mean"] = float(np.mean(before))
        out[f"{key}_after_mean"] = float(np.mean(after))
        n = sum(int(r.get("eval_episodes", 0)) for r in per_seed)
        if n:
            for when, rates in (("before", before), ("after", after)):
                k = round(
                    sum(rate * int(r["eval_episodes"]) for rate, r in zip(rates, per_seed, strict=True))
                )
                out[f"{key}_{when}_pooled"] = success_interval(k, n)
        out[name] = int(sum(a > b for a, b in zip(after, before, strict=True)))
    return out


def eval_lines(per_seed: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in per_seed:
        line = f"seed {r['seed']}: eval sampled {r['eval_success_before']:.2f}->{r['eval_success_after']:.2f}"
        if not np.isnan(float(r.get("eval_mean_chunk_success_before", float("nan")))):
            b, a = r["eval_mean_chunk_success_before"], r["eval_mean_chunk_success_after"]
            line += f", mean chunk {b:.2f}->{a:.2f}"
        lines.append(line)
    return lines


def set_flow_noise_level(policy: Policy, level: float) -> None:
    """The flow-SDE exploration scale a (sigma_i = a * sqrt(t_i / (1 - t_i))) PPO samples with; SFT
    fits only the velocity field, so the same checkpoint serves any a."""
    if not isinstance(policy, SmallVLAPolicy) or policy.config.head != "flow":
        raise SystemExit("--flow-noise-level needs the small policy's flow head")
    policy.schedule = flow_sde.make_schedule(policy.config.flow_steps, level)
    policy.config = dataclasses.replace(policy.config, flow_noise_level=level)


def run_seed(
    sft_policy: Policy, endpoint: str, args: argparse.Namespace, seed: int, prompt: str
) -> dict[str, Any]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    policy = copy.deepcopy(sft_policy)
    if args.init_log_std is not None:
        noise = policy.noise_parameters()
        if not noise:
            raise SystemExit("--init-log-std needs the Gaussian head (the flow chain's noise is fixed)")
        with torch.no_grad():
            noise[0].fill_(args.init_log_std)
    if args.flow_noise_level is not None:
        set_flow_noise_level(policy, args.flow_noise_level)
    cfg = PPOConfig(
        ratio_variant="plain",
        advantage=args.advantage,
        ratio_unit=args.ratio_unit,
        learning_rate=args.lr,
        value_learning_rate=args.value_lr,
        noise_learning_rate=args.noise_lr,
        minibatch_size=args.minibatch,
        seed=seed,
        ent_coef=0.0,
        update_epochs=args.epochs,
        target_kl=args.target_kl or None,
    )
    trainer = Trainer(policy, cfg)
    eval_seeds = [EVAL_SEED_BASE + i for i in range(args.eval_episodes)]
    out: dict[str, Any] = {"seed": seed}
    with RobotClient(cmd_endpoint=endpoint, name=f"bench-{seed}", timeout_s=10.0) as client:
        client.connect()  # the server's control rate and pacing, for the actor
        actor = Actor(policy, client, ActorSettings(obs_timeout_s=10.0))
        # Evaluation on fixed scenes: sampled chunks (what PPO optimises) and the mean chunk (no
        # sampling noise: tells a better mean apart from less exploration noise).
        mean_actor = Actor(
            policy,
            client,
            ActorSettings(obs_timeout_s=10.0, deterministic=True),
        )

        def evaluate(tag: str) -> tuple[float, float]:
            # Checked with reset seeds, these scenes are the same for every seed, arm and update.
            sampled = rollouts(actor, args.task, prompt, eval_seeds, args.max_chunks, f"{tag}-sampled")
            if not args.eval_mean_chunk:
                return success_rate(sampled), float("nan")
            mean = rollouts(mean_actor, args.task, prompt, eval_seeds, args.max_chunks, f"{tag}-mean")
            return success_rate(sampled), success_rate(mean)

        t0 = time.perf_counter()
        out["eval_success_before"], out["eval_mean_chunk_success_before"] = evaluate("eval-pre")
        print(
            f"seed {seed}: eval before PPO {out['eval_success_before']:.2f} "
            f"(mean chunk {out['eval_mean_chunk_success_before']:.2f})",
            flush=True,
        )
        curve, diags = [], []
        rng = np.random.default_rng(seed)
        n_eps = 0
        n_eval = len(eval_seeds)
        evaluations = [
            {
                "after_updates": 0,
                "training_episodes": 0,
                **success_interval(round(out["eval_success_before"] * n_eval), n_eval),
            }
        ]
        out["evaluations"] = evaluations
        progress = ROOT / Path(args.out).with_suffix(f".seed{seed}.progress.json")
        for it in range(args.iterations):
            seeds = training_seeds(rng, it, args)
            eps = rollouts(actor, args.task, prompt, seeds, args.max_chunks, f"s{seed}-it{it}")
            n_eps += len(eps)
            curve.append(success_rate(eps))
            stats = trainer.update([(e, reward_from_label(e.success)) for e in eps])
            actor.set_policy(trainer.policy_snapshot())
            mean_actor.set_policy(actor.policy)
            diags.append(
                {
                    k: stats[k]
                    for k in (
                        "approx_kl",
                        "approx_kl_last",
                        "clipfrac",
                        "w0_mean",
                        "w0_max",
                        "entropy",
                        "early_stop",
                        "explained_variance",
                        "v_loss",
                        "pg_loss",
                        "update_s",
                        "n_chunks",
                    )
                }
            )
            print(
                f"seed {seed} iter {it}: rollout success {curve[-1]:.2f} approx_kl {stats['approx_kl']:.4f} "
                f"clipfrac {stats['clipfrac']:.2f} ev {stats['explained_variance']:.2f} "
                f"({stats['update_s']:.1f} s update)",
                flush=True,
            )
            if args.eval_every and (it + 1) % args.eval_every == 0 and it + 1 < args.iterations:
                rate, _ = evaluate(f"eval-it{it}")
                evaluations.append(
                    {
                        "after_updates": it + 1,
                        "training_episodes": n_eps,
                        **success_interval(round(rate * n_eval), n_eval),
                    }
                )
                print(f"seed {seed}: eval after {it + 1} updates {rate:.2f}", flush=True)
                # what a run cut short still leaves behind
                progress.parent.mkdir(parents=True, exist_ok=True)
                progress.write_text(
                    json.dumps({**out, "rollout_success_per_iteration": curve, "ppo": diags}, indent=1)
                )
        out["eval_success_after"], out["eval_mean_chunk_success_after"] = evaluate("eval-post")
        out["eval_episodes"] = n_eval
        evaluations.append(
            {
                "after_updates": args.iterations,
                "training_episodes": n_eps,
                **success_interval(round(out["eval_success_after"] * n_eval), n_eval),
            }
        )
        for when in ("before", "after"):
            k = round(out[f"eval_success_{when}"] * n_eval)
            out[f"eval_success_{when}_interval"] = success_interval(k, n_eval)
        out.update(
            rollout_success_per_iteration=curve,
            ppo=diags,
            training_episodes=n_eps,
            wall_s=time.perf_counter() - t0,
        )
    print(
        f"seed {seed}: eval {out['eval_success_before']:.2f} -> {out['eval_success_after']:.2f}", flush=True
    )
    return out


def write_results(
    args: argparse.Namespace,
    per_seed: list[dict[str, Any]],
    prompt: str,
    sft_tasks: list[str],
    sft_metrics: dict[str, float],
    t_start: float,
) -> dict[str, Any]:
    result = {
        "command": "python bench/bench_learning.py " + " ".join(sys.argv[1:]),
        "task": args.task,
        "canonical_prompt": prompt,
        "head": args.head,
        "variant": "plain PPO (canonical prompt)",
        "ppo": {
            "advantage": args.advantage,
            "ratio_unit": args.ratio_unit,
            "group_size": args.group_size,
            "lr": args.lr,
            "epochs": args.epochs,
            "target_kl": args.target_kl,
            "noise_lr": args.noise_lr,
        },
        "layout_spread": args.layout_spread,
        "evaluation": "sampled chunks" + (" and the mean chunk" if args.eval_mean_chunk else ""),
        "init_log_std": args.init_log_std,
        "flow_noise_level": args.flow_noise_level,
        "training_scenes": args.train_scenes or "a new random scene per episode",
        "budget": {
            "iterations": args.iterations,
            "episodes_per_iteration": args.episodes_per_iteration,
            "max_chunks_per_episode": args.max_chunks,
            "eval_episodes": args.eval_episodes,
            "training_episodes_per_seed": args.iterations * args.episodes_per_iteration,
        },
        "sft": {"checkpoint": args.sft_checkpoint, **sft_metrics}
        if args.sft_checkpoint
        else {
            "tasks": sft_tasks,
            "demos_per_task": args.demos_per_task,
            "steps": args.sft_steps,
            **sft_metrics,
        },
        **eval_summary(per_seed),
        "per_seed": per_seed,
        "total_wall_s": time.perf_counter() - t_start,
    }
    save_result(result, ROOT / args.out)
    return result


def save_result(result: dict[str, Any], out: Path) -> None:
    """The JSON and, beside it, the curve of rollout success per PPO iteration of each seed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    per_seed = result["per_seed"]
    curves = {f"seed {r['seed']}": [float(v) for v in r["rollout_success_per_iteration"]] for r in per_seed}
    title = f"{result['task']} ({result['head']} head): rollout success, canonical prompt"
    plot(curves, eval_lines(per_seed), title, out.with_suffix(".png"))


def merge(args: argparse.Namespace) -> int:
    """Combine single-seed result files (seeds run as parallel processes) into one result + curve."""
    parts = [json.loads(Path(f).read_text()) for f in args.merge.split(",") if f]
    first = parts[0]
    per_seed = [r for p in parts for r in p["per_seed"]]
    result = {
        **first,
        "commands": [p["command"] for p in parts],
        "merged_from": args.merge.split(","),
        **eval_summary(per_seed),
        "per_seed": per_seed,
        "total_wall_s": max(float(p["total_wall_s"]) for p in parts),
    }
    result.pop("command", None)
    save_result(result, ROOT / args.out)
    print(json.dumps({k: v for k, v in result.items() if k.startswith(("eval_", "seeds_"))}))
    return 0


def merge_progress(args: argparse.Namespace) -> int:
    """Seeds cut short (session time): their progress files -> one result at the last held-out
    evaluation every seed reached. Run with the same options as the runs themselves."""
    parts = [json.loads(Path(f).read_text()) for f in args.from_progress.split(",") if f]
    at = min(p["evaluations"][-1]["after_updates"] for p in parts)
    per_seed = []
    for p in parts:
        ev = next(e for e in p["evaluations"] if e["after_updates"] == at)
        n = int(ev["n"])
        per_seed.append(
            {
                **p,
                "eval_success_after": ev["rate"],
                "eval_mean_chunk_success_after": float("nan"),
                "eval_episodes": n,
                "eval_success_before_interval": success_interval(round(p["eval_success_before"] * n), n),
                "eval_success_after_interval": success_interval(ev["successes"], n),
                "training_episodes": ev["training_episodes"],
                "rollout_success_per_iteration": p["rollout_success_per_iteration"][:at],
                "ppo": p["ppo"][:at],
            }
        )
    args.iterations = at
    result = write_results(
        args, per_seed, canonical_prompt_of(args.task), args.sft_tasks.split(","), {}, time.perf_counter()
    )
    result.update(
        cut_short={
            "after_updates": at,
            "why": "planned for more updates; the last held-out evaluation every seed reached",
            "progress_files": args.from_progress.split(","),
        }
    )
    save_result(result, ROOT / args.out)
    print(json.dumps({k: v for k, v in result.items() if k.startswith(("eval_", "seeds_"))}))
    return 0


def canonical_prompt_of(task: str) -> str:
    from learner.loop.tasks import canonical_prompt  # the task -> canonical prompt table

    return canonical_prompt(task)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="put_green_container_in_front_of_camera")
    ap.add_argument(
        "--sft-tasks",
        default="put_green_container_in_front_of_camera,put_green_container_in_bowl,put_bowl_in_front_of_camera",
    )
    ap.add_argument("--demos-per-task", type=int, default=40)
    ap.add_argument("--sft-steps", type=int, default=1500)
    ap.add_argument(
        "--layout-spread",
        type=float,
        default=1.0,
        help="how far resets scatter the objects (demos, training and evaluation alike), 0..1",
    )
    ap.add_argument("--head", choices=["flow", "gaussian"], default="flow")
    ap.add_argument("--image-px", type=int, default=64, help="rendered camera size")
    ap.add_argument("--policy-px", type=int, default=32, help="the policy's downscaled image size")
    ap.add_argument("--sft-batch", type=int, default=64)
    ap.add_argument("--sft-checkpoint", default="", help="use this SFT checkpoint instead of training one")
    ap.add_argument("--target-kl", type=float, default=0.05, help="early-stop PPO epochs above this (0: off)")
    ap.add_argument("--advantage", choices=["group", "gae"], default="group")
    ap.add_argument("--ratio-unit", choices=["chunk", "row", "dim"], default="dim")
    ap.add_argument("--group-size", type=int, default=8, help="rollouts per training scene (group advantage)")
    ap.add_argument("--epochs", type=int, default=4, help="PPO epochs per update")
    ap.add_argument(
        "--eval-every", type=int, default=0, help="also evaluate every this many updates (0: off)"
    )
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--episodes-per-iteration", type=int, default=32)
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--max-chunks", type=int, default=36)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument(
        "--eval-mean-chunk", action="store_true", help="also evaluate the mean chunk (no sampling)"
    )
    ap.add_argument(
        "--noise-lr", type=float, default=0.0, help="step size of the Gaussian log std (0: fixed)"
    )
    ap.add_argument(
        "--init-log-std",
        type=float,
        default=None,
        help="exploration noise PPO starts from (Gaussian head; SFT fits only the mean)",
    )
    ap.add_argument(
        "--flow-noise-level",
        type=float,
        default=None,
        help="flow-SDE exploration scale a PPO samples with (flow head; default: the checkpoint's)",
    )
    ap.add_argument(
        "--train-scenes",
        type=int,
        default=0,
        help="cycle this many fixed training scenes (0: a new one each episode)",
    )
    ap.add_argument("--value-lr", type=float, default=1e-3, help="step size of the value head")
    ap.add_argument("--minibatch", type=int, default=64)
    ap.add_argument("--data-dir", default="data/bench_learning")
    ap.add_argument("--out", default="bench/results/learning.json")
    ap.add_argument(
        "--merge",
        default="",
        help="comma-separated result files of single-seed runs (run in parallel) to combine",
    )
    ap.add_argument(
        "--from-progress", default="", help="comma-separated progress files of cut-short seeds to merge"
    )
    args = ap.parse_args()
    if args.merge:
        return merge(args)
    if args.from_progress:
        return merge_progress(args)
    torch.set_num_threads(1)
    data = ROOT / args.data_dir
    from learner.loop.tasks import canonical_prompt  # the task -> canonical prompt table

    prompt = canonical_prompt(args.task)
    sft_tasks = [t for t in args.sft_tasks.split(",") if t]
    t_start = time.perf_counter()
    demo_dir = data / f"demos{args.image_px}-spread{args.layout_spread:g}"
    record_demos(demo_dir, sft_tasks, args.demos_per_task, args.image_px, args.layout_spread)
    vla = VLAConfig(head=args.head, image_size_px=args.policy_px)
    sft_cfg = SFTConfig(
        episodes_per_task=args.demos_per_task, steps=args.sft_steps, batch_size=args.sft_batch
    )

    def on_step(step: int, loss: float) -> None:
        if step % 250 == 0:
            print(f"sft step {step}/{args.sft_steps} loss {loss:.4f}", flush=True)

    sft_metrics: dict[str, float] = {}
    if args.sft_checkpoint:
        path, cached = Path(args.sft_checkpoint), True
        sft_metrics = CheckpointStore.load(path).metrics
    else:
        path, sft_metrics, cached = run_sft(
            demo_dir,
            data / f"sft-{args.head}-{args.policy_px}px-spread{args.layout_spread:g}",
            vla,
            sft_cfg,
            sft_tasks,
            on_step=on_step,
        )
    print(f"SFT checkpoint {path} (cached={cached}): {sft_metrics}", flush=True)
    sft_policy = CheckpointStore.load(path).policy
    group, endpoint = start_server(data / "logs", args.image_px, args.layout_spread)
    per_seed: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    try:
        for seed in args.seeds.split(","):
            per_seed.append(run_seed(sft_policy, endpoint, args, int(seed), prompt))
            result = write_results(args, per_seed, prompt, sft_tasks, sft_metrics, t_start)
    finally:
        group.stop_all()
    print(json.dumps({k: v for k, v in result.items() if k.startswith(("eval_", "seeds_"))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
