"""Does an RL update keep what the prompt pool found? Controlled runs from ONE SFT checkpoint with ONE
fixed pool (by default the oracle's: the SFT's training wordings; ``--pool`` names another), a few
synchronous PPO updates per variant, the pool's and the canonical prompt's success on fixed held-out
scenes after every update (issue 32 item 2). Each variant runs the code a lab runs: the episode loop
(bench/pde_arm.py ``drive``: EpisodeLoop, BackgroundTrainer, adaptive alpha) with the real Actor and
Trainer against ``pde robot-server --backend sim``; no prompt search (the pool is written into the
store as the supervisor would have admitted it), so every variant spends its episodes on RL.

    python bench/bench_pool_retention.py --sft-checkpoint CKPT \\
        --variants mixed,rollout,canonical,pool_only,mixed_anchor --updates 3
    -> bench/results/pool_retention.json (one entry per variant; finished variants are kept and
       skipped when the command runs again)

Variants (``VARIANTS``): ``mixed`` (the paper's geometric-mean ratio, today's defaults),
``rollout`` (the rollout-prompt ratio), ``canonical`` (the canonical-prompt ratio), ``pool_only``
(alpha pinned at 0: PPO on pool rollouts alone, rollout-prompt ratio), ``plain`` (no pool: every RL
episode under the canonical prompt, the noise arm's PPO), ``mixed_anchor`` (the mixed ratio with
PPOConfig.pool_anchor_coef), ``mixed_rebase`` / ``mixed_chunk`` (w0 guard 'rebase', one
ratio per chunk). Every update's row carries the trainer's per-prompt diagnostics
(learner/ppo_diagnostics.py: log w0, clipped and dropped units, each half's gradient norm,
KL(new || old) and how each prompt's mean action moved).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import success_interval  # noqa: E402
from bench_learning import start_server  # noqa: E402
from pde_arm import EVAL_SEED_BASE, EVAL_TORCH_SEED, drive, file_sha256, frozen_inputs  # noqa: E402

from learner.loop.settings import LoopSettings  # noqa: E402
from learner.ppo_config import PPOConfig  # noqa: E402
from pde_storage import Store  # noqa: E402
from supervisor.settings import SupervisorSettings  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pool_retention.json"
RECIPE = ROOT / "learner" / "recipes" / "paper_regime.json"
TASK = "put_green_container_in_front_of_camera"


@dataclass(frozen=True)
class Variant:
    """What a variant changes: PPO settings, and whether the canonical prompt is drawn at all."""

    ppo: dict[str, Any] = field(default_factory=dict)  # PPOConfig fields over the loop's defaults
    pool_only: bool = False  # alpha pinned at 0: every RL episode uses a pool prompt
    no_pool: bool = False  # nothing admitted: every RL episode uses the canonical prompt (the noise arm)
    about: str = ""


OFF = {"pool_anchor_coef": 0.0}  # every variant but the anchor's says so (not the default's value)
VARIANTS: dict[str, Variant] = {
    "mixed": Variant({**OFF, "ratio_variant": "mixed"}, about="the paper's geometric-mean ratio (defaults)"),
    "rollout": Variant({**OFF, "ratio_variant": "rollout"}, about="ratio under the rollout prompt"),
    "canonical": Variant({**OFF, "ratio_variant": "canonical"}, about="ratio under the canonical prompt"),
    "pool_only": Variant(
        {**OFF, "ratio_variant": "rollout"}, pool_only=True, about="PPO on pool rollouts alone (alpha 0)"
    ),
    "plain": Variant(
        {"ratio_variant": "mixed"}, no_pool=True, about="no pool: PPO on canonical rollouts (the noise arm)"
    ),
    "mixed_anchor": Variant(
        {"ratio_variant": "mixed", "pool_anchor_coef": 10.0}, about="mixed + pool anchor (coef 10)"
    ),
    "mixed_anchor1": Variant(
        {"ratio_variant": "mixed", "pool_anchor_coef": 1.0}, about="mixed + pool anchor (coef 1)"
    ),
    "mixed_rebase": Variant(
        {**OFF, "ratio_variant": "mixed", "w0_guard": "rebase"}, about="mixed, w0 rebased"
    ),
    "mixed_chunk": Variant(
        {**OFF, "ratio_variant": "mixed", "ratio_unit": "chunk"}, about="mixed, chunk ratio"
    ),
}


def evaluate_prompts(
    actor: Any, client: Any, canonical: str, pool: list[str], scenes: int, max_chunks: int, seed: int,
    reset_joints_rad: Any,
) -> dict[str, list[bool]]:  # fmt: skip
    """Canonical prompt on scenes EVAL_SEED_BASE + i; the pool on the same scenes, wording i mod
    |pool|. Sampled, with their own torch seed (the same at every version)."""
    import torch

    out: dict[str, list[bool]] = {"canonical": [], "pool": []}
    with torch.random.fork_rng():
        torch.manual_seed(EVAL_TORCH_SEED + seed)
        for kind in ("canonical", "pool"):
            for i in range(scenes):
                prompt = canonical if kind == "canonical" else pool[i % len(pool)]
                client.reset(task=TASK, seed=EVAL_SEED_BASE + i, reset_joints_rad=reset_joints_rad)
                ep = actor.run_episode(
                    episode_id=f"eval-{kind}-{i}",
                    task=TASK,
                    canonical_prompt=canonical,
                    rollout_prompt=prompt,
                    max_chunks=max_chunks,
                    seed=EVAL_SEED_BASE + i,
                )
                out[kind].append(bool(ep.success))
    return out


def run_variant(
    name: str, checkpoint: Path, endpoint: str, pool: list[str], args: argparse.Namespace,
    start: dict[str, list[bool]] | None,
) -> dict[str, Any]:  # fmt: skip
    import torch

    from learner.actor import Actor, ActorSettings
    from learner.checkpoints import CheckpointStore
    from learner.trainer import Trainer
    from pde_contract.client import RobotClient

    variant = VARIANTS[name]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"pool-retention-{name}-") as tmp:
        data = Path(tmp)
        url = f"sqlite:///{data}/pde.db"
        # alpha_min must be > 0: a millionth draws the canonical prompt in no run of this size
        pinned: dict[str, Any] = {"alpha_min": 1e-6, "ema_start": 0.0} if variant.pool_only else {}
        settings = LoopSettings(
            tasks=[TASK], auto_start=True, auto_label=True, prompt_search=False, synchronous_updates=True,
            batch_size=args.batch_size, max_chunks=args.max_chunks, rollouts_per_scene=1,
            ppo=PPOConfig(learning_rate=args.learning_rate, seed=args.seed, **variant.ppo), seed=args.seed,
            torch_threads=1, device="cpu", database_url=url, data_dir=data, robot_cmd_endpoint=endpoint,
            **pinned,
        )  # fmt: skip
        entry = settings.catalogue.get(TASK)
        store = Store.open(url, data / "media")
        store.ensure_task(TASK, entry.prompt)
        for text in [] if variant.no_pool else pool:  # admitted as the supervisor admits one
            store.add_prompt(TASK, text, status="pool", source="offline")
        store.set_task_state(TASK, stage="rl")
        torch.manual_seed(args.seed)
        policy = CheckpointStore.load(checkpoint).policy
        trainer = DiagnosedTrainer(
            Trainer(CheckpointStore.load(checkpoint).policy, settings.ppo, device="cpu")
        )
        client = RobotClient(endpoint, name=f"pool-retention-{name}", timeout_s=10.0)
        client.connect()
        actor = Actor(policy, client, ActorSettings(reset_before_episode=False, obs_timeout_s=10.0))
        versions: list[dict[str, Any]] = []

        def evaluate(at: int) -> list[bool]:
            outcomes = (
                start
                if at == 0 and start is not None
                else evaluate_prompts(
                    actor, client, entry.prompt, pool, args.eval_scenes, args.max_chunks, args.seed,
                    entry.reset_joints_rad,
                )
            )  # fmt: skip
            row = {"env_episodes": at, **{k: success_interval(sum(v), len(v)) for k, v in outcomes.items()}}
            versions.append({**row, "outcomes": outcomes})
            print(
                f"[{name}] after {at} episodes: canonical {row['canonical']} pool {row['pool']}", flush=True
            )
            return outcomes["canonical"]

        try:
            record = drive(
                loop_store=store,
                supervisor_store=store,
                robot=client,
                actor=actor,
                trainer=trainer,
                save=lambda _new: "",
                settings=settings,
                supervisor=SupervisorSettings(tasks=[TASK]),
                proposer=None,
                embedder=None,
                budget_episodes=args.updates * args.batch_size,
                eval_at=[u * args.batch_size for u in range(args.updates + 1)],
                evaluate=evaluate,
            )
        finally:
            client.close()
            store.close()
    updates = []
    for u, diag in zip(record.updates, trainer.diagnostics, strict=True):
        updates.append({**{k: v for k, v in u.items() if not k.startswith("mech/")}, "per_prompt": diag})
    return {
        "variant": name,
        "about": variant.about,
        "ppo": asdict(settings.ppo),
        "pool_only": variant.pool_only,
        "no_pool": variant.no_pool,
        "versions": versions,
        "updates": updates,
        "episodes": record.episodes,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


class DiagnosedTrainer:
    """The Trainer as the loop uses it, keeping each update's typed per-prompt diagnostics."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.diagnostics: list[list[dict[str, Any]]] = []

    def update(self, batch: Any) -> dict[str, float]:
        stats: dict[str, float] = self.trainer.update(batch)
        diag = self.trainer.last_diagnostics
        self.diagnostics.append(diag.as_record() if diag is not None else [])
        return stats

    def policy_snapshot(self) -> Any:
        return self.trainer.policy_snapshot()


