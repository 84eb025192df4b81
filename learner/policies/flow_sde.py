"""Flow-SDE: a stochastic denoising chain for a flow-matching action head, so that an action chunk
has a likelihood PPO can use.

Convention (as openpi): ``x_t = (1 - t) * action + t * noise`` with ``t = 1`` pure noise and ``t = 0``
the action; the network predicts the velocity ``v = noise - action``. Deterministic sampling
integrates ``dx = v dt`` from ``t = 1`` down to ``0``. Flow-SDE replaces each Euler step by a Gaussian
transition with the same marginals (the score is ``-(x + (1 - t) v) / t`` for this path):

    mean_i = x_i - dt * (v + sigma_i**2 / (2 t_i) * (x_i + (1 - t_i) * v))
    x_{i+1} ~ N(mean_i, (sigma_i * sqrt(dt))**2),      sigma_i = a * sqrt(t_i / (1 - t_i))

``sigma_i`` is infinite at ``t = 1``; it is evaluated at ``min(t_i, 1 - dt)`` (the first step uses the
second step's noise level). The log-probability of an executed chunk is the sum of the K transition
densities along the stored chain ``[x_0 .. x_K]`` (``x_0`` is standard noise and does not depend on
the parameters, so it is left out). The same functions serve the small CPU policy and π0.5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

# velocity_fn(x [B, K', T, D], t [K']) -> v [B, K', T, D]; the caller closes over the conditioning.
VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class FlowSDESchedule:
    times: torch.Tensor  # [K + 1], 1 -> 0
    sigmas: torch.Tensor  # [K], sigma_i of the step leaving times[i]
    dt: float

    @property
    def num_steps(self) -> int:
        return int(self.sigmas.shape[0])

    @property
    def step_stds(self) -> torch.Tensor:
        """Standard deviation of each Gaussian transition, ``sigma_i * sqrt(dt)``."""
        return self.sigmas * math.sqrt(self.dt)


def make_schedule(num_steps: int, noise_level: float) -> FlowSDESchedule:
    if num_steps < 2:
        raise ValueError(f"flow-SDE needs at least 2 denoising steps, got {num_steps}")
    if noise_level <= 0:
        raise ValueError(f"flow-SDE noise level a must be > 0 (a likelihood needs noise), got {noise_level}")
    dt = 1.0 / num_steps
    times = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)
    t_sigma = times[:-1].clamp(max=1.0 - dt)
    sigmas = noise_level * torch.sqrt(t_sigma / (1.0 - t_sigma))
    return FlowSDESchedule(times=times.float(), sigmas=sigmas.float(), dt=dt)


def euler_schedule(num_steps: int) -> FlowSDESchedule:
    """The plain Euler ODE's steps from t = 1 to 0 (deterministic sampling only: no noise, so no
    likelihood); the times are ``make_schedule``'s."""
    if num_steps < 1:
        raise ValueError(f"Euler sampling needs at least 1 step, got {num_steps}")
    times = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64).float()
    return FlowSDESchedule(times=times, sigmas=torch.zeros(num_steps), dt=1.0 / num_steps)


def transition_mean(
    x: torch.Tensor, v: torch.Tensor, t: torch.Tensor, sigma: torch.Tensor, dt: float
) -> torch.Tensor:
    """Mean of x_{i+1} given x_i; ``t`` and ``sigma`` broadcast against x's step axis (dim 1)."""
    t = t.view(1, -1, 1, 1)
    sigma = sigma.view(1, -1, 1, 1)
    drift = v + sigma**2 / (2.0 * t) * (x + (1.0 - t) * v)
    return x - dt * drift


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, std**2)."""
    return -0.5 * ((x - mean) / std) ** 2 - torch.log(std) - 0.5 * _LOG_2PI


def sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    t: torch.Tensor,
    sigma: torch.Tensor,
    std: torch.Tensor,
    dt: float,
    draw: torch.Tensor,
    log_prob: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One flow-SDE transition of x [B, T, D] with velocity v and the standard normal ``draw``:
    (x_{i+1}, log_prob plus the transition's density). Elementwise only, so the actor's path can
    compile it into one kernel (learner/policies/pi05_fused.py)."""
    mean = transition_mean(x.unsqueeze(1), v.unsqueeze(1), t, sigma, dt).squeeze(1)
    x_next = mean + std * draw
    return x_next, log_prob + gaussian_log_prob(x_next, mean, std)


