"""SFT of the small policy under DDP, one torchrun process per rank (run by
tests/learner/test_sft_ddp.py): ``python -m torch.distributed.run ... sft_ddp_worker.py DEMOS CKPT
HEAD BATCH STEPS OUT``. Every rank calls ``run_sft`` with its context and writes what it returned
to ``OUT.rankN.json``; rank 0 alone writes the checkpoint in CKPT."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Literal, cast

import torch.distributed as dist

from learner.distributed import init_distributed
from learner.policies.vla import VLAConfig
from learner.sft import SFTConfig, run_sft

REPO = Path(__file__).resolve().parents[2]


def configs(head: str, batch: int, steps: int) -> tuple[VLAConfig, SFTConfig]:
    """The network and settings the test trains in one process and on the ranks alike."""
    vla = VLAConfig(
        image_size_px=16,
        hidden_dim=32,
        chunk_len=4,
        text_encoder="fake-hashing",
        head=cast(Literal["flow", "gaussian"], head),
    )
    return vla, SFTConfig(episodes_per_task=4, steps=steps, batch_size=batch, learning_rate=3e-3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(*args: str | Path | int, module: str = "", nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """This worker (or ``python -m module``) with ``args`` on ``nproc`` CPU ranks (torchrun, gloo);
    AssertionError with its output when it fails."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    target = ["-m", module] if module else [__file__]
    for _attempt in range(3):  # the free port can be taken between probing and binding: try another
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc)]
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"]
        proc = subprocess.run(
            [*cmd, *target, *map(str, args)], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
        )
        if proc.returncode == 0 or "address already in use" not in (proc.stdout + proc.stderr).lower():
            break
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def main() -> int:
    demos, ckpt, head, batch, steps, out = sys.argv[1:7]
    ctx = init_distributed()
    vla, cfg = configs(head, int(batch), int(steps))
    path, metrics, cached = run_sft(demos, ckpt, vla, cfg, ctx=ctx)
    Path(f"{out}.rank{ctx.rank}.json").write_text(
        json.dumps({"path": str(path), "metrics": metrics, "cached": cached})
    )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