def merge(parts: list[Path], out: Path) -> int:
    """One result from files written by parallel invocations: the same setup but for the RL seed,
    the same SFT checkpoint and algorithm files (bench/pde_arm.py ALGORITHM_FILES); the runs are
    kept per seed, each part's commit with them."""
    loaded = [json.loads(p.read_text()) for p in parts]

    def inputs(d: dict[str, Any]) -> tuple[str, str]:
        setup = {k: v for k, v in d["setup"].items() if k != "seed"}
        frozen = {k: d["frozen"][k] for k in ("sft_checkpoint_sha256", "files_sha256")}
        return json.dumps(setup, sort_keys=True), json.dumps(frozen, sort_keys=True)

    for p, d in zip(parts[1:], loaded[1:], strict=True):
        if inputs(d) != inputs(loaded[0]):
            raise SystemExit(
                f"{p} ran with other settings or inputs than {parts[0]}; run it again with the same"
            )
    seeds: dict[str, dict[str, Any]] = {}
    for d in loaded:
        for name, run in d["variants"].items():
            seeds.setdefault(str(d["setup"]["seed"]), {})[name] = {**run, "commit": d["frozen"]["commit"]}
    merged = {
        "benchmark": "pool_retention",
        "commands": [d["command"] for d in loaded],
        "setup": {k: v for k, v in loaded[0]["setup"].items() if k != "seed"},
        "frozen": {k: loaded[0]["frozen"][k] for k in ("sft_checkpoint_sha256", "files_sha256")},
        "seeds": seeds,
    }
    out.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"wrote {out}: " + "; ".join(f"seed {s}: {', '.join(v)}" for s, v in seeds.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft-checkpoint", type=Path, help="the SFT checkpoint (not needed with --merge)")
    ap.add_argument("--variants", default="mixed,rollout,canonical,pool_only,mixed_anchor")
    ap.add_argument("--updates", type=int, default=3, help="PPO updates per variant")
    ap.add_argument("--batch-size", type=int, default=32, help="episodes per PPO update (the loop's)")
    ap.add_argument("--eval-scenes", type=int, default=24, help="held-out scenes per prompt kind per version")
    ap.add_argument("--max-chunks", type=int, default=20)
    ap.add_argument("--learning-rate", type=float, default=PPOConfig.learning_rate)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--pool",
        default="",
        help="the pool's prompts, '|'-separated (default: the SFT's training wordings, the oracle pool)",
    )
    ap.add_argument("--sim-profile", default="fast")
    ap.add_argument("--image-px", type=int, default=128)
    ap.add_argument("--layout-spread", type=float, default=0.2)
    ap.add_argument("--work-dir", type=Path, default=ROOT / "data" / "pool_retention")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--merge", nargs="+", type=Path, default=[], help="join result files of parallel runs into --out"
    )
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; variants are {', '.join(VARIANTS)}")
    if args.sft_checkpoint is None or not args.sft_checkpoint.is_file():
        ap.error(f"--sft-checkpoint {args.sft_checkpoint} is not a file (build it: docs/learner.md)")
    import torch

    torch.set_num_threads(1)
    pool = [w.strip() for w in args.pool.split("|") if w.strip()] or list(
        json.loads(RECIPE.read_text())["tasks"][TASK]["wordings"]
    )
    setup = {
        "sft_checkpoint_sha256": file_sha256(args.sft_checkpoint),
        "pool": pool,
        **{k: getattr(args, k) for k in ("updates", "batch_size", "eval_scenes", "max_chunks", "seed")},
        "learning_rate": args.learning_rate,
        "sim_profile": args.sim_profile,
        "image_px": args.image_px,
        "layout_spread": args.layout_spread,
    }
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    runs: dict[str, Any] = old.get("variants", {}) if old.get("setup") == setup else {}
    start = runs[next(iter(runs))]["versions"][0]["outcomes"] if runs else None
    args.work_dir.mkdir(parents=True, exist_ok=True)
    group, endpoint = start_server(
        args.work_dir / "logs", args.image_px, args.layout_spread, args.sim_profile
    )
    try:
        for name in names:
            if name in runs:
                continue
            runs[name] = run_variant(name, args.sft_checkpoint, endpoint, pool, args, start)
            start = runs[name]["versions"][0]["outcomes"]
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(
                json.dumps(
                    {
                        "benchmark": "pool_retention",
                        "command": " ".join(
                            ["python", "bench/bench_pool_retention.py", *(argv or sys.argv[1:])]
                        ),
                        "setup": setup,
                        "frozen": frozen_inputs(args.sft_checkpoint),
                        "variants": runs,
                    },
                    indent=1,
                )
                + "\n"
            )
    finally:
        group.stop_all()
    for name, run in runs.items():
        row = " | ".join(f"c {v['canonical']['rate']:.2f} p {v['pool']['rate']:.2f}" for v in run["versions"])
        print(f"{name:14s} {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
