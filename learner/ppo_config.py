"""PPO's hyper-parameters, torch-free: the loop's settings (learner/loop/settings.py, where each
is ``PDE_LOOP_PPO__<FIELD>``) and the benchmarks build a ``PPOConfig`` without importing torch;
learner/ppo.py, the functions that use them, re-exports it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

RatioVariant = Literal["mixed", "canonical", "rollout", "plain"]
RATIO_VARIANTS: tuple[RatioVariant, ...] = ("mixed", "canonical", "rollout", "plain")
W0Guard = Literal["drop", "rebase", "none"]
W0_GUARDS: tuple[W0Guard, ...] = ("drop", "rebase", "none")
RatioUnit = Literal["chunk", "row", "dim"]
RATIO_UNITS: tuple[RatioUnit, ...] = ("chunk", "row", "dim")
AdvantageKind = Literal["group", "gae"]


@dataclass
class PPOConfig:
    advantage: AdvantageKind = "group"
    """'group': one advantage per episode, its reward minus the mean reward of its group (episodes
    of the same task and scene seed; without a seed, of the same task in the batch), as GRPO (RLinf,
    SimpleVLA-RL) -- no critic needed for a terminal 0/1 reward. 'gae': GAE on the value head."""
    group_scale: bool = False
    """Divide group advantages by the group's reward std (GRPO); off, a group's advantages keep the
    size of the reward difference, so a 1-in-8 success is not amplified 2.6x."""
    drop_uniform_groups: bool = True
    """Leave groups whose episodes all got the same reward out of the policy loss (no signal)."""
    ratio_unit: RatioUnit = "dim"
    """One PPO ratio per 'chunk' (all T x D elements summed), per executed 'row' (D summed), or per
    'dim' (each element, RLinf's token_level); the loss averages a sample's units."""
    episode_weighting: bool = True
    """Weight each chunk 1 / (its episode's chunks), so every episode counts once in the loss
    (successes end early, failures run to the chunk limit)."""
    gamma: float = 1.0
    """Discount per chunk ('gae' only); 1 for a terminal 0/1 reward."""
    gae_lambda: float = 1.0
    """GAE lambda ('gae' only)."""
    clip_coef: float = 0.2
    """PPO ratio clip epsilon (per unit)."""
    update_epochs: int = 4
    """Passes over each batch."""
    minibatch_size: int = 64
    """Chunks per gradient step."""
    learning_rate: float = 3e-5
    """Adam step size of the policy (the paper used 5e-6 for π0.5, with chunk-level ratios and
    batches of 2048). On the small CPU policy with per-dim ratios (single-seed pilots, one or two
    updates each): 1e-4 and 3e-4 hit target_kl within the first minibatches (approx_kl 0.04 / 0.22
    per dim); 1e-5 and 3e-5 ran longer at 0.01-0.02. bench/results/learning.json uses 3e-5."""
    value_learning_rate: float | None = 1e-3
    """Adam step size of the value head (Policy.value_parameters); None: learning_rate. The value
    head is untrained after SFT and must catch up faster than the policy moves."""
    noise_learning_rate: float | None = 0.0
    """Adam step size of the exploration noise (Policy.noise_parameters, e.g. a Gaussian log std);
    None: learning_rate; 0: the noise stays where it starts (bounded by the policy)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (the flow-SDE entropy is constant, so 0 by default)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    norm_adv: bool = False
    """Normalise advantages over the whole batch (scales a batch's step by 1/std of its rewards)."""
    clip_vloss: bool = True
    """Clip the value update around the recorded value, as cleanrl."""
    ratio_variant: RatioVariant = "mixed"
    """'mixed' (geometric mean of canonical and rollout likelihoods), 'canonical', 'rollout', or
    'plain' (single-prompt PPO; every rollout must use the canonical prompt)."""
    w0_guard: W0Guard = "drop"
    """Guard on the initial ratio w0 of each unit (w0 != 1 when the ratio involves a prompt the
    chunk was not sampled with): 'drop' removes units with |log w0| > w0_log_max from the policy
    loss; 'rebase' measures every ratio from the update's start (w0 := 1, the behaviour-policy
    correction is dropped, every unit's first gradient is A * grad l); 'none'."""
    w0_log_max: float = math.log(2.0)
    """Bound on |log w0| used by 'drop'."""
    pool_anchor_coef: float = 1.0
    """Weight of a trust region on the rollout prompt's own likelihood for chunks rolled out under a
    prompt other than the canonical one: 0.5 * (log pi(a|o,p) - log pi_old(a|o,p))^2 per unit (the
    k2 estimate of KL(pi_old(.|o,p) || pi(.|o,p))), averaged as the policy loss averages. The mixed
    ratio's clip bounds only 1/2 (log pi(a|o,p_g) + log pi(a|o,p)); in a network shared between
    prompts the canonical half's pull moves the pool prompt's actions too, past their old mean, and
    nothing in the mixed loss holds them (docs/learner.md, "Why the pool was spent"). Applies to the
    'mixed' and 'canonical' ratios ('rollout' clips the pool prompt's own ratio already). 0: off (the
    paper's loss). 1 (bench/results/pool_retention.json, 2 RL seeds x 3 updates): the pool kept
    34 -> 30 of 48 held-out successes where 0 fell 26 -> 16, the canonical prompt gaining as much
    (22 -> 35 against 23 -> 35; a third seed: pool 15 -> 15 against 15 -> 10); 10 kept the pool
    but barely moved the canonical prompt."""
    dual_clip: float = 3.0
    """Dual-clip c: for negative advantages the loss is bounded by c * |A| (0 disables)."""
    target_kl: float | None = 0.05
    """Stop the epochs early when a minibatch's approx_kl (per unit) exceeds this (None: never)."""
    seed: int = 0
    """Minibatch shuffling seed."""
    diagnostics_obs: int = 32
    """Observations of the batch on which each update measures, per prompt, KL(new || old) and how
    far the mean action moved (learner/ppo_diagnostics.py; 0: not measured; a single-process trainer
    only: under torchrun the extra passes would be collectives)."""
    diagnostics_chunks: int = 128
    """Chunks per prompt source on which each update measures the gradient norm of each half of the
    mixed log-likelihood at its start (0: not measured; single-process, as diagnostics_obs)."""

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("ratio_variant", self.ratio_variant, RATIO_VARIANTS),
            ("w0_guard", self.w0_guard, W0_GUARDS),
            ("ratio_unit", self.ratio_unit, RATIO_UNITS),
            ("advantage", self.advantage, ("group", "gae")),
        ):
            if value not in allowed:
                hint = (
                    " ('clamp' was removed: it rescaled gradients by exp(-excess))"
                    if value == "clamp"
                    else ""
                )
                raise ValueError(f"PPOConfig.{name} is {value!r}; use one of {allowed}{hint}")
        if problems := self._out_of_range():
            raise ValueError(f"PPOConfig: {'; '.join(problems)}")

    def _out_of_range(self) -> list[str]:
        """Each field whose value the update cannot use, with the value given."""
        checks: list[tuple[str, object, bool, str]] = [
            ("learning_rate", self.learning_rate, self.learning_rate > 0, "> 0"),
            (
                "value_learning_rate",
                self.value_learning_rate,
                _none_or(self.value_learning_rate, 0.0, True),
                "> 0 or None (the policy's)",
            ),
            (
                "noise_learning_rate",
                self.noise_learning_rate,
                _none_or(self.noise_learning_rate, 0.0, False),
                ">= 0 or None (the policy's)",
            ),
            ("clip_coef", self.clip_coef, self.clip_coef > 0, "> 0"),
            ("update_epochs", self.update_epochs, self.update_epochs >= 1, ">= 1"),
            ("minibatch_size", self.minibatch_size, self.minibatch_size >= 1, ">= 1"),
            ("gamma", self.gamma, 0 <= self.gamma <= 1, "in [0, 1]"),
            ("gae_lambda", self.gae_lambda, 0 <= self.gae_lambda <= 1, "in [0, 1]"),
            ("vf_coef", self.vf_coef, self.vf_coef >= 0, ">= 0"),
            ("ent_coef", self.ent_coef, self.ent_coef >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm, self.max_grad_norm > 0, "> 0"),
            ("w0_log_max", self.w0_log_max, self.w0_log_max > 0, "> 0"),
            ("pool_anchor_coef", self.pool_anchor_coef, self.pool_anchor_coef >= 0, ">= 0 (0: off)"),
            ("diagnostics_obs", self.diagnostics_obs, self.diagnostics_obs >= 0, ">= 0 (0: off)"),
            ("diagnostics_chunks", self.diagnostics_chunks, self.diagnostics_chunks >= 0, ">= 0 (0: off)"),
            # c <= 1 would bound the loss below the clipped surrogate itself
            ("dual_clip", self.dual_clip, self.dual_clip == 0 or self.dual_clip > 1, "0 (off) or > 1"),
            ("target_kl", self.target_kl, _none_or(self.target_kl, 0.0, True), "> 0 or None (never stop)"),
        ]
        return [f"{name} must be {rule}, got {value!r}" for name, value, ok, rule in checks if not ok]


def _none_or(value: float | None, bound: float, strict: bool) -> bool:
    return value is None or (value > bound if strict else value >= bound)
