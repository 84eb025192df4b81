"""LeRobot 0.6.1's own π0.5 latency on the weights bench_pi05.py timed: the LeRobot side by side of
bench/gpu_session.sh.

Runs where LeRobot 0.6.1 imports (Python >= 3.12, torch < 2.12, transformers 5.5): bench_pi05.py
``--parts lerobot`` starts it with ``--lerobot-python`` and the wheels ``gpu_session.sh --prepare``
fetched on the path. It reads the directory bench_pi05.py exported (``export_lerobot``: the same
random weights) and ``inputs.npz`` (the same observation at the model's size, our prompt tokens:
LeRobot's tokenizer is PaliGemma's, gated, so the tokens go in as its tokenizer step would put
them; the noise and our float32 10-step Euler chunk for a check that both sides run the same
network).

Timed, after 3 warm-up calls, p50/p90/p99 over ``--runs``: ``predict_action_chunk`` with LeRobot's
10 Euler steps (its default; our ``deterministic_10_steps``) and with 5 (our chain's step count),
and ``select_action`` after ``reset`` (a chunk computed, its first action returned), for each of
``--dtypes``: ``float32`` (LeRobot's default) and ``bfloat16`` (its bf16 weights, the vision tower
and norms kept float32). LeRobot's own compile option (``compile_model``, max-autotune) is not
timed: its compile alone outlasts a GPU session. Prints one JSON line.

    python bench/lerobot_pi05_latency.py DIR INPUTS [--device cuda] [--runs 30] [--sizes SIZES]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: _common, check_pi05_lerobot
from _common import call_latency_ms, versions
from check_pi05_lerobot import teach_lerobot_tiny_sizes


def load(directory: Path, dtype: str, device: str) -> Any:
    """LeRobot's PI05Policy from ``directory`` with ``dtype``; SystemExit when LeRobot kept random
    weights (it prints a warning instead of raising when loading fails)."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from safetensors import safe_open

    config = PreTrainedConfig.from_pretrained(directory)
    config.dtype, config.device = dtype, device
    with contextlib.redirect_stdout(io.StringIO()):
        policy = PI05Policy.from_pretrained(directory, config=config)
    key = "model.action_out_proj.weight"  # stays in LeRobot's dtype: compared as float32
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        expected = f.get_tensor(key)
    got = policy.state_dict()[key].float().cpu()
    if not torch.allclose(got, expected.to(got.dtype), atol=1e-2):
        raise SystemExit(f"LeRobot did not load {directory}'s weights ({key} differs)")
    return policy.eval()


def timed(
    directory: Path,
    dtype: str,
    device: str,
    batch: dict[str, Any],
    noise: Any,
    ours: np.ndarray,
    runs: int,
    sync: Callable[[], None],
) -> dict[str, Any]:
    """LeRobot's policy in ``dtype``: its chunk against ours (same noise) and its latencies."""
    import torch

    t0 = time.perf_counter()
    policy = load(directory, dtype, device)
    load_s = time.perf_counter() - t0

    def select() -> None:
        policy.reset()
        policy.select_action(batch)

    with torch.no_grad():
        chunk = policy.predict_action_chunk(batch, noise=noise).float().cpu().numpy()
        return {
            "load_s": round(load_s, 1),
            "chunk_max_abs_diff_vs_ours_float32_euler10": float(
                np.abs(chunk - ours[..., : chunk.shape[-1]]).max()
            ),
            "predict_action_chunk_10_steps": call_latency_ms(
                lambda: policy.predict_action_chunk(batch), runs, sync
            ),
            "predict_action_chunk_5_steps": call_latency_ms(
                lambda: policy.predict_action_chunk(batch, num_steps=5), runs, sync
            ),
            "select_action": call_latency_ms(select, runs, sync),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", type=Path)
    ap.add_argument("inputs", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--sizes", type=Path, help="a tiny model's sizes.json (check_pi05_lerobot.lerobot_sizes)")
    args = ap.parse_args(argv)
    if args.sizes:
        teach_lerobot_tiny_sizes(json.loads(args.sizes.read_text()))

    import lerobot
    import torch
    import transformers

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    given = np.load(args.inputs)
    batch: dict[str, Any] = {
        k.removeprefix("image:"): torch.from_numpy(given[k]).float().div(255.0).to(args.device)
        for k in given.files
        if k.startswith("image:")
    }
    batch["observation.language.tokens"] = torch.from_numpy(given["tokens"]).to(args.device)
    batch["observation.language.attention_mask"] = torch.from_numpy(given["token_valid"]).to(args.device)
    noise = torch.from_numpy(given["noise"]).float().to(args.device)
    ours = given["chunk_euler10"]
    out: dict[str, Any] = {
        "versions": versions(lerobot=lerobot, torch=torch, transformers=transformers),
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "runs": args.runs,
    }
    for dtype in [d for d in args.dtypes.split(",") if d]:
        out[dtype] = timed(args.directory, dtype, args.device, batch, noise, ours, args.runs, sync)
        print(dtype, out[dtype], file=sys.stderr, flush=True)
        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
