"""The toy of tests/learner/test_pool_retention_toy.py under each PPO variant: the canonical and the
pool prompt's exact A-share after each of 3 updates, and the pool's last move toward the canonical
prompt's mean (docs/learner.md, "Why the pool was spent"). Prints a markdown table (CPU, ~2 min).

    python bench/bench_pool_retention_toy.py
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import learner.trainer  # noqa: E402
from pde_contract.episodes import EpisodeFile  # noqa: E402
from tests.learner import test_pool_retention_toy as toy  # noqa: E402

OFF: dict[str, Any] = {"pool_anchor_coef": 0.0}
CASES: dict[str, dict[str, Any]] = {
    "mixed, drop (old default)": OFF,
    "mixed, no guard": {**OFF, "w0_guard": "none"},
    "mixed, no guard, no clip": {
        **OFF,
        "w0_guard": "none",
        "clip_coef": 100.0,
        "dual_clip": 0.0,
        "target_kl": None,
    },
    "mixed, advantage groups per rollout prompt": OFF,
    "mixed, rebase": {**OFF, "w0_guard": "rebase"},
    "mixed, anchor 1 (default)": {"pool_anchor_coef": 1.0},
    "rollout ratio": {**OFF, "ratio_variant": "rollout"},
    "canonical ratio": {**OFF, "ratio_variant": "canonical"},
}


def per_prompt_groups(episodes: Sequence[EpisodeFile]) -> list[Hashable]:
    """Each (task, rollout prompt) its own advantage baseline."""
    return [("task", e.task, e.rollout_prompt) for e in episodes]


def main() -> int:
    groups = learner.trainer.advantage_groups
    print("| PPO | canonical A-share | pool A-share | pool's last move toward canonical |\n|---|---|---|---|")
    for name, settings in CASES.items():
        if "per rollout prompt" in name:  # each prompt its own baseline
            learner.trainer.advantage_groups = per_prompt_groups
        shares, trainer = toy._run(toy._toy_config(**settings))
        learner.trainer.advantage_groups = groups
        diag = trainer.last_diagnostics
        move = diag.source("pool").move_toward_frac if diag and diag.source("pool") else float("nan")
        canonical = " → ".join(f"{c:.2f}" for c, _ in shares)
        pool = " → ".join(f"{p:.2f}" for _, p in shares)
        print(f"| {name} | {canonical} | {pool} | {move:+.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