def sample_chain(
    velocity_fn: VelocityFn,
    noise: torch.Tensor,
    schedule: FlowSDESchedule,
    deterministic: bool = False,
    step_noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the chain from ``noise`` [B, T, D]. Returns (chain [B, K+1, T, D], log_prob [B, T, D]),
    the log-probability of each element's path (summed over the K transitions).

    ``deterministic`` runs the plain Euler ODE (evaluation); its log_prob is NaN (no density).
    ``step_noise`` [K, B, T, D]: the transitions' standard normal draws, given (drawn here when None,
    one ``randn_like`` per step): a captured CUDA graph reads them from a fixed buffer."""
    x = noise
    chain = [x]
    log_prob = torch.zeros_like(noise)
    stds = schedule.step_stds.to(noise.device)
    for i in range(schedule.num_steps):
        t = schedule.times[i : i + 1].to(noise.device)
        v = velocity_fn(x.unsqueeze(1), t).squeeze(1)
        if deterministic:
            x = x - schedule.dt * v
        else:
            sigma = schedule.sigmas[i : i + 1].to(noise.device)
            draw = torch.randn_like(x) if step_noise is None else step_noise[i]
            x, log_prob = sde_step(x, v, t, sigma, stds[i], schedule.dt, draw, log_prob)
        chain.append(x)
    if deterministic:
        log_prob = torch.full_like(log_prob, float("nan"))
    return torch.stack(chain, dim=1), log_prob


def chain_means(velocity_fn: VelocityFn, chain: torch.Tensor, schedule: FlowSDESchedule) -> torch.Tensor:
    """Transition means of every step of a stored chain in ONE network call: [B, K, T, D]."""
    x = chain[:, :-1]
    t = schedule.times[:-1].to(chain.device)
    v = velocity_fn(x, t)
    return transition_mean(x, v, t, schedule.sigmas.to(chain.device), schedule.dt)


def chain_log_prob_from_means(
    chain: torch.Tensor, means: torch.Tensor, schedule: FlowSDESchedule
) -> torch.Tensor:
    """Per-element path log-probability [B, T, D]: each element's K transition densities summed.
    The chain density factorises over elements given the previous states, which is what lets PPO
    take one ratio per executed row or per dimension instead of one for all T x D x K terms."""
    stds = schedule.step_stds.to(chain.device).view(1, -1, 1, 1)
    return gaussian_log_prob(chain[:, 1:], means, stds).sum(1)


def chain_log_prob(velocity_fn: VelocityFn, chain: torch.Tensor, schedule: FlowSDESchedule) -> torch.Tensor:
    """log pi(chain) = sum_i log N(x_{i+1}; mean_i(x_i), std_i**2), summed over T x D: [B]."""
    return (
        chain_log_prob_from_means(chain, chain_means(velocity_fn, chain, schedule), schedule)
        .flatten(1)
        .sum(1)
    )


def chain_entropy(schedule: FlowSDESchedule, elements_per_step: int) -> float:
    """Entropy of the transition noise (fixed, not learned): sum over steps and elements."""
    stds = schedule.step_stds.double()
    return float(elements_per_step * (0.5 * (1.0 + _LOG_2PI) + torch.log(stds)).sum())


def chain_kl(means_p: torch.Tensor, means_q: torch.Tensor, schedule: FlowSDESchedule) -> torch.Tensor:
    """Path KL(P || Q) of two chains with equal step stds, estimated along chains drawn from P:
    sum_i |mean_p,i - mean_q,i|^2 / (2 std_i^2), [B]. Exact per step; the expectation over the
    states x_i is taken by the stored chains."""
    stds = schedule.step_stds.to(means_p.device).view(1, -1, 1, 1)
    return (((means_p - means_q) / stds) ** 2 / 2.0).flatten(1).sum(1)
