"""π0.5 on a GPU: chunk latency before and after the real-time path, PPO update time and peak
memory, the largest minibatch that fits, and the loop's memory on one GPU.

Full-size π0.5 (gemma_2b VLM + gemma_300m expert + SigLIP So400m, 224 px, 50-step chunks, 200 prompt
tokens) with random weights, bf16 autocast over float32 weights (the trainer's), in parts (``--parts``):

- ``latency``: ``Policy.sample`` for one observation (2 cameras), p50/p90/p99 over ``--latency-runs``
  after warm-up (``--slow-runs`` for the uncaptured variants), for the flow-SDE chain PPO samples
  with (``--flow-steps``) and LeRobot's deterministic 10-step Euler sampling, before and after in
  the same run (``--variants``): ``eager`` (the trainer's float32 weights under autocast, the prefix
  packed to float32 per step, as the actor sampled before learner/policies/pi05_realtime.py),
  ``fast_fp32_weights`` (the real-time path on those weights), ``fast`` (the actor's copy: bf16
  weights fused, prefix kept, SDPA, static shapes), ``fast_graphs_unfused`` (the model's modules
  captured as a CUDA graph, issue 25's path), ``fast_graphs`` (the fused path captured; a no-op on a
  CPU) and ``fast_graphs_compiled`` (its elementwise pieces compiled by Inductor, captured); the
  ratios eager / each and the largest difference from the eager chunk (same noise). Per variant
  also: kernels per chunk (``torch.profiler``: CUDA kernels; on a CPU aten operations as a
  stand-in), the images / prefix / chain parts timed apart (CUDA events; each part its own graph
  where the path captures) and a swap of new weights into the copy (its wall time, the first chunk
  after it, that chunk against the eager chunk of the new weights): bench/_pi05_parts.py. Goal
  (issue 35): <= 15 ms p50 on one H200 (<= 20 ms on an H100), p99 <= 1.1 x p50, <= 1,500 kernels;
- ``ppo``: one PPO update (learner/trainer.py, mixed-prompt ratio) on ``--rollouts`` x ``--chunks``
  recorded chunks (half under another prompt), its wall time and peak GPU memory;
- ``memory-search``: the largest minibatch of one forward + backward of ``evaluate_pair`` that fits;
- ``loop-memory``: the loop's GPU memory with the actor and the trainer on one GPU, as
  ``pde learner run`` holds them, for each of ``--loop-trainable``: the trainer's float32 policy, the
  actor's bf16 real-time copy, rollouts sampled by the actor, one PPO update, the trainer's snapshot
  copied into the actor's copy (the swap, in place) and sampled from while the snapshot still exists.

    python bench/bench_pi05.py                     # a GPU machine: writes bench/results/pi05.json
    python bench/bench_pi05.py --tiny --device cpu # a smoke run of the script itself (tiny model)
    bench/gpu_session.sh                           # the prepared GPU session (latency + loop memory)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import call_latency_ms, write_result  # bench/ is on sys.path when run as a script
from _pi05_parts import count_kernels, part_times, swap_cost

from learner.actor import ActorSettings, policy_trace
from learner.policies.base import ChunkSample, Policy
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
    return call_latency_ms(
        lambda: policy.sample(obs, [CANON], deterministic=deterministic), runs, lambda: sync(device)
    )


# The actor's ways to sample, before and after (ActorSettings: PDE_ACTOR_*).
VARIANTS: dict[str, ActorSettings] = {
    "eager": ActorSettings(fast_inference=False, bf16_weights=False, cuda_graphs=False),
    # the prefix kept and SDPA alone, float32 weights under autocast: what bf16 weights add is apart
    "fast_fp32_weights": ActorSettings(fast_inference=True, bf16_weights=False, cuda_graphs=False),
    "fast": ActorSettings(fast_inference=True, bf16_weights=True, cuda_graphs=False),
    # the real-time path through the model's modules (no fused weights), captured: issue 25's path
    "fast_graphs_unfused": ActorSettings(fast_inference=True, bf16_weights=True, cuda_graphs=True),
    "fast_graphs": ActorSettings(fast_inference=True, bf16_weights=True, cuda_graphs=True),
    "fast_graphs_compiled": ActorSettings(
        fast_inference=True, bf16_weights=True, cuda_graphs=True, compiled_kernels=True
    ),
}
UNFUSED = {"fast_graphs_unfused"}


def _one_sample(policy: Policy, seed: int) -> ChunkSample:
    obs = policy.preprocess([synthetic_observation(np.random.default_rng(1), size_px=224)])
    torch.manual_seed(seed)
    return policy.sample(obs, [CANON])


def latency_before_after(
    policy: Pi05Policy,
    runs: int,
    device: torch.device,
    variants: list[str] | None = None,
    slow_runs: int | None = None,
) -> dict[str, Any]:
    """Each variant on its own actor copy of ``policy`` (the trainer's float32 weights): latency,
    kernels per chunk, the parts apart and a swap of new weights. A variant that fails is recorded
    with its error and the others still run. ``slow_runs``: chunks timed for the uncaptured
    variants (default ``runs``)."""
    out: dict[str, Any] = {}
    reference = _one_sample(policy, seed=7)
    same_noise: dict[str, ChunkSample] = {}
    names = variants or list(VARIANTS)
    obs = policy.preprocess([synthetic_observation(np.random.default_rng(0), size_px=224)])
    for name in names:
        settings = VARIANTS[name]
        n = runs if settings.cuda_graphs else (slow_runs or runs)
        try:
            actor = copy.deepcopy(policy).for_acting(settings)
            if name in UNFUSED and actor._realtime is not None:
                actor._realtime.use_fused = False
            t0 = time.perf_counter()
            same_noise[name] = _one_sample(actor, seed=7)  # compiles what it compiles, captures
            first_s = time.perf_counter() - t0
            out[name] = {
                "settings": {k: getattr(settings, k) for k in ACTING_FIELDS},
                "fused_weights": bool(actor._realtime and actor._realtime.use_fused),
                "first_chunk_s": round(first_s, 2),
                "sde": chunk_latency_ms(actor, n, False, device),
                "deterministic_10_steps": chunk_latency_ms(actor, n, True, device),
                # (a failed capture falls back to no graphs: said here and in the log)
                "cuda_graphs_used": bool(actor._realtime and actor._realtime.graphs_captured),
                # against the eager path's chunk for the same observation and noise (normalised units)
                "chain_max_abs_diff": float(np.abs(same_noise[name].chain - reference.chain).max()),
                "value_abs_diff": float(np.abs(same_noise[name].value - reference.value).max()),
                "kernels_per_chunk": {
                    "sde": count_kernels(actor, obs, CANON, False, device),
                    "deterministic_10_steps": count_kernels(actor, obs, CANON, True, device),
                },
            }
            if actor._realtime is not None:
                out[name]["parts_sde"] = part_times(actor, obs, CANON, False, min(n, 30), device)
                out[name]["swap"] = swap_cost(actor, policy, lambda p: _one_sample(p, seed=7), device)
            del actor
        except Exception as e:  # a GPU session must bring back what did run
            out[name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, out[name], flush=True)
        _free(device)
    if "fast" in same_noise and "fast_graphs" in same_noise:  # capture changes no kernel
        out["graphs_vs_uncaptured_chain_max_abs_diff"] = float(
            np.abs(same_noise["fast_graphs"].chain - same_noise["fast"].chain).max()
        )
    for name in [n for n in names if n != "eager"]:
        for mode in ("sde", "deterministic_10_steps"):
            if mode in out.get(name, {}) and mode in out.get("eager", {}):
                out[f"ratio_eager_over_{name}_{mode}_p50"] = round(
                    out["eager"][mode]["p50_ms"] / out[name][mode]["p50_ms"], 2
                )
    return out


ACTING_FIELDS = ("fast_inference", "bf16_weights", "cuda_graphs", "compiled_kernels")


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _gib(n_bytes: int) -> float:
    return round(n_bytes / 2**30, 2)


@dataclass
class MemoryProbe:
    """GPU memory at named points of the loop (allocated now, and the peak since the start)."""

    device: torch.device

    def __post_init__(self) -> None:
        self.points: dict[str, dict[str, float]] = {}
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def mark(self, name: str) -> None:
        if self.device.type != "cuda":  # nothing to read on a CPU (the script's check)
            return
        self.points[name] = {
            "allocated_gib": _gib(torch.cuda.memory_allocated(self.device)),
            "peak_allocated_gib": _gib(torch.cuda.max_memory_allocated(self.device)),
            "peak_reserved_gib": _gib(torch.cuda.max_memory_reserved(self.device)),
        }


def loop_memory(
    cfg: Pi05Config,
    options: Pi05Options,
    acting: ActorSettings,
    args: argparse.Namespace,
    device: torch.device,
) -> dict[str, Any]:
    """The loop on one GPU (learner/loop/service.py): trainer and actor copies, rollouts, an update,
    the swap. Memory at each step; the peak is what must fit."""
    probe = MemoryProbe(device)
    torch.manual_seed(0)
    with torch.device(device):
        trainer_policy = Pi05Policy(random_checkpoint(cfg), options)
    trainer_policy.to(device).eval()
    probe.mark("trainer_policy")
    actor = copy.deepcopy(trainer_policy).for_acting(acting)  # as Actor(loaded.policy.to(device))
    probe.mark("actor_copy")
    t0 = time.perf_counter()
    batch = rollout_batch(actor, args.loop_rollouts, args.loop_chunks, 224 if not args.tiny else 24)
    rollout_s = time.perf_counter() - t0
    probe.mark("rollouts_sampled_by_the_actor")
    trainer = Trainer(
        trainer_policy, PPOConfig(minibatch_size=args.minibatch, update_epochs=1, target_kl=None)
    )
    t0 = time.perf_counter()
    trainer.update(batch)
    sync(device)
    update_s = time.perf_counter() - t0
    probe.mark("ppo_update")
    snapshot = trainer.policy_snapshot()  # BackgroundTrainer: saved, then swapped in
    probe.mark("trainer_snapshot")
    t0 = time.perf_counter()
    # Actor.set_policy: copied into the actor's copy where it can, else the snapshot made the copy
    in_place = actor.take_weights_of(snapshot)
    new_actor = actor if in_place else snapshot.for_acting(acting)
    sync(device)
    swap_s = time.perf_counter() - t0
    _one_sample(new_actor, seed=0)  # the next episode's warm-up, the snapshot still held
    probe.mark("swapped_sampling")
    del actor, snapshot
    _free(device)
    probe.mark("snapshot_released")
    result: dict[str, Any] = {
        "trainable": options.trainable,
        "chunks": args.loop_rollouts * args.loop_chunks,
        "minibatch": args.minibatch,
        "rollout_sampling_s": round(rollout_s, 1),
        "ppo_update_s": round(update_s, 1),
        "swap_in_place": in_place,
        "swap_s": round(swap_s, 3),
        "points": probe.points,
    }
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        result["peak_allocated_gib"] = _gib(torch.cuda.max_memory_allocated(device))
        result["peak_reserved_gib"] = _gib(torch.cuda.max_memory_reserved(device))
        result["device_total_gib"] = _gib(total)
    del new_actor, trainer, trainer_policy, batch
    _free(device)
    return result


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
                    ChunkRecord(observation=observations[i], actions=s.actions[j], trace=policy_trace(s, j))
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


PARTS = ("latency", "lerobot", "ppo", "memory-search", "loop-memory")
H100_MEMORY_GIB = 81_559 / 1024  # what nvidia-smi shows for one H100 80GB HBM3 (MiB)


def device_slug(device: torch.device) -> str:
    """'h100_80gb_hbm3' for 'NVIDIA H100 80GB HBM3', 'cpu' on a CPU: result file names."""
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower().removeprefix("nvidia").strip()
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny model: check the script, not π0.5")
    ap.add_argument(
        "--parts",
        default="latency,ppo,memory-search",
        help=f"comma-separated, in this order: {','.join(PARTS)} (default: the first three)",
    )
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--minibatch", type=int, default=16, help="PPO minibatch (chunks)")
    ap.add_argument("--flow-steps", type=int, default=Pi05Options.flow_steps)
    ap.add_argument("--latency-runs", type=int, default=50)
    ap.add_argument(
        "--slow-runs",
        type=int,
        default=None,
        help="latency: chunks timed for uncaptured variants (default: --latency-runs)",
    )
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"latency: some of {','.join(VARIANTS)}")
    ap.add_argument("--trainable", default="all", choices=["all", "no_vision", "expert", "lora"])
    ap.add_argument(
        "--loop-trainable", default="all,expert", help="loop-memory: the trainable settings, one run each"
    )
    ap.add_argument(
        "--lerobot-python",
        default=sys.executable,
        help="lerobot: a Python where LeRobot 0.6.1 imports (with --lerobot-path on its path)",
    )
    ap.add_argument("--lerobot-path", default="", help="lerobot: prepended to that Python's PYTHONPATH")
    ap.add_argument("--lerobot-runs", type=int, default=30, help="lerobot: chunks timed per mode")
    ap.add_argument("--loop-rollouts", type=int, default=16, help="loop-memory: episodes sampled")
    ap.add_argument("--loop-chunks", type=int, default=4, help="loop-memory: chunks per episode")
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument(
        "--out",
        default="pi05",
        help="result name under bench/results/ ('' = do not write; 'auto' = pi05_<device>[_tiny])",
    )
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    if unknown := [p for p in parts if p not in PARTS]:
        ap.error(f"--parts: unknown {unknown}; use some of {','.join(PARTS)}")
    variants = [v for v in args.variants.split(",") if v]
    if unknown := [v for v in variants if v not in VARIANTS]:
        ap.error(f"--variants: unknown {unknown}; use some of {','.join(VARIANTS)}")
    device = torch.device(args.device)
    if args.out == "auto":
        args.out = f"pi05_{device_slug(device)}" + ("_tiny" if args.tiny else "")
    cfg = TINY_CONFIG if args.tiny else Pi05Config()
    options = Pi05Options(
        flow_steps=args.flow_steps,
        bf16=True,
        gradient_checkpointing=not args.no_gradient_checkpointing,
        trainable=args.trainable,
    )
    cmd = "python bench/bench_pi05.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "model": "tiny (script check)" if args.tiny else "pi05 full size, random weights",
        "options": {**vars(args), "bf16": True},
    }

    def save(final: bool = False) -> None:  # after every part: a session cut short keeps what ran
        if args.out:
            write_result(args.out, result, cmd, quiet=not final)

    if any(p in parts for p in ("latency", "lerobot", "ppo", "memory-search")):
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.device(device):  # initialise the 3B parameters where they will live
            policy = Pi05Policy(random_checkpoint(cfg), options)
        policy.to(device).eval()
        result["parameters"] = sum(p.numel() for p in policy.parameters())
        result["build_s"] = round(time.perf_counter() - t0, 1)
        if "latency" in parts:
            result["chunk_latency"] = latency_before_after(
                policy, args.latency_runs, device, variants, args.slow_runs
            )
            save()
        if "lerobot" in parts:
            result["lerobot"] = lerobot_side_by_side(policy, args, device, result.get("chunk_latency", {}))
            print("lerobot", result["lerobot"], flush=True)
            save()
        if "ppo" in parts or "memory-search" in parts:
            t0 = time.perf_counter()
            batch = rollout_batch(policy, args.rollouts, args.chunks, 224 if not args.tiny else 24)
            result["rollout_sampling_s"] = round(time.perf_counter() - t0, 1)
            if "ppo" in parts:
                result["ppo_update"] = ppo_update(policy, batch, args, device)
                save()
            if "memory-search" in parts:
                result["memory_search"] = largest_minibatch(policy, batch, device)
                save()
            del batch
        del policy
        _free(device)
    if "loop-memory" in parts:
        acting = VARIANTS["fast_graphs"]
        result["loop_memory"] = {
            "actor": {k: getattr(acting, k) for k in ACTING_FIELDS},
            "h100_memory_gib": round(H100_MEMORY_GIB, 2),
        }
        for trainable in args.loop_trainable.split(","):
            opts = dataclasses.replace(options, trainable=trainable)
            try:
                run = loop_memory(cfg, opts, acting, args, device)
                if "peak_reserved_gib" in run:  # torch's count; the CUDA context (~0.5 GiB) is apart
                    run["fits_h100"] = run["peak_reserved_gib"] < H100_MEMORY_GIB
            except torch.OutOfMemoryError as e:
                run = {"trainable": trainable, "oom": str(e).splitlines()[0]}
                _free(device)
            result["loop_memory"][trainable] = run
            print("loop memory", trainable, run, flush=True)
            save()
    save(final=True)
    return 0


def lerobot_side_by_side(
    policy: Pi05Policy, args: argparse.Namespace, device: torch.device, ours: dict[str, Any]
) -> dict[str, Any]:
    """LeRobot 0.6.1's own PI05Policy on ``policy``'s weights, exported by ``export_lerobot`` into a
    temporary directory, the same observation, prompt tokens and noise (bench/lerobot_pi05_latency.py,
    run by ``--lerobot-python``), and the ratios of its p50 over ours (same step counts)."""
    import subprocess
    import tempfile

    from check_pi05_lerobot import lerobot_sizes

    from learner.policies.pi05_export import export_lerobot

    with tempfile.TemporaryDirectory(prefix="pde-pi05-lerobot-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        export_lerobot(policy, work / "pi05", device=device.type)
        export_s = time.perf_counter() - t0
        obs = policy.preprocess([synthetic_observation(np.random.default_rng(0), size_px=224)])
        ids, valid = policy.tokenize(
            [CANON], policy.normalize_state(obs.state.to(policy.device)).cpu().numpy()
        )
        trained_with = policy.options
        policy.options = dataclasses.replace(trained_with, bf16=False)  # float32: LeRobot's default
        try:
            torch.manual_seed(7)
            chunk = policy.sample(obs, [CANON], deterministic=True)  # eager, 10 Euler steps
        finally:
            policy.options = trained_with
        arrays = {f"image:{k}": obs.images[:, j].numpy() for j, k in enumerate(policy.image_keys)}
        arrays |= {
            "tokens": ids.cpu().numpy(),
            "token_valid": valid.cpu().numpy(),
            "noise": chunk.chain[:, 0],
            "chunk_euler10": chunk.chain[:, -1],
        }
        np.savez(work / "inputs.npz", **arrays)
        cmd = [args.lerobot_python, str(Path(__file__).parent / "lerobot_pi05_latency.py")]
        cmd += [str(work / "pi05"), str(work / "inputs.npz"), "--device", device.type]
        cmd += ["--runs", str(args.lerobot_runs)]
        if args.tiny:
            (work / "sizes.json").write_text(json.dumps(lerobot_sizes(policy.config)))
            cmd += ["--sizes", str(work / "sizes.json")]
        paths = [p for p in (args.lerobot_path, str(Path(__file__).parent.parent)) if p]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LEROBOT_TIMEOUT_S)
    if done.returncode:
        return {
            "error": f"exit {done.returncode}",
            "stderr_tail": done.stderr[-3000:],
            "export_s": round(export_s, 1),
        }
    out: dict[str, Any] = {"export_s": round(export_s, 1), **json.loads(done.stdout.strip().splitlines()[-1])}
    modes = {"predict_action_chunk_10_steps": "deterministic_10_steps", "predict_action_chunk_5_steps": "sde"}
    for dtype in ("float32", "bfloat16"):
        for theirs, mode in modes.items():
            for name, timed in ours.items():
                if isinstance(timed, dict) and mode in timed and dtype in out:
                    key = f"ratio_lerobot_{dtype}_{theirs}_over_{name}_{mode}_p50"
                    out[key] = round(out[dtype][theirs]["p50_ms"] / timed[mode]["p50_ms"], 2)
    return out


LEROBOT_TIMEOUT_S = 300


def ppo_update(
    policy: Pi05Policy, batch: list[tuple[EpisodeFile, float]], args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = Trainer(policy, PPOConfig(minibatch_size=args.minibatch, update_epochs=1, target_kl=None))
    sync(device)
    t0 = time.perf_counter()
    stats = trainer.update(batch)
    sync(device)
    return {
        "chunks": args.rollouts * args.chunks,
        "minibatch": args.minibatch,
        "epochs": 1,
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_gib": _gib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
        "minibatch_steps": stats["minibatch_steps"],
    }


if __name__ == "__main__":
    sys.exit(main())
