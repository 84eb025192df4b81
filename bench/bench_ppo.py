"""PPO throughput on this CPU, and the cost of a mixed-prompt update relative to a single-prompt one.

One command: ``.venv/bin/python bench/bench_ppo.py`` -> bench/results/ppo.json

The reference (measured in the same run) is plain single-prompt PPO on the same chunks; the mixed
update is measured with every chunk rolled out under a non-canonical prompt (worst case: every
sample needs the second, canonical-prompt pass) and with half of them (alpha = 0.5).
Episodes are synthetic (random 64 px frames) and recorded by the real policy, so shapes and the
stored chains are those of a real rollout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from learner.policies.vla import SmallVLAPolicy, VLAConfig
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_episode
from learner.trainer import Trainer

CANON = "put the green container in the bowl"
OTHER = "drop the green box into the bowl"


def make_batch(policy, n_episodes, n_chunks, other_frac, seed):
    rng = np.random.default_rng(seed)
    batch = []
    for i in range(n_episodes):
        prompt = OTHER if i < round(other_frac * n_episodes) else CANON
        ep = synthetic_episode(
            policy, rng, n_chunks, prompt, CANON, bool(i % 2), size_px=64, episode_id=f"e{i}"
        )
        batch.append((ep, float(i % 2)))
    return batch


def time_update(policy, batch, variant, repeats):
    times, stats = [], {}
    for r in range(repeats):
        trainer = Trainer(policy, PPOConfig(ratio_variant=variant, minibatch_size=64, seed=r))
        t0 = time.perf_counter()
        stats = trainer.update(batch)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), stats


def measure_w0(checkpoint: Path, demo_dir: Path, max_obs: int) -> dict:
    """Initial-ratio statistics of the real SFT policy on real demo observations: chains sampled
    under each paraphrase p of the canonical prompt, evaluated under p and p_g (theta = theta_old)."""
    from learner.checkpoints import CheckpointStore
    from learner.paraphrases import PARAPHRASES
    from pde_contract.episodes import read_episode

    policy = CheckpointStore.load(checkpoint).policy
    by_prompt: dict[str, list] = {}
    for f in sorted(demo_dir.rglob("*.msgpack")):
        ep = read_episode(f)
        by_prompt.setdefault(ep.canonical_prompt, []).extend(c.observation for c in ep.chunks)
    out: dict = {"checkpoint": str(checkpoint), "per_task": {}}
    all_log_w = []
    for canon, observations in by_prompt.items():
        obs_list = observations[:: max(1, len(observations) // max_obs)][:max_obs]
        obs = policy.preprocess(obs_list)
        logs, kls = [], []
        for para in PARAPHRASES[canon]:
            s = policy.sample(obs, [para] * len(obs))
            with torch.no_grad():
                pair = policy.evaluate_pair(
                    obs, [para] * len(obs), [canon] * len(obs), torch.from_numpy(s.chain)
                )
            logs.append((pair.canonical_log_prob - pair.rollout.log_prob).numpy())
            kls.append(pair.prompt_kl.numpy())
        d = np.concatenate(logs)  # log pi(a|o,p_g) - log pi(a|o,p)
        all_log_w.append(0.5 * d)
        out["per_task"][canon] = {
            "n": int(d.size),
            "log_ratio_canonical_over_rollout_mean": float(d.mean()),
            "log_ratio_canonical_over_rollout_p05_p50_p95": [float(v) for v in np.percentile(d, [5, 50, 95])],
            "mixed_w0_median": float(np.exp(np.median(0.5 * d))),
            "mixed_w0_min_max": [float(np.exp(0.5 * d.min())), float(np.exp(0.5 * d.max()))],
            "canonical_only_w0_max": float(np.exp(min(d.max(), 50))),
            "prompt_kl_mean": float(np.concatenate(kls).mean()),
        }
    lw = np.concatenate(all_log_w)
    out["mixed_frac_abs_log_w0_gt_log2"] = float((np.abs(lw) > np.log(2)).mean())
    out["mixed_frac_abs_log_w0_gt_1"] = float((np.abs(lw) > 1.0).mean())
    out["canonical_only_frac_abs_log_w0_gt_log2"] = float((np.abs(2 * lw) > np.log(2)).mean())
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--out", default="bench/results/ppo.json")
    ap.add_argument("--w0-checkpoint", default="data/bench_learning/sft-flow/policy-000000.pt")
    ap.add_argument("--w0-demos", default="data/bench_learning/demos64")
    ap.add_argument("--w0-max-obs", type=int, default=64)
    ap.add_argument("--skip-timing", action="store_true", help="only the w0 measurement")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict = {
        "command": "python bench/bench_ppo.py " + " ".join(sys.argv[1:]),
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "platform": platform.platform(),
            "torch": torch.__version__,
        },
        "batch": {"episodes": args.episodes, "chunks_per_episode": args.chunks, "epochs": 4, "minibatch": 64},
        "heads": {},
    }
    if Path(args.w0_checkpoint).is_file() and Path(args.w0_demos).is_dir():
        results["w0_sft_policy"] = measure_w0(Path(args.w0_checkpoint), Path(args.w0_demos), args.w0_max_obs)
        print("w0", json.dumps(results["w0_sft_policy"], indent=1), flush=True)
    else:
        print(
            f"no SFT checkpoint at {args.w0_checkpoint}: run bench/bench_learning.py first for the w0 figures"
        )
    for head in () if args.skip_timing else ("flow", "gaussian"):
        torch.manual_seed(0)
        policy = SmallVLAPolicy(VLAConfig(head=head))
        n = args.episodes * args.chunks
        plain_batch = make_batch(policy, args.episodes, args.chunks, 0.0, 0)
        t_single, _ = time_update(policy, plain_batch, "plain", args.repeats)
        all_other = make_batch(policy, args.episodes, args.chunks, 1.0, 0)
        t_mixed_all, stats = time_update(policy, all_other, "mixed", args.repeats)
        half = make_batch(policy, args.episodes, args.chunks, 0.5, 0)
        t_mixed_half, _ = time_update(policy, half, "mixed", args.repeats)
        results["heads"][head] = {
            "chunks_per_update": n,
            "single_prompt_update_s": t_single,
            "mixed_all_other_prompt_update_s": t_mixed_all,
            "mixed_half_other_prompt_update_s": t_mixed_half,
            "ppo_samples_per_s_single": n * 4 / t_single,
            "ppo_samples_per_s_mixed_all": n * 4 / t_mixed_all,
            "ratio_mixed_all_over_single": t_mixed_all / t_single,
            "ratio_mixed_half_over_single": t_mixed_half / t_single,
            "goal_ratio_max": 1.5,
            "diagnostics_mixed_all": {
                k: stats[k] for k in ("w0_mean", "w0_max", "prompt_kl", "approx_kl", "clipfrac")
            },
        }
        print(head, json.dumps(results["heads"][head], indent=1), flush=True)
    if args.skip_timing and Path(args.out).is_file():  # keep the timing figures of an earlier run
        results = {**json.loads(Path(args.out).read_text()), "w0_sft_policy": results.get("w0_sft_policy")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
