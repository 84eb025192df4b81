"""SFT of the small policy under DDP, one torchrun process per rank (run by
tests/learner/test_sft_ddp.py): ``python -m torch.distributed.run ... sft_ddp_worker.py DEMOS CKPT
HEAD BATCH STEPS OUT``. Every rank calls ``run_sft`` with its context and writes what it returned
to ``OUT.rankN.json``; rank 0 alone writes the checkpoint in CKPT."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Literal, cast

from learner.distributed import end_distributed, init_distributed
from learner.policies.vla import VLAConfig
from learner.sft import SFTConfig, run_sft
from tests.helpers import torchrun


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


def run_ranks(*args: str | Path | int, module: str = "", nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """This worker (or ``python -m module``) with ``args`` on ``nproc`` CPU ranks (torchrun, gloo);
    AssertionError with its output when it fails."""
    target = ["-m", module] if module else [__file__]
    proc = torchrun([*target, *map(str, args)], nproc=nproc)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def main() -> int:
    demos, ckpt, head, batch, steps, out = sys.argv[1:7]
    ctx = init_distributed()
    vla, cfg = configs(head, int(batch), int(steps))
    path, metrics, cached = run_sft(demos, ckpt, vla, cfg, ctx=ctx)
    Path(f"{out}.rank{ctx.rank}.json").write_text(
        json.dumps({"path": str(path), "metrics": metrics, "cached": cached})
    )
    end_distributed(0)


if __name__ == "__main__":
    sys.exit(main())
