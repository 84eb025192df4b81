"""PDE against action-noise PPO (a benchmark, not a timed test): same SFT start, same RL core, same
environment-episode budget per arm and seed (bootstrap episodes counted).

    .venv/bin/python bench/bench_pde.py --sft-checkpoint CKPT   -> bench/results/pde_vs_noise.json + .png

Arms (``--arms``):
- ``noise``: canonical-prompt PPO; exploration is the policy's action noise only.
- ``pde_paraphrase``: prompt search with the offline rule-based paraphrase proposer (the supervisor's
  RandomParaphraseProposer), then PPO on the alpha mixture with the mixed (geometric-mean) ratio.
- ``pde_rollout_ratio``: the same with the rollout-prompt ratio (the paper's ablation).
- ``pde_scripted``: the same as pde_paraphrase, but the proposer offers wordings from a list given
  with ``--scripted-wordings`` (e.g. the SFT recipe's training wordings) and sees rollouts only as
  labels: an upper bound on what a proposer can find, not a VLM result.

Each (arm, seed) runs in this process against one `pde robot-server --backend sim --pacing fast`
and writes ``<work-dir>/<arm>-seed<seed>.json``; a finished part is skipped when the command is run
again (resumable), and every run merges all parts into ``--out``. Run arms or seeds as parallel
processes on a machine with more cores (``--arms noise --seeds 0``, ...), then once with ``--merge``.

Evaluation: canonical-prompt sampled success on ``--eval-episodes`` fixed held-out scenes (the same
scenes for every arm, seed and evaluation point), Wilson 95% intervals per seed and pooled.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import success_interval  # noqa: E402
from bench_learning import EVAL_SEED_BASE, TRAIN_SEED_BASE, start_server  # noqa: E402

from learner.actor import Actor, ActorSettings  # noqa: E402
from learner.checkpoints import CheckpointStore  # noqa: E402
from learner.mixture import AlphaSchedule, sample_prompt  # noqa: E402
from learner.policies.base import Policy  # noqa: E402
from learner.ppo import PPOConfig, RatioVariant  # noqa: E402
from learner.rewards import reward_from_label  # noqa: E402
from learner.trainer import Trainer  # noqa: E402
from pde_contract.client import RobotClient  # noqa: E402
from pde_contract.episodes import EpisodeFile  # noqa: E402


@dataclass(frozen=True)
class Arm:
    ratio_variant: RatioVariant
    proposer: str  # "" (no prompt search), "paraphrase" or "scripted"


ARMS: dict[str, Arm] = {
    "noise": Arm("plain", ""),
    "pde_paraphrase": Arm("mixed", "paraphrase"),
    "pde_rollout_ratio": Arm("rollout", "paraphrase"),
    "pde_scripted": Arm("mixed", "scripted"),
}


class ScriptedProposer:
    """Offers the next unseen wordings of a fixed list, K at a time (upper bound, not a VLM)."""

    def __init__(self, wordings: list[str]) -> None:
        self.wordings = list(wordings)

    def propose(self, known: set[str], k: int) -> list[str]:
        return [w for w in self.wordings if w not in known][:k]


def propose(
    arm: Arm, args: argparse.Namespace, goal: str, known: set[str], iteration: int, seed: int
) -> list[str]:
    """K new candidate wordings for one search iteration."""
    if arm.proposer == "scripted":
        return ScriptedProposer(args.scripted_wordings.split("|")).propose(known, args.k_candidates)
    from supervisor.proposers import RandomParaphraseProposer
    from supervisor.vlm.base import CandidateRequest, PromptEvidence

    proposer = RandomParaphraseProposer(seed=seed * 1000 + iteration)
    request = CandidateRequest(
        task=args.task,
        goal=goal,
        canonical_ema_success=None,
        canonical_trend="unknown",
        iteration=iteration,
        n_new=args.k_candidates,
        pool=[],
        failed=[PromptEvidence(text=t, success_rate=None) for t in sorted(known - {goal})],
    )
    return proposer.propose(request).new_prompts


class Runner:
    """One (arm, seed): bootstrap prompt search (PDE arms), then PPO iterations on the mixture."""

    def __init__(
        self, policy: Policy, endpoint: str, args: argparse.Namespace, arm_name: str, seed: int
    ) -> None:
        self.args, self.arm_name, self.arm, self.seed = args, arm_name, ARMS[arm_name], seed
        from learner.loop.tasks import canonical_prompt

        self.goal = canonical_prompt(args.task)
        torch.manual_seed(seed)
        np.random.seed(seed)
        self.policy = copy.deepcopy(policy)
        if args.init_log_std is not None and self.policy.noise_parameters():
            with torch.no_grad():
                self.policy.noise_parameters()[0].fill_(args.init_log_std)
        self.trainer = Trainer(
            self.policy,
            PPOConfig(
                ratio_variant=self.arm.ratio_variant,
                learning_rate=args.lr,
                noise_learning_rate=0.0,
                update_epochs=args.epochs,
                target_kl=args.target_kl or None,
                seed=seed,
            ),
        )
        self.client = RobotClient(cmd_endpoint=endpoint, name=f"pde-{arm_name}-{seed}", timeout_s=10.0)
        info = self.client.connect()
        self.actor = Actor(
            self.policy, self.client, ActorSettings(control_rate_hz=info.control_rate_hz, obs_timeout_s=10.0)
        )
        self.rng = np.random.default_rng(seed)
        self.prompt_rng = random.Random(seed)
        self.env_episodes = 0
        self.n_tag = 0
        self.canonical_outcomes: list[bool] = []  # the alpha window's input, oldest first

    def close(self) -> None:
        self.client.close()

    def rollout(self, prompt: str, scene: int) -> EpisodeFile:
        self.n_tag += 1
        self.env_episodes += 1
        return self.actor.run_episode(
            episode_id=f"{self.arm_name}-s{self.seed}-{self.n_tag}",
            task=self.args.task,
            canonical_prompt=self.goal,
            rollout_prompt=prompt,
            max_chunks=self.args.max_chunks,
            seed=scene,
        )

    def scenes(self, n: int) -> list[int]:
        return [int(s) for s in TRAIN_SEED_BASE + self.rng.integers(0, 1_000_000, n)]

    def evaluate(self) -> dict[str, float]:
        """Canonical-prompt sampled success on the fixed held-out scenes (not counted in the budget)."""
        wins = 0
        for i in range(self.args.eval_episodes):
            self.n_tag += 1
            ep = self.actor.run_episode(
                episode_id=f"eval-{self.arm_name}-s{self.seed}-{self.n_tag}",
                task=self.args.task,
                canonical_prompt=self.goal,
                rollout_prompt=self.goal,
                max_chunks=self.args.max_chunks,
                seed=EVAL_SEED_BASE + i,
            )
            wins += bool(ep.success)
        return success_interval(wins, self.args.eval_episodes)

    def start_evaluation(self) -> dict[str, float]:
        """The SFT policy's evaluation, shared by every arm of this seed (same policy, same scenes,
        same sampling seed): run once, cached in the work dir."""
        a = self.args
        path = Path(a.work_dir_path) / f"start-seed{self.seed}-eval{a.eval_episodes}.json"
        if path.is_file():
            cached = json.loads(path.read_text())
            if cached.get("sft_checkpoint") == a.sft_checkpoint:
                return dict(cached["evaluation"])
        torch.manual_seed(self.seed)
        result = self.evaluate()
        path.write_text(json.dumps({"sft_checkpoint": a.sft_checkpoint, "evaluation": result}))
        return result

    def search(self, log: dict[str, Any]) -> tuple[list[str], float]:
        """Prompt-posterior stage (policy frozen): canonical baseline, then T0 x K candidates of N
        rollouts each; a candidate with a success (s > eta = 0) joins the pool."""
        a = self.args
        canon = [self.rollout(self.goal, s) for s in self.scenes(a.n_per_prompt)]
        self.canonical_outcomes = [bool(e.success) for e in canon]
        canon_rate = float(np.mean(self.canonical_outcomes))
        known, pool, tried = {self.goal}, [], []
        for it in range(a.t0):
            for text in propose(self.arm, a, self.goal, known, it, self.seed):
                known.add(text)
                eps = [self.rollout(text, s) for s in self.scenes(a.n_per_prompt)]
                wins = sum(bool(e.success) for e in eps)
                tried.append({"prompt": text, "successes": wins, "n": len(eps)})
                if wins > 0:
                    pool.append(text)
        log.update(bootstrap_canonical_success=canon_rate, candidates=tried, pool=pool)
        print(f"[{self.arm_name} s{self.seed}] search: canonical {canon_rate:.2f}, pool {pool}", flush=True)
        return pool, canon_rate

    def run(self) -> dict[str, Any]:
        a = self.args
        t0 = time.perf_counter()
        log: dict[str, Any] = {"seed": self.seed, "eval_episodes": a.eval_episodes}
        evals = [{"after_updates": 0, "env_episodes": 0, **self.start_evaluation()}]
        print(f"[{self.arm_name} s{self.seed}] eval start {evals[0]['rate']:.2f}", flush=True)
        pool: list[str] = []
        alpha = AlphaSchedule()
        if self.arm.proposer:
            pool, canon_rate = self.search(log)
            # The EMA starts from the bootstrap's canonical success (said here, and recorded).
            alpha.ema_success = canon_rate
        iterations, g = [], a.group_size
        while self.env_episodes + a.episodes_per_iteration <= a.budget_episodes:
            batch = []
            for scene in self.scenes(a.episodes_per_iteration // g):
                for _ in range(g):
                    prompt = (
                        sample_prompt(self.goal, pool, alpha.alpha, self.prompt_rng) if pool else self.goal
                    )
                    batch.append(self.rollout(prompt, scene))
            canon = [bool(e.success) for e in batch if e.rollout_prompt == self.goal]
            self.canonical_outcomes += canon
            stats = self.trainer.update([(e, reward_from_label(e.success)) for e in batch])
            self.actor.set_policy(self.trainer.policy_snapshot())
            row = {
                "alpha": alpha.alpha if pool else 1.0,  # no pool: every rollout is canonical
                "pool_prompt_share": float(np.mean([e.rollout_prompt != self.goal for e in batch])),
                "rollout_success": float(np.mean([bool(e.success) for e in batch])),
                "canonical_rollouts": len(canon),
                "env_episodes": self.env_episodes,
                **{k: float(v) for k, v in stats.items()},
            }
            if pool:  # alpha follows the canonical prompt's success over its last `window` episodes
                alpha.update_from_window(self.canonical_outcomes)
            iterations.append(row)
            n_up = len(iterations)
            print(
                f"[{self.arm_name} s{self.seed}] update {n_up}: rollout {row['rollout_success']:.2f} "
                f"alpha {row['alpha'] if pool else 1.0:.2f} pool share {row['pool_prompt_share']:.2f} "
                f"approx_kl {row['approx_kl']:.4f}",
                flush=True,
            )
            if a.eval_every and n_up % a.eval_every == 0:
                evals.append({"after_updates": n_up, "env_episodes": self.env_episodes, **self.evaluate()})
        if evals[-1]["after_updates"] != len(iterations):
            evals.append(
                {"after_updates": len(iterations), "env_episodes": self.env_episodes, **self.evaluate()}
            )
        log.update(
            success_start=evals[0]["rate"],
            success_end=evals[-1]["rate"],
            env_episodes=self.env_episodes,
            evaluations=evals,
            iterations=iterations,
            wall_s=time.perf_counter() - t0,
        )
        print(
            f"[{self.arm_name} s{self.seed}] eval {log['success_start']:.2f} -> {log['success_end']:.2f}",
            flush=True,
        )
        return log


ARM_COLORS_BGR = {
    "noise": (60, 60, 200),
    "pde_paraphrase": (60, 150, 60),
    "pde_rollout_ratio": (200, 120, 40),
    "pde_scripted": (150, 60, 150),
}


def plot_arms(arms: dict[str, Any], title: str, path: Path) -> None:
    """Success against environment episodes spent (bootstrap included): one colour per arm, a thin
    line per seed, a thick line for the arm's pooled rate at each evaluation point."""
    w, h, m = 760, 460, 60
    img = np.full((h, w, 3), 255, np.uint8)
    x_max = max(r["env_episodes"] for a in arms.values() for r in a["per_seed"]) or 1
    y_max = 0.6
    x = lambda e: int(m + (w - 2 * m) * e / x_max)  # noqa: E731
    y = lambda v: int(h - m - (h - 2 * m) * min(v, y_max) / y_max)  # noqa: E731
    font = cv2.FONT_HERSHEY_SIMPLEX
    for v in np.arange(0.0, y_max + 1e-9, 0.1):
        cv2.line(img, (m, y(v)), (w - m, y(v)), (225, 225, 225), 1)
        cv2.putText(img, f"{v:.1f}", (18, y(v) + 4), font, 0.4, (0, 0, 0), 1)
    for e in range(0, x_max + 1, 64):
        cv2.putText(img, str(e), (x(e) - 8, h - m + 18), font, 0.4, (0, 0, 0), 1)
    cv2.line(img, (m, h - m), (w - m, h - m), (0, 0, 0), 1)
    cv2.line(img, (m, m), (m, h - m), (0, 0, 0), 1)
    for k, (name, a) in enumerate(arms.items()):
        color = ARM_COLORS_BGR.get(name, (0, 0, 0))
        rows = a["per_seed"]
        for r in rows:
            pts = [(x(e["env_episodes"]), y(e["rate"])) for e in r["evaluations"]]
            cv2.polylines(img, [np.array(pts, np.int32)], False, color, 1)
        n_points = min(len(r["evaluations"]) for r in rows)
        pooled = []
        for i in range(n_points):
            evs = [r["evaluations"][i] for r in rows]
            rate = sum(e["successes"] for e in evs) / sum(e["n"] for e in evs)
            pooled.append((x(float(np.mean([e["env_episodes"] for e in evs]))), y(rate)))
        cv2.polylines(img, [np.array(pooled, np.int32)], False, color, 3)
        label = (
            f"{name}: {a['success_start_pooled']['rate']:.2f} -> {a['success_end_pooled']['rate']:.2f}"
            f" pooled ({len(rows)} seeds)"
        )
        cv2.putText(img, label, (m + 10, m + 16 * k + 12), font, 0.42, color, 1)
    cv2.putText(img, title, (m, 25), font, 0.5, (0, 0, 0), 1)
    cv2.putText(
        img,
        "environment episodes per arm and seed (bootstrap included)",
        (w // 2 - 200, h - 15),
        font,
        0.45,
        (0, 0, 0),
        1,
    )
    cv2.imwrite(str(path), img)


def markdown_table(arms: dict[str, Any]) -> str:
    """One row per arm: start and end successes per seed and pooled, with Wilson 95% intervals."""

    def cell(k: int, n: int) -> str:
        iv = success_interval(k, n)
        return f"{k}/{n} = {iv['rate']:.2f} [{iv['wilson95_low']:.2f}, {iv['wilson95_high']:.2f}]"

    lines = [
        "| arm | per seed, start → end (successes/100) | pooled start | pooled end | gain |",
        "|---|---|---|---|---|",
    ]
    for name, a in arms.items():
        rows = a["per_seed"]
        per_seed = ", ".join(
            f"s{r['seed']} {round(r['success_start'] * r['eval_episodes'])}→"
            f"{round(r['success_end'] * r['eval_episodes'])}"
            for r in rows
        )
        n = sum(r["eval_episodes"] for r in rows)
        k0 = round(sum(r["success_start"] * r["eval_episodes"] for r in rows))
        k1 = round(sum(r["success_end"] * r["eval_episodes"] for r in rows))
        lines.append(f"| `{name}` | {per_seed} | {cell(k0, n)} | {cell(k1, n)} | {a['gain_pooled']:+.2f} |")
    return "\n".join(lines)


def merge(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """All finished parts -> the result file (+ a curve of evaluations per arm)."""
    arms: dict[str, Any] = {}
    commands: list[str] = []
    budget: dict[str, Any] = {}
    parts = [f for arm in ARMS for f in sorted(work.glob(f"{arm}-seed*.json"))]
    for part in parts:  # the cached start evaluations (start-seed*.json) are not parts
        p = json.loads(part.read_text())
        arms.setdefault(p["arm"], {"per_seed": []})["per_seed"].append(p["result"])
        commands.append(p["command"])
        budget = p["budget"]
    for a in arms.values():
        rows = a["per_seed"]
        n = sum(r["eval_episodes"] for r in rows)
        for when in ("start", "end"):
            k = round(sum(r[f"success_{when}"] * r["eval_episodes"] for r in rows))
            a[f"success_{when}_pooled"] = success_interval(k, n)
        a["gain_pooled"] = a["success_end_pooled"]["rate"] - a["success_start_pooled"]["rate"]
    result = {"arms": arms, "budget": budget, "commands": sorted(set(commands))}
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    if arms:
        plot_arms(arms, f"{args.task}: canonical-prompt sampled success", out.with_suffix(".png"))
        print(markdown_table(arms))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-checkpoint", help="the SFT start (e.g. the language-premise recipe's)")
    ap.add_argument("--task", default="put_green_container_in_front_of_camera")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget-episodes", type=int, default=320, help="environment episodes per arm and seed")
    ap.add_argument("--episodes-per-iteration", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8, help="rollouts per training scene")
    ap.add_argument("--n-per-prompt", type=int, default=8, help="N: search rollouts per prompt")
    ap.add_argument("--k-candidates", type=int, default=4, help="K: candidates per search iteration")
    ap.add_argument("--t0", type=int, default=2, help="T0: search iterations")
    ap.add_argument("--scripted-wordings", default="", help="'|'-separated wordings for pde_scripted")
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument(
        "--eval-every", type=int, default=0, help="evaluate every this many updates (0: start/end)"
    )
    ap.add_argument("--max-chunks", type=int, default=20)
    ap.add_argument("--lr", type=float, default=PPOConfig.learning_rate)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--target-kl", type=float, default=0.05)
    ap.add_argument("--init-log-std", type=float, default=-1.0)
    ap.add_argument("--image-px", type=int, default=128)
    ap.add_argument("--layout-spread", type=float, default=0.2)
    ap.add_argument("--work-dir", default="data/bench_pde")
    ap.add_argument("--out", default="bench/results/pde_vs_noise.json")
    ap.add_argument("--merge", action="store_true", help="only merge the finished parts")
    ap.add_argument(
        "--redraw", action="store_true", help="only redraw the PNG and print the table from --out"
    )
    args = ap.parse_args()
    if args.redraw:
        arms = json.loads((ROOT / args.out).read_text())["arms"]
        png = (ROOT / args.out).with_suffix(".png")
        plot_arms(arms, f"{args.task}: canonical-prompt sampled success", png)
        print(markdown_table(arms))
        return 0
    if not args.merge and not args.sft_checkpoint:
        raise SystemExit("--sft-checkpoint CKPT is needed to run arms (see scripts/premise.sh)")
    work = ROOT / args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    args.work_dir_path = str(work)
    if not args.merge:
        torch.set_num_threads(1)
        todo = [
            (arm, int(s))
            for arm in args.arms.split(",")
            for s in args.seeds.split(",")
            if not (work / f"{arm}-seed{s}.json").is_file()
        ]
        unknown = [a for a, _ in todo if a not in ARMS]
        if unknown:
            raise SystemExit(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
        if any(ARMS[a].proposer == "scripted" for a, _ in todo) and not args.scripted_wordings:
            raise SystemExit("pde_scripted needs --scripted-wordings 'w1|w2|...'")
        if todo:
            sft = CheckpointStore.load(Path(args.sft_checkpoint)).policy
            group, endpoint = start_server(work / "logs", args.image_px, args.layout_spread)
            try:
                for arm, seed in todo:
                    runner = Runner(sft, endpoint, args, arm, seed)
                    try:
                        result = runner.run()
                    finally:
                        runner.close()
                    budget = {
                        k: getattr(args, k)
                        for k in (
                            "budget_episodes", "episodes_per_iteration", "group_size", "n_per_prompt",
                            "k_candidates", "t0", "eval_episodes", "max_chunks", "lr", "epochs",
                            "target_kl", "init_log_std", "sft_checkpoint",
                        )
                    }  # fmt: skip
                    part = {
                        "arm": arm,
                        "command": "python bench/bench_pde.py " + " ".join(sys.argv[1:]),
                        "budget": budget,
                        "result": result,
                    }
                    (work / f"{arm}-seed{seed}.json").write_text(json.dumps(part, indent=1))
                    merge(args, work)
            finally:
                group.stop_all()
    result = merge(args, work)
    print(
        json.dumps(
            {
                k: {kk: v[kk] for kk in ("success_start_pooled", "success_end_pooled")}
                for k, v in result["arms"].items()
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
