"""PPO with mixed back-propagation (PDE, Appendix B) as pure functions, read top to bottom:

    rewards/values/dones --compute_gae--> b_advantages, b_returns
    new log-probs (rollout p, canonical p_g) --mixed_log_prob--> l_t ; log_ratio = l_t - old log-prob
    w0 guard (initial_log_w0 -> guard_w0) --> clipped surrogate (pg_loss) + value loss

Every function works on one flat batch of chunk-level samples (a chunk is one PPO step: one
log-probability summed over its rows, one reward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

RatioVariant = Literal["mixed", "canonical", "rollout", "plain"]
RATIO_VARIANTS: tuple[RatioVariant, ...] = ("mixed", "canonical", "rollout", "plain")
W0Guard = Literal["clamp", "drop", "none"]


@dataclass
class PPOConfig:
    gamma: float = 0.99
    """Discount per chunk."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clip epsilon."""
    update_epochs: int = 4
    """Passes over each batch."""
    minibatch_size: int = 64
    """Chunks per gradient step."""
    learning_rate: float = 2e-6
    """Adam step size of the policy (the paper used 5e-6 for π0.5). Measured on the small CPU policy
    (bench/bench_learning.py, 24-32 episodes per update): 1e-5 gives approx_kl 1-7 and clipfrac
    ~0.5 per update, 2e-6 approx_kl 0.1-0.3 and clipfrac ~0.2."""
    value_learning_rate: float | None = 1e-3
    """Adam step size of the value head (Policy.value_parameters); None: learning_rate. The value
    head is untrained after SFT and must catch up faster than the policy moves."""
    noise_learning_rate: float | None = 3e-3
    """Adam step size of the exploration noise (Policy.noise_parameters, e.g. a Gaussian log std);
    None: learning_rate. A chunk's log-probability sums T x D dimensions, so the mean must move in
    tiny steps, but a handful of noise scales can adapt much faster."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (the flow-SDE entropy is constant, so 0 by default)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    norm_adv: bool = True
    """Normalise advantages over the whole batch."""
    clip_vloss: bool = True
    """Clip the value update around the recorded value, as cleanrl."""
    ratio_variant: RatioVariant = "mixed"
    """'mixed' (geometric mean of canonical and rollout likelihoods), 'canonical', 'rollout', or
    'plain' (single-prompt PPO; every rollout must use the canonical prompt)."""
    w0_guard: W0Guard = "clamp"
    """Guard on the initial ratio w0: 'clamp' shifts each sample's log-ratio so that |log w0| <=
    w0_log_max (gradients kept), 'drop' removes those samples from the policy loss, 'none'."""
    w0_log_max: float = math.log(2.0)
    """Bound on |log w0| used by the guard."""
    dual_clip: float = 3.0
    """Dual-clip c: for negative advantages the loss is bounded by c * |A| (0 disables)."""
    target_kl: float | None = None
    """Stop the epochs early when approx_kl exceeds this (None: never)."""
    seed: int = 0
    """Minibatch shuffling seed."""


# --- advantages ---------------------------------------------------------------------------------


def compute_gae(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, gamma: float, gae_lambda: float
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over consecutive episodes laid end to end. ``dones[t] = 1`` marks the last chunk of an
    episode (terminal: nothing is bootstrapped after it). Returns (advantages, returns)."""
    n = len(rewards)
    advantages = np.zeros(n, dtype=np.float64)
    lastgaelam = 0.0
    for t in reversed(range(n)):
        nextnonterminal = 1.0 - float(dones[t])
        nextvalue = values[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * nextvalue * nextnonterminal - values[t]
        lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


# --- ratios -------------------------------------------------------------------------------------


def mixed_log_prob(
    variant: RatioVariant, logp_rollout: torch.Tensor, logp_canonical: torch.Tensor
) -> torch.Tensor:
    """l_t(theta): the current-policy log-likelihood that enters the ratio."""
    if variant == "mixed":
        return 0.5 * logp_canonical + 0.5 * logp_rollout
    if variant in ("canonical", "plain"):
        return logp_canonical
    if variant == "rollout":
        return logp_rollout
    raise ValueError(f"unknown ratio variant {variant!r}; use one of {RATIO_VARIANTS}")


def guard_w0(
    log_ratio: torch.Tensor, log_w0: torch.Tensor, guard: W0Guard, log_max: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (guarded log_ratio, keep mask). ``log_w0`` is the log-ratio at the start of the
    update (detached). 'clamp' subtracts the part of log w0 beyond +-log_max (a constant per
    sample, so gradients are unchanged); 'drop' masks those samples out of the policy loss."""
    keep = torch.ones_like(log_w0, dtype=torch.bool)
    if guard == "none":
        return log_ratio, keep
    excess = log_w0 - log_w0.clamp(-log_max, log_max)
    if guard == "clamp":
        return log_ratio - excess.detach(), keep
    if guard == "drop":
        return log_ratio, excess == 0
    raise ValueError(f"unknown w0 guard {guard!r}; use 'clamp', 'drop' or 'none'")


# --- losses -------------------------------------------------------------------------------------


@dataclass
class PolicyLoss:
    pg_loss: torch.Tensor
    approx_kl: float
    clipfrac: float


def clipped_policy_loss(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
    dual_clip: float = 0.0,
    keep: torch.Tensor | None = None,
) -> PolicyLoss:
    """PPO clipped surrogate (negated, mean over kept samples), with optional dual clip."""
    ratio = log_ratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    per_sample = torch.max(pg_loss1, pg_loss2)
    if dual_clip > 0:
        # For A < 0 the max above is unbounded in the ratio; cap it at c * |A|.
        per_sample = torch.where(advantages < 0, torch.min(per_sample, -dual_clip * advantages), per_sample)
    if keep is None:
        keep = torch.ones_like(per_sample, dtype=torch.bool)
    n = keep.sum().clamp(min=1)
    pg_loss = (per_sample * keep).sum() / n
    with torch.no_grad():
        approx_kl = (((ratio - 1) - log_ratio) * keep).sum() / n
        clipfrac = (((ratio - 1.0).abs() > clip_coef).float() * keep).sum() / n
    return PolicyLoss(pg_loss=pg_loss, approx_kl=float(approx_kl), clipfrac=float(clipfrac))


def value_loss(
    new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip_coef: float, clip: bool
) -> torch.Tensor:
    v_loss_unclipped = (new_values - returns) ** 2
    if not clip:
        return 0.5 * v_loss_unclipped.mean()
    v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    var_y = float(np.var(y_true))
    return float("nan") if var_y == 0 else 1.0 - float(np.var(y_true - y_pred)) / var_y


def ratio_stats(prefix: str, log_values: np.ndarray) -> dict[str, float]:
    """mean/median/min/max of exp(log_values), plus the spread of the logs (robust to overflow)."""
    if log_values.size == 0:
        return {}
    w = np.exp(np.clip(log_values, -50, 50))
    return {
        f"{prefix}_mean": float(w.mean()),
        f"{prefix}_median": float(np.median(w)),
        f"{prefix}_min": float(w.min()),
        f"{prefix}_max": float(w.max()),
        f"{prefix}_log_abs_mean": float(np.abs(log_values).mean()),
    }
