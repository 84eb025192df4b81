"""Trainer: one PPO update on a batch of labelled episodes -> diagnostics (floats).

episodes + rewards --build_rollout_batch--> flat chunk batch
--compute_gae--> b_advantages, b_returns
--initial pass (no grad)--> w0, pi(a|o,p_g)/pi(a|o,p), KL(pi(.|o,p) || pi(.|o,p_g))
--epochs x minibatches--> pg_loss + vf_coef * v_loss - ent_coef * entropy
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from learner.policies.base import ObsBatch, PairEvaluation, Policy
from learner.ppo import (
    PPOConfig,
    clipped_policy_loss,
    compute_gae,
    explained_variance,
    guard_w0,
    mixed_log_prob,
    ratio_stats,
    value_loss,
)
from pde_contract.episodes import EpisodeFile

Batch = Sequence[tuple[EpisodeFile, float]]


@dataclass
class RolloutBatch:
    obs: ObsBatch
    chains: torch.Tensor  # [N, K+1, T, D]
    old_log_probs: torch.Tensor  # [N] recorded under the rollout prompt
    old_values: np.ndarray  # [N]
    rewards: np.ndarray  # [N] chunk-level: the episode reward on its last chunk
    dones: np.ndarray  # [N] 1 on the last chunk of each episode
    rollout_prompts: list[str]
    canonical_prompts: list[str]

    def __len__(self) -> int:
        return len(self.rollout_prompts)


def build_rollout_batch(policy: Policy, batch: Batch) -> RolloutBatch:
    observations, chains, logps, values, rewards, dones, rps, cps = [], [], [], [], [], [], [], []
    for episode, reward in batch:
        if not episode.chunks:
            continue
        for i, chunk in enumerate(episode.chunks):
            missing = [k for k in ("chain", "log_prob", "value") if k not in chunk.extras]
            if missing:
                raise ValueError(
                    f"episode {episode.episode_id} chunk {i} lacks extras {missing}: PPO trains on episodes "
                    "recorded by the learner's actor (demonstrations are for `pde learner sft`)"
                )
            observations.append(chunk.observation)
            chains.append(np.asarray(chunk.extras["chain"], dtype=np.float32))
            logps.append(float(np.asarray(chunk.extras["log_prob"]).reshape(-1)[0]))
            values.append(float(np.asarray(chunk.extras["value"]).reshape(-1)[0]))
            last = i == len(episode.chunks) - 1
            rewards.append(float(reward) if last else 0.0)
            dones.append(1.0 if last else 0.0)
            rps.append(episode.rollout_prompt)
            cps.append(episode.canonical_prompt)
    if not observations:
        raise ValueError("the batch holds no chunks: nothing to train on")
    shapes = {c.shape for c in chains}
    if len(shapes) != 1:
        raise ValueError(
            f"stored chains have different shapes {sorted(shapes)}: episodes from different policies"
        )
    return RolloutBatch(
        obs=policy.preprocess(observations),
        chains=torch.from_numpy(np.stack(chains)),
        old_log_probs=torch.tensor(logps, dtype=torch.float32),
        old_values=np.asarray(values),
        rewards=np.asarray(rewards),
        dones=np.asarray(dones),
        rollout_prompts=rps,
        canonical_prompts=cps,
    )


class Trainer:
    """Owns the training copy of the policy and its optimiser. ``update`` is blocking; the loop runs
    it in a background thread and swaps ``policy_snapshot()`` into the actor between episodes."""

    def __init__(
        self, policy: Policy, config: PPOConfig | None = None, device: torch.device | str | None = None
    ) -> None:
        # On ``device`` (default: where the policy already is) before the optimiser sees the weights.
        self.policy = policy if device is None else policy.to(device)
        self.config = config or PPOConfig()
        cfg = self.config
        special = [
            (policy.value_parameters(), cfg.value_learning_rate),
            (policy.noise_parameters(), cfg.noise_learning_rate),
        ]
        taken = {id(p) for params, _ in special for p in params}
        rest = [p for p in policy.parameters() if p.requires_grad and id(p) not in taken]
        groups: list[dict[str, Any]] = [{"params": rest, "lr": cfg.learning_rate}]
        for params, lr in special:
            trainable = [p for p in params if p.requires_grad]
            if trainable:
                groups.append({"params": trainable, "lr": lr or cfg.learning_rate})
        self.optimizer = torch.optim.Adam(groups, eps=1e-5)
        self.rng = np.random.default_rng(self.config.seed)
        self.n_updates = 0

    def policy_snapshot(self) -> Policy:
        snap = copy.deepcopy(self.policy)
        snap.eval()
        return snap

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "n_updates": self.n_updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.n_updates = int(state["n_updates"])

    def _evaluate(self, rb: RolloutBatch, idx: np.ndarray) -> PairEvaluation:
        obs, chains = rb.obs.index(idx), rb.chains[idx]
        rps = [rb.rollout_prompts[i] for i in idx]
        if self.config.ratio_variant in ("rollout", "plain"):
            # single-prompt variants need no canonical pass for the loss
            ev = self.policy.evaluate(obs, rps, chains)
            zeros = torch.zeros_like(ev.log_prob)
            return PairEvaluation(
                rollout=ev, canonical_log_prob=ev.log_prob, prompt_kl=zeros, n_second_pass=0
            )
        return self.policy.evaluate_pair(obs, rps, [rb.canonical_prompts[i] for i in idx], chains)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        t_start = time.perf_counter()
        self.policy.train()
        rb = build_rollout_batch(self.policy, batch)
        n = len(rb)
        differs = np.array([r != c for r, c in zip(rb.rollout_prompts, rb.canonical_prompts, strict=True)])
        if cfg.ratio_variant == "plain" and differs.any():
            raise ValueError(
                "ratio_variant 'plain' is single-prompt PPO on the canonical prompt, but "
                f"{int(differs.sum())} chunks were rolled out under another prompt; use 'mixed'"
            )

        # GAE on chunk-level rewards, with the values recorded at rollout time
        b_advantages, b_returns = compute_gae(rb.rewards, rb.old_values, rb.dones, cfg.gamma, cfg.gae_lambda)

        # Initial pass at theta_old: w0, prompt likelihood ratio, prompt KL (all prompts, no grad)
        logp_r0, logp_c0, kl0 = np.zeros(n), np.zeros(n), np.zeros(n)
        with torch.no_grad():
            for start in range(0, n, cfg.minibatch_size):
                idx = np.arange(start, min(n, start + cfg.minibatch_size))
                ev = self.policy.evaluate_pair(
                    rb.obs.index(idx),
                    [rb.rollout_prompts[i] for i in idx],
                    [rb.canonical_prompts[i] for i in idx],
                    rb.chains[idx],
                )
                logp_r0[idx] = ev.rollout.log_prob.cpu().numpy()
                logp_c0[idx] = ev.canonical_log_prob.cpu().numpy()
                kl0[idx] = ev.prompt_kl.cpu().numpy()
        b_log_w0 = torch.from_numpy(
            mixed_log_prob(cfg.ratio_variant, torch.from_numpy(logp_r0), torch.from_numpy(logp_c0)).numpy()
            - rb.old_log_probs.double().numpy()
        ).float()
        stats: dict[str, float] = {"n_chunks": float(n), "n_other_prompt_chunks": float(differs.sum())}
        stats.update(ratio_stats("w0", b_log_w0.numpy()))
        excess = np.abs(b_log_w0.numpy()) > cfg.w0_log_max
        stats["w0_guarded_frac"] = float(excess.mean())
        if differs.any():
            stats.update(ratio_stats("prompt_ratio", (logp_c0 - logp_r0)[differs]))
            stats["prompt_kl"] = float(kl0[differs].mean())

        # The loss runs where the policy is; the batch was assembled on the CPU.
        device = self.policy.device
        t_adv = torch.from_numpy(b_advantages).float().to(device)
        if cfg.norm_adv and n > 1:
            t_adv = (t_adv - t_adv.mean()) / (t_adv.std() + 1e-8)
        t_returns = torch.from_numpy(b_returns).float().to(device)
        t_old_values = torch.from_numpy(rb.old_values).float().to(device)
        t_old_log_probs = rb.old_log_probs.to(device)
        t_log_w0 = b_log_w0.to(device)

        # Epochs x minibatches
        approx_kls, clipfracs, pg_losses, v_losses, entropies, kept = [], [], [], [], [], []
        b_inds = np.arange(n)
        stop = False
        for _epoch in range(cfg.update_epochs):
            self.rng.shuffle(b_inds)
            for start in range(0, n, cfg.minibatch_size):
                mb = b_inds[start : start + cfg.minibatch_size]
                ev = self._evaluate(rb, mb)
                new_logp = mixed_log_prob(cfg.ratio_variant, ev.rollout.log_prob, ev.canonical_log_prob)
                log_ratio = new_logp - t_old_log_probs[mb]
                log_ratio, keep = guard_w0(log_ratio, t_log_w0[mb], cfg.w0_guard, cfg.w0_log_max)

                # Policy loss
                pl = clipped_policy_loss(log_ratio, t_adv[mb], cfg.clip_coef, cfg.dual_clip, keep)
                # Value loss
                v_loss = value_loss(
                    ev.rollout.value, t_old_values[mb], t_returns[mb], cfg.clip_coef, cfg.clip_vloss
                )
                entropy = ev.rollout.entropy.mean()
                loss = pl.pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss

                self.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()

                approx_kls.append(pl.approx_kl)
                clipfracs.append(pl.clipfrac)
                pg_losses.append(float(pl.pg_loss.detach()))
                v_losses.append(float(v_loss.detach()))
                entropies.append(float(entropy.detach()))
                kept.append(float(keep.float().mean()))
            if cfg.target_kl is not None and approx_kls[-1] > cfg.target_kl:
                stop = True
                break

        self.n_updates += 1
        self.policy.eval()
        stats.update(
            {
                "pg_loss": float(np.mean(pg_losses)),
                "v_loss": float(np.mean(v_losses)),
                "entropy": float(np.mean(entropies)),
                "approx_kl": float(np.mean(approx_kls)),
                "approx_kl_last": float(approx_kls[-1]),
                "clipfrac": float(np.mean(clipfracs)),
                "kept_frac": float(np.mean(kept)),
                "explained_variance": explained_variance(rb.old_values, b_returns),
                "mean_reward": float(rb.rewards[rb.dones == 1].mean()),
                "early_stop": float(stop),
                "update_s": time.perf_counter() - t_start,
                "n_updates": float(self.n_updates),
            }
        )
        return stats
