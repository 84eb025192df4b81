"""π0.5 on a GPU: chunk latency, PPO update time and peak memory, the largest minibatch that fits.

Full-size π0.5 (gemma_2b VLM + gemma_300m expert + SigLIP So400m, 224 px, 50-step chunks, 200 prompt
tokens) with random weights, bf16 autocast over float32 weights:

- chunk inference: ``Policy.sample`` for one observation (2 cameras), median over ``--latency-runs``
  after warm-up, for the flow-SDE chain PPO samples with (``--flow-steps``) and for LeRobot's
  deterministic 10-step Euler sampling; goal <= 25 ms per chunk on one H100;
- one PPO update (learner/trainer.py, mixed-prompt ratio) on ``--rollouts`` x ``--chunks`` recorded
  chunks (half under another prompt), its wall time and peak GPU memory;
- the largest minibatch of one forward + backward of ``evaluate_pair`` that fits.

    python bench/bench_pi05.py                     # a GPU machine: writes bench/results/pi05.json
    python bench/bench_pi05.py --tiny --device cpu # a smoke run of the script itself (tiny model)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import write_result  # bench/ is on sys.path when run as a script

from learner.policies.pi05 import Pi05Options, Pi05Policy
from learner.policies.pi05_checkpoint import FeatureStats, Pi05Checkpoint, Pi05Mapping
from learner.policies.pi05_model import TINY_CONFIG, Pi05Config
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_observation
from learner.trainer import RolloutBatch, Trainer, build_rollout_batch
from pde_contract.episodes import ChunkRecord, EpisodeFile
from pde_contract.messages import STATE_VECTOR_NAMES

CANON = "put the green container in front of the camera"
OTHER = "carry the green plastic container close to the camera and let go"


def random_checkpoint(cfg: Pi05Config) -> Pi05Checkpoint:
    """A checkpoint description with random-size-correct pieces: QUANTILES statistics for our
    15-entry state and 7 ee_delta columns, and a word-level tokenizer (prompts pad to the same
    ``tokenizer_max_length`` as PaliGemma's, so the sequence length is the real one)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {w for p in (CANON, OTHER, "Task: State: Action:") for w in p.replace(":", " :").split()}
    vocab = {
        "<pad>": 0,
        "<unk>": 1,
        **{w: i + 2 for i, w in enumerate(sorted(words | {str(i) for i in range(256)}))},
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    n = len(STATE_VECTOR_NAMES)
    state = FeatureStats("QUANTILES", np.zeros(n, np.float32), np.ones(n, np.float32))
    action = FeatureStats("QUANTILES", np.zeros(7, np.float32), np.full(7, 0.02, np.float32))
    keys = ("observation.images.base_0_rgb", "observation.images.left_wrist_0_rgb")
    mapping = Pi05Mapping(STATE_VECTOR_NAMES, ("external", "wrist"))
    return Pi05Checkpoint(Path("random-weights"), cfg, keys, state, action, mapping, tok.to_str())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def chunk_latency_ms(
    policy: Pi05Policy, runs: int, deterministic: bool, device: torch.device
) -> dict[str, float]:
    obs = policy.preprocess([synthetic_observation(np.random.default_rng(0), size_px=224)])
    times = []
    for i in range(runs + 3):  # 3 warm-up calls (kernels, allocator)
        sync(device)
        t0 = time.perf_counter()
        policy.sample(obs, [CANON], deterministic=deterministic)
        sync(device)
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    a = np.asarray(times)
    return {
        "p50_ms": round(float(np.median(a)), 2),
        "p90_ms": round(float(np.percentile(a, 90)), 2),
        "n": len(a),
    }


def rollout_batch(
    policy: Pi05Policy, rollouts: int, chunks: int, image_px: int
) -> list[tuple[EpisodeFile, float]]:
    """``rollouts`` episodes of ``chunks`` chunks sampled by ``policy`` (batched per chunk index),
    every other one under another prompt; half succeed."""
    rng = np.random.default_rng(0)
    records: list[list[ChunkRecord]] = [[] for _ in range(rollouts)]
    prompts = [OTHER if i % 2 else CANON for i in range(rollouts)]
    for c in range(chunks):
        observations = [synthetic_observation(rng, image_px, seq=c) for _ in range(rollouts)]
        for start in range(0, rollouts, 16):
            sl = slice(start, min(rollouts, start + 16))
            s = policy.sample(policy.preprocess(observations[sl]), prompts[sl])
            for j, i in enumerate(range(sl.start, sl.stop)):
                records[i].append(
                    ChunkRecord(observation=observations[i], actions=s.actions[j], extras=s.extras(j))
                )
    return [
        (
            EpisodeFile(
                episode_id=f"bench-{i}",
                task="bench",
                canonical_prompt=CANON,
                rollout_prompt=prompts[i],
                action_space=policy.action_space,
                control_rate_hz=10.0,
                chunks=records[i],
                success=i % 4 < 2,
                source="synthetic",
            ),
            float(i % 4 < 2),
        )
        for i in range(rollouts)
    ]


def largest_minibatch(
    policy: Pi05Policy, batch: list[tuple[EpisodeFile, float]], device: torch.device
) -> dict[str, Any]:
    """Doubling minibatch sizes of one evaluate_pair forward + backward until out of memory (with
    the trainer's Adam state allocated, as during an update). In train mode, as ``Trainer.update``
    runs it: the model checkpoints its layers only while training, and the update ends in eval."""
    policy.train()
    try:
        return _double_until_oom(policy, build_rollout_batch(policy, batch), device)
    finally:
        policy.eval()


def _double_until_oom(policy: Pi05Policy, rb: RolloutBatch, device: torch.device) -> dict[str, Any]:
    fits, tried = 0, []
    size = 4
    while size <= len(rb):
        idx = np.arange(size)
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            ev = policy.evaluate_pair(
                rb.obs.index(idx),
                [rb.rollout_prompts[i] for i in idx],
                [rb.canonical_prompts[i] for i in idx],
                rb.chains[idx],
            )
            (ev.rollout.log_prob.sum() + ev.canonical_log_prob.sum() + ev.rollout.value.sum()).backward()
            policy.zero_grad(set_to_none=True)
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
            tried.append({"minibatch": size, "peak_gib": round(peak, 2)})
            fits = size
            size *= 2
        except torch.OutOfMemoryError:
            policy.zero_grad(set_to_none=True)
            tried.append({"minibatch": size, "oom": True})
            break
    return {"largest_minibatch": fits, "tried": tried}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny model: check the script, not π0.5")
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--minibatch", type=int, default=16, help="PPO minibatch (chunks)")
    ap.add_argument("--flow-steps", type=int, default=Pi05Options.flow_steps)
    ap.add_argument("--latency-runs", type=int, default=50)
    ap.add_argument("--trainable", default="all", choices=["all", "no_vision", "expert", "lora"])
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument("--out", default="pi05", help="result name under bench/results/ ('' = do not write)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    cfg = TINY_CONFIG if args.tiny else Pi05Config()
    options = Pi05Options(
        flow_steps=args.flow_steps,
        bf16=True,
        gradient_checkpointing=not args.no_gradient_checkpointing,
        trainable=args.trainable,
    )
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(device):  # initialise the 3B parameters where they will live
        policy = Pi05Policy(random_checkpoint(cfg), options)
    policy.to(device).eval()
    build_s = time.perf_counter() - t0
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": "tiny (script check)" if args.tiny else "pi05 full size, random weights",
        "parameters": sum(p.numel() for p in policy.parameters()),
        "options": {**vars(args), "bf16": True},
        "build_s": round(build_s, 1),
    }
    result["chunk_latency_sde"] = chunk_latency_ms(policy, args.latency_runs, False, device)
    # LeRobot's inference: deterministic Euler with the config's num_inference_steps (10)
    result["chunk_latency_deterministic_10_steps"] = chunk_latency_ms(policy, args.latency_runs, True, device)
    print(result, flush=True)

    t0 = time.perf_counter()
    batch = rollout_batch(policy, args.rollouts, args.chunks, 224 if not args.tiny else 24)
    result["rollout_sampling_s"] = round(time.perf_counter() - t0, 1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = Trainer(policy, PPOConfig(minibatch_size=args.minibatch, update_epochs=1, target_kl=None))
    sync(device)
    t0 = time.perf_counter()
    stats = trainer.update(batch)
    sync(device)
    result["ppo_update"] = {
        "chunks": args.rollouts * args.chunks,
        "minibatch": args.minibatch,
        "epochs": 1,
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        if device.type == "cuda"
        else None,
        "minibatch_steps": stats["minibatch_steps"],
    }
    print(result, flush=True)
    result["memory_search"] = largest_minibatch(policy, batch, device)
    print(result, flush=True)
    if args.out:
        cmd = "python bench/bench_pi05.py " + " ".join(argv if argv is not None else sys.argv[1:])
        print(write_result(args.out, result, cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
