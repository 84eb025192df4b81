"""Mixed-prompt PPO must keep what the pool prompt does while it moves the canonical prompt (issue 32
item 2), on a toy that isolates it: the real SmallVLAPolicy (Gaussian head, one network shared by
the prompts), the real Trainer with the loop's PPO defaults (one ratio per dimension, the w0 guard,
task-level group advantages, episode weighting), one-chunk episodes from the alpha mixture.

The action has two modes along its first dimension: mode A (the chunk's mean of that dimension
within WINDOW of the pool prompt's start) succeeds, mode B (further off) does not. A short "SFT"
puts the canonical prompt mostly in B (A-share ~0.09) and the pool prompt mostly in A (~0.82), as
in the paper's regime. A-shares are computed exactly from the means on fixed observations (no
sampling noise in the assertion).

What the old default did (pool_anchor_coef = 0): the canonical half of the mixed log-likelihood
pulls the canonical mean toward the pool's successful actions, and through the shared weights moves
the pool prompt's mean the same way, past its own mode; the mixed ratio's clip bounds only the
average of the two halves, so nothing holds the pool: canonical 0.10 -> 0.69 while the pool fell
0.81 -> 0.42 within three updates. With PPOConfig.pool_anchor_coef = 1 (the default now): canonical
0.10 -> 0.44, pool 0.81 -> 0.80 (bench/bench_pool_retention_toy.py prints every variant).
"""

import math

import numpy as np
import pytest
import torch

from learner.actor import policy_trace
from learner.policies.vla import SmallVLAPolicy, make_test_policy
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_observation
from learner.trainer import Trainer
from pde_contract.episodes import ChunkRecord, EpisodeFile

CANONICAL = "put the green container in front of the camera"
POOL = "raise the green tub toward the lens"
POOL_START = 0.0  # the pool prompt's SFT mean of the first action dimension (normalised units)
GAP = 0.3  # the canonical prompt's SFT mean sits this far below it
WINDOW = 0.15  # success: the chunk's mean first dimension within this of POOL_START
ALPHA = 0.25  # the canonical prompt's share of rollouts (the loop's alpha)


def _sft(policy: SmallVLAPolicy, obs, steps: int = 150) -> None:
    """Regress each prompt's mean chunk: dimension 0 at its mode, the other dimensions shared."""
    t, d = policy.chunk_len, policy.action_dim
    gen = torch.Generator().manual_seed(0)
    rest = 0.3 * torch.randn(len(obs), 1, d - 1, generator=gen).expand(-1, t, -1)
    targets = {}
    for prompt, first in ((CANONICAL, POOL_START - GAP), (POOL, POOL_START)):
        target = torch.zeros(len(obs), t, d)
        target[:, :, 0], target[:, :, 1:] = first, rest
        targets[prompt] = target
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    for _ in range(steps):
        losses = [((_means(policy, obs, p) - y) ** 2).mean() for p, y in targets.items()]
        loss = torch.stack(losses).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _means(policy: SmallVLAPolicy, obs, prompt: str) -> torch.Tensor:
    """The Gaussian head's mean chunk [B, T, D] under ``prompt`` (normalised units)."""
    return policy.gaussian_mean(policy.condition(policy.encode_observations(obs), [prompt] * len(obs)))


@torch.no_grad()
def a_share(policy, obs, prompt: str) -> float:
    """Exact probability that a sampled chunk lands in mode A, averaged over the observations."""
    assert isinstance(policy, SmallVLAPolicy)
    mean = _means(policy, obs, prompt)
    first = mean[:, :, 0].mean(1).numpy()
    sd = float(policy._gaussian_std()[0, 0, 0, 0]) / math.sqrt(policy.chunk_len)

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    return float(
        np.mean([phi((POOL_START + WINDOW - m) / sd) - phi((POOL_START - WINDOW - m) / sd) for m in first])
    )


def _batch(policy, observations, obs, rng, n: int, update: int):
    """n one-chunk episodes: prompt from the alpha mixture, observation from the fixed set, reward
    1 in mode A; each its own scene (a lab's rollouts_per_scene = 1: the task is the group)."""
    prompts = [CANONICAL if rng.random() < ALPHA else POOL for _ in range(n)]
    which = rng.integers(len(observations), size=n)
    sample = policy.sample(obs.index(which), prompts)
    out = []
    for i in range(n):
        executed = sample.chain[i, -1]
        success = bool(abs(executed[:, 0].mean() - POOL_START) < WINDOW)
        record = ChunkRecord(
            observation=observations[which[i]], actions=sample.actions[i], trace=policy_trace(sample, i)
        )
        episode = EpisodeFile(
            episode_id=f"{update}-{i}",
            task="toy",
            canonical_prompt=CANONICAL,
            rollout_prompt=prompts[i],
            action_space=policy.action_space,
            control_rate_hz=10.0,
            chunks=[record],
            success=success,
            source="synthetic",
            seed=1000 * update + i,
        )
        out.append((episode, float(success)))
    return out


def _run(config: PPOConfig, updates: int = 3):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    policy = make_test_policy("gaussian")
    observations = [synthetic_observation(rng, 16, seq=i) for i in range(12)]
    obs = policy.preprocess(observations)
    _sft(policy, obs)
    trainer = Trainer(policy, config)
    shares = [(a_share(policy, obs, CANONICAL), a_share(policy, obs, POOL))]
    for u in range(updates):
        trainer.update(_batch(trainer.policy, observations, obs, rng, 48, u))
        shares.append((a_share(trainer.policy, obs, CANONICAL), a_share(trainer.policy, obs, POOL)))
    return shares, trainer


def _toy_config(**overrides) -> PPOConfig:
    # The loop's PPO defaults; only the step size and minibatch are the toy's (a few updates, not 30).
    return PPOConfig(learning_rate=1e-3, minibatch_size=32, **overrides)


def test_the_toy_starts_in_the_papers_regime():
    shares, _ = _run(_toy_config(), updates=0)
    (canonical, pool) = shares[0]
    assert canonical < 0.15 and pool > 0.75, shares


def test_mixed_ppo_moves_the_canonical_prompt_and_keeps_the_pool():
    shares, trainer = _run(_toy_config())
    (c0, p0), (c_end, _) = shares[0], shares[-1]
    assert c_end > c0 + 0.1, f"the canonical prompt did not move: {shares}"
    assert min(p for _, p in shares) > p0 - 0.05, f"the update spent the pool prompt: {shares}"
    diag = trainer.last_diagnostics
    assert diag is not None and diag.source("pool1").n_chunks > 0
    assert diag.source("pool1").prompt == POOL  # the typed per-prompt record names its prompt


@pytest.mark.parametrize("coef", [0.0])
def test_without_the_anchor_the_pool_is_spent(coef):
    """The cause, kept visible: the paper's mixed ratio alone moves the pool prompt off its mode,
    and the diagnostics show it moving away from the canonical prompt (past its own old mean)."""
    shares, trainer = _run(_toy_config(pool_anchor_coef=coef))
    (c0, p0), (c_end, p_end) = shares[0], shares[-1]
    assert c_end > c0 + 0.1 and p_end < p0 - 0.15, shares
    pool = trainer.last_diagnostics.source("pool")
    assert pool.move_toward == "canonical" and pool.move_toward_frac < 0.0, pool
