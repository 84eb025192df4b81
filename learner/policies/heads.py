"""Action heads: the distribution a network's conditioning puts over an action chunk's stochastic
chain, composed by a network (``PolicyNetwork.action_head``) rather than inherited as hooks.

A head owns the four things PPO and the actor ask of it: the distribution parameters of every step
of stored chains (``means``), their log-probability and entropy (``log_prob``), the KL between two
conditionings along them (``kl``), and drawing a new chain (``sample_chain``). The network gives it
what it computes (a velocity field, a chunk mean) as callables of the conditioning and keeps the
weights, so checkpoints and optimisers see the same parameters as before heads were objects.

- ``FlowHead``: a flow-SDE chain over a velocity field (learner/policies/flow_sde.py), as π0.5's
  under PPO; only the first ``action_dim`` columns count when the network pads more.
- ``GaussianHead``: one diagonal Gaussian step around a predicted chunk mean, its log std a
  parameter PPO moves (``noise_parameters``), clamped to a range.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from learner.policies import flow_sde


class ActionHead(ABC):
    """What ``sample_chunks`` and ``evaluate_chunk_pair`` (learner/policies/base.py) ask of a head."""

    @abstractmethod
    def means(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        """Distribution parameters of every stochastic step of stored chains [B, K+1, T, D]
        (transition means for flow-SDE, the chunk mean for a Gaussian head): [B, K, T, D]."""

    @abstractmethod
    def log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_prob [B, T, D] of each executed element, entropy [B]) of chains given ``means``.
        Only the executed action columns count: padded model columns never reach the robot."""

    @abstractmethod
    def kl(self, means_p: torch.Tensor, means_q: torch.Tensor) -> torch.Tensor:
        """KL between the two conditioned distributions along the stored chains, [B]."""

    @abstractmethod
    def sample_chain(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(chain [B, K+1, T, D] normalised, log_prob [B, T, D] per executed element; NaN when
        deterministic, whose K may differ: such chains are for acting, not for PPO)."""

    def noise_parameters(self) -> list[nn.Parameter]:
        """Parameters of the exploration noise PPO moves with their own step size (none: fixed)."""
        return []

    @abstractmethod
    def supervised_draws(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """SFT's random draws for ``n`` rows, (flow noise [n, T, D'], flow times [n] ~ U(0, 1)), from
        the global CPU stream in that order (``Policy.supervised_noise``)."""


@dataclass(frozen=True)
class FlowHead(ActionHead):
    """A flow-SDE chain over ``velocity_fn(cond)``; the network may predict more action columns
    (``model_action_dim``) than the robot executes (``action_dim``; π0.5 pads 7 to 32)."""

    velocity_fn: Callable[[torch.Tensor], flow_sde.VelocityFn]
    schedule: flow_sde.FlowSDESchedule  # the stochastic chain the actor samples and PPO evaluates
    acting_schedule: flow_sde.FlowSDESchedule  # deterministic sampling (evaluation episodes)
    chunk_len: int
    action_dim: int
    model_action_dim: int

    def means(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        return flow_sde.chain_means(self.velocity_fn(cond), chain, self.schedule)

    def log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Only the executed columns: counting π0.5's padded 25 of 32 would add their noise to every ratio.
        log_prob = flow_sde.chain_log_prob_from_means(chain, means, self.schedule)[..., : self.action_dim]
        ent = flow_sde.chain_entropy(self.schedule, self.chunk_len * self.action_dim)
        return log_prob, torch.full(log_prob.shape[:1], ent, dtype=log_prob.dtype, device=log_prob.device)

    def kl(self, means_p: torch.Tensor, means_q: torch.Tensor) -> torch.Tensor:
        d = self.action_dim
        return flow_sde.chain_kl(means_p[..., :d], means_q[..., :d], self.schedule)

    def sample_chain(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn(cond.shape[0], self.chunk_len, self.model_action_dim, device=cond.device)
        schedule = self.acting_schedule if deterministic else self.schedule
        chain, log_prob = flow_sde.sample_chain(self.velocity_fn(cond), noise, schedule, deterministic)
        return chain, log_prob[..., : self.action_dim]

    def supervised_draws(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, self.chunk_len, self.model_action_dim), torch.rand(n)


@dataclass(frozen=True)
class GaussianHead(ActionHead):
    """A diagonal Gaussian chunk around ``mean_fn(cond)`` [B, T, D]: the chain is (zeros, action),
    one stochastic step; ``log_std`` [T * D] is clamped to ``log_std_range`` wherever it is read."""

    mean_fn: Callable[[torch.Tensor], torch.Tensor]
    log_std: nn.Parameter
    log_std_range: tuple[float, float]
    chunk_len: int
    action_dim: int

    def clamped_log_std(self) -> torch.Tensor:
        lo, hi = self.log_std_range
        return self.log_std.clamp(lo, hi)

    def std(self) -> torch.Tensor:
        """[1, 1, T, D]: broadcast over the batch and the chain's one step."""
        return self.clamped_log_std().exp().reshape(1, 1, self.chunk_len, self.action_dim)

    def means(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        return self.mean_fn(cond).unsqueeze(1)

    def log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = chain.shape[0]
        log_prob = flow_sde.gaussian_log_prob(chain[:, 1:], means, self.std()).sum(1)
        entropy = (0.5 * (1.0 + math.log(2 * math.pi)) + self.clamped_log_std()).sum().expand(b)
        return log_prob, entropy

    def kl(self, means_p: torch.Tensor, means_q: torch.Tensor) -> torch.Tensor:
        return (((means_p - means_q) / self.std()) ** 2 / 2.0).flatten(1).sum(1)

    def sample_chain(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.mean_fn(cond)
        std = self.std().squeeze(1)
        action = mean if deterministic else mean + std * torch.randn_like(mean)
        chain = torch.stack([torch.zeros_like(action), action], dim=1)
        log_prob = flow_sde.gaussian_log_prob(action, mean, std)
        if deterministic:
            log_prob = torch.full_like(log_prob, float("nan"))
        return chain, log_prob

    def noise_parameters(self) -> list[nn.Parameter]:
        return [self.log_std]

    def supervised_draws(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        # Drawn as the flow head draws them though the mean regression ignores them: its SFT
        # consumes the seeded stream as the flow head's does.
        return torch.randn(n, self.chunk_len, self.action_dim), torch.rand(n)
