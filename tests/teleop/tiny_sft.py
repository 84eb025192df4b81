"""The tiny `pde learner sft` run the teleop tests train on recorded takes (a real subprocess)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import pde_command, subprocess_env


def train_tiny_sft(demos: Path, checkpoints: Path) -> None:
    """2 SFT steps on ``demos``; asserts version 0 was written to ``checkpoints``."""
    sft = subprocess.run(
        pde_command(
            "learner", "sft", "--demos", str(demos), "--checkpoints", str(checkpoints),
            "--steps", "2", "--batch-size", "4", "--image-size", "16", "--chunk-len", "4",
        ),
        capture_output=True, text=True, env=subprocess_env(OMP_NUM_THREADS="1"), timeout=240,
    )  # fmt: skip
    assert sft.returncode == 0, sft.stderr
    assert (checkpoints / "policy-000000.pt").is_file()
