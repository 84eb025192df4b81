"""The reward rule and what PPO trains on: labelled episodes, each with its terminal reward.

One home for both, without torch, so the episode loop (which imports no torch until its
arguments are checked), the trainer and the benchmarks share them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pde_contract.episodes import EpisodeFile

# (episode file, its terminal reward) per labelled episode, in collection order.
Batch = Sequence[tuple[EpisodeFile, float]]


def reward_from_label(success: bool | None) -> float:
    """Terminal chunk-level reward: 1 for a success label, 0 otherwise (reward from the task, not
    the prompt)."""
    return 1.0 if success else 0.0
