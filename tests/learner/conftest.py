"""The CI box has 2 cores shared by many tests: one torch thread avoids oversubscription."""

from pathlib import Path

import pytest
import torch

from pde_contract.episodes import write_episode
from tests.learner.test_sft import TASKS, _demo

torch.set_num_threads(1)


@pytest.fixture
def demo_dir(tmp_path: Path) -> Path:
    """Four demonstration episodes of each of test_sft's two tasks, as SFT reads them."""
    for task, prompt in TASKS.items():
        for seed in range(4):
            write_episode(tmp_path / "demos" / f"{task}-{seed:03d}.msgpack", _demo(task, prompt, seed))
    return tmp_path / "demos"
