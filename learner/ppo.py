"""PPO with mixed back-propagation (PDE, Appendix B) as pure functions, read top to bottom:

    episode rewards --group_advantages--> one advantage per episode (scene groups, GRPO-style)
      or rewards/values/dones --compute_gae--> per-chunk advantages (critic)
    per-element log-probs [B, T, D] --ratio_units--> [B, U] (one ratio per chunk, row or dim)
    new log-probs (rollout p, canonical p_g) --mixed_log_prob--> l ; log_ratio = l - old log-prob
    w0 guard (guard_w0) --> clipped surrogate per unit (clipped_policy_loss) + value loss

A sample is one executed chunk; its log-probability is split into units (the chunk, its rows, or
its T x D elements), each unit gets its own ratio and clip, and a sample's loss is the mean over its
units. Summing 70 (Gaussian) or 350 (flow) dimensions into one ratio made every update either tiny
or clipped: a per-unit ratio keeps the trust region meaningful at any chunk size.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

# The hyper-parameters live torch-free (the loop's settings read them); PPOConfig is re-exported.
from learner.ppo_config import RATIO_UNITS, RATIO_VARIANTS, W0_GUARDS, RatioUnit, RatioVariant, W0Guard
from learner.ppo_config import AdvantageKind as AdvantageKind
from learner.ppo_config import PPOConfig as PPOConfig

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


def group_advantages(
    rewards: Sequence[float] | np.ndarray, groups: Sequence[Hashable], scale: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """One advantage per episode: its reward minus its group's mean reward (divided by the group's
    std when ``scale``). Returns (advantages [E], informative [E]): an episode is informative when
    its group has more than one reward value (a group of one, or all 0 / all 1, carries no signal)."""
    r = np.asarray(rewards, dtype=np.float64)
    if len(groups) != len(r):
        raise ValueError(f"{len(groups)} group keys for {len(r)} rewards")
    adv = np.zeros_like(r)
    informative = np.zeros(len(r), dtype=bool)
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    for idx in members.values():
        gr = r[idx]
        adv[idx] = gr - gr.mean()
        if scale:
            adv[idx] /= gr.std() + 1e-6
        informative[idx] = np.ptp(gr) > 0
    return adv, informative


# --- ratios -------------------------------------------------------------------------------------


def ratio_units(log_prob_elements: torch.Tensor, unit: RatioUnit) -> torch.Tensor:
    """Per-element log-probs [B, T, D] -> per-unit log-probs [B, U]: U = 1 ('chunk'), T ('row') or
    T * D ('dim')."""
    if log_prob_elements.dim() != 3:
        raise ValueError(
            f"expected per-element log-probs [B, T, D], got shape {tuple(log_prob_elements.shape)}"
        )
    if unit == "chunk":
        return log_prob_elements.flatten(1).sum(1, keepdim=True)
    if unit == "row":
        return log_prob_elements.sum(2)
    if unit == "dim":
        return log_prob_elements.flatten(1)
    raise ValueError(f"unknown ratio unit {unit!r}; use one of {RATIO_UNITS}")


def mixed_log_prob(
    variant: RatioVariant, logp_rollout: torch.Tensor, logp_canonical: torch.Tensor
) -> torch.Tensor:
    """l(theta): the current-policy log-likelihood that enters the ratio (any shape, elementwise)."""
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
    """Returns (log_ratio to use, keep mask), both shaped like ``log_ratio``. ``log_w0`` is the
    log-ratio at the start of the update (no gradient). 'drop' masks units with |log w0| > log_max
    out of the policy loss; 'rebase' subtracts log w0, so every ratio starts at 1 (the gradient of
    a unit at the start is A * grad l, whatever its w0 was: no unit is up- or down-weighted by
    how (un)likely it is under the other prompt)."""
    keep = torch.ones_like(log_ratio, dtype=torch.bool)
    if guard == "none":
        return log_ratio, keep
    if guard == "drop":
        return log_ratio, log_w0.abs() <= log_max
    if guard == "rebase":
        return log_ratio - log_w0.detach(), keep
    raise ValueError(f"unknown w0 guard {guard!r}; use one of {W0_GUARDS}")


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
    weights: torch.Tensor | None = None,
) -> PolicyLoss:
    """PPO clipped surrogate (negated), with optional dual clip. ``log_ratio`` is [B] or [B, U]
    (one ratio per unit); ``advantages`` [B] is shared by a sample's units. A sample's loss is the
    mean over its kept units; samples are averaged with ``weights`` [B] (default equal)."""
    if log_ratio.dim() == 1:
        log_ratio = log_ratio.unsqueeze(1)
        keep = None if keep is None else keep.unsqueeze(1)
    adv = advantages.unsqueeze(1)
    ratio = log_ratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    per_unit = torch.max(pg_loss1, pg_loss2)
    if dual_clip > 0:
        # For A < 0 the max above is unbounded in the ratio; cap it at c * |A|.
        per_unit = torch.where(adv < 0, torch.min(per_unit, -dual_clip * adv), per_unit)
    keep_f = torch.ones_like(per_unit) if keep is None else keep.to(per_unit.dtype)
    n_kept = keep_f.sum(1)
    w = torch.ones_like(n_kept) if weights is None else weights.to(per_unit.dtype)
    w = w * (n_kept > 0)  # a sample with no kept unit does not count
    w_total = w.sum().clamp(min=1e-12)

    def weighted_mean(per: torch.Tensor) -> torch.Tensor:
        per_sample = (per * keep_f).sum(1) / n_kept.clamp(min=1)
        return (per_sample * w).sum() / w_total

    pg_loss = weighted_mean(per_unit)
    with torch.no_grad():
        approx_kl = weighted_mean((ratio - 1) - log_ratio)
        clipfrac = weighted_mean(((ratio - 1.0).abs() > clip_coef).to(per_unit.dtype))
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
