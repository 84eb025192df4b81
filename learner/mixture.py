"""Prompt mixture for the RL stage: each rollout samples p ~ alpha * delta(p_g) + (1 - alpha) *
Uniform(pool) and holds it for the episode. alpha follows the canonical prompt's success:

    s_bar_t = beta * s_t(p_g) + (1 - beta) * s_bar_{t-1}
    alpha_t = clip(s_bar_t / c, alpha_min, 1)

s_t(p_g) is the canonical prompt's success over a sliding window: its last ``window`` labelled
episodes (``window_success``), not the canonical episodes of one PPO batch. At alpha_min = 0.05 and
a batch of 8, most batches hold no canonical episode and some hold exactly one: a per-batch rate
would leave alpha frozen for most iterations and then let a single episode move s_bar by beta.
With a window, every iteration has an estimate, and one new episode changes it by at most 1/window.

The start is explicit: the caller gives s_bar_0 (the loop: the canonical prompt's success over its
bootstrap rollouts, or ``LoopSettings.ema_start``) and logs it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class AlphaSchedule:
    beta: float = 0.3
    """EMA smoothing factor of the canonical-prompt success rate."""
    consolidation_target: float = 0.5
    """c: canonical success at which all rollouts use the canonical prompt."""
    alpha_min: float = 0.05
    """Floor on alpha so the canonical prompt is always sampled."""
    ema_success: float = 0.0
    """s_bar: the current EMA (persist it with the task state to resume); s_bar_0 is the caller's."""
    window: int = 16
    """s_t(p_g) is the success rate of the canonical prompt's last this many episodes."""

    def __post_init__(self) -> None:
        if not 0.0 < self.beta <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {self.beta}")
        if self.consolidation_target <= 0.0:
            raise ValueError(f"consolidation target c must be > 0, got {self.consolidation_target}")
        if not 0.0 < self.alpha_min <= 1.0:
            raise ValueError(f"alpha_min must be in (0, 1], got {self.alpha_min}")
        if self.window < 1:
            raise ValueError(f"the canonical success window must hold >= 1 episode, got {self.window}")

    @property
    def alpha(self) -> float:
        return min(1.0, max(self.alpha_min, self.ema_success / self.consolidation_target))

    def update(self, canonical_success_rate: float) -> float:
        """Fold in s_t(p_g) of the latest iteration; returns the new alpha."""
        if not 0.0 <= canonical_success_rate <= 1.0:
            raise ValueError(f"a success rate is in [0, 1], got {canonical_success_rate}")
        self.ema_success = self.beta * canonical_success_rate + (1.0 - self.beta) * self.ema_success
        return self.alpha

    def update_from_window(self, canonical_outcomes: Sequence[bool]) -> float:
        """Fold in s_t(p_g) = the success rate of the last ``window`` of ``canonical_outcomes``
        (oldest first); with no canonical episode at all, alpha stays. Returns the new alpha."""
        rate = window_success(canonical_outcomes, self.window)
        if rate is None:
            return self.alpha
        return self.update(rate)


def window_success(outcomes: Sequence[bool], window: int) -> float | None:
    """Success rate of the last ``window`` outcomes (oldest first); None when there are none."""
    recent = list(outcomes)[-window:] if window > 0 else []
    if not recent:
        return None
    return sum(bool(o) for o in recent) / len(recent)


def sample_prompt(canonical: str, pool: Sequence[str], alpha: float, rng: random.Random) -> str:
    """One draw from alpha * delta(canonical) + (1 - alpha) * Uniform(pool). An empty pool gives
    the canonical prompt."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not pool or rng.random() < alpha:
        return canonical
    return pool[rng.randrange(len(pool))]
