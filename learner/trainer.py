"""Trainer: one PPO update on a batch of labelled episodes -> diagnostics (floats).

episodes + rewards --build_rollout_batch--> flat chunk batch (one sample per executed chunk)
--group_advantages (or compute_gae)--> one advantage per chunk, per-episode weights
--initial pass (no grad)--> w0 per ratio unit, pi(a|o,p_g)/pi(a|o,p), KL(pi(.|o,p) || pi(.|o,p_g))
--epochs x minibatches--> pg_loss (a ratio per chunk, row or dim) + vf_coef * v_loss
"""

from __future__ import annotations

import copy
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from learner import ppo_diagnostics as mech
from learner.policies.base import ChunkPolicy, ObsBatch, PairEvaluation, Policy
from learner.ppo import (
    PPOConfig,
    clipped_policy_loss,
    compute_gae,
    explained_variance,
    group_advantages,
    guard_w0,
    mixed_log_prob,
    ratio_stats,
    ratio_units,
    value_loss,
)
from learner.rewards import Batch
from pde_contract.episodes import ChunkRecord, EpisodeFile, PolicyTrace, policy_rows_mask, rows_commanded_by


@dataclass
class RolloutBatch:
    obs: ObsBatch
    chains: torch.Tensor  # [N, K+1, T, D]
    old_log_probs: torch.Tensor  # [N] recorded under the rollout prompt
    old_log_prob_elements: torch.Tensor  # [N, T, D] recorded (NaN where an old episode lacks them)
    old_values: np.ndarray  # [N]
    rows_ran: torch.Tensor  # [N, T] bool: the policy's rows the robot server ran (policy_rows_mask)
    rewards: np.ndarray  # [N] chunk-level: the episode reward on its last chunk
    dones: np.ndarray  # [N] 1 on the last chunk of each episode
    episode_index: np.ndarray  # [N] which episode of the batch the chunk belongs to
    episode_rewards: np.ndarray  # [E]
    episode_groups: list[Hashable]  # [E] advantage groups
    rollout_prompts: list[str]
    canonical_prompts: list[str]
    person_rows_left_out: int = 0  # rows a person commanded (takeovers): not the policy's actions

    def __len__(self) -> int:
        return len(self.rollout_prompts)


def advantage_groups(episodes: Sequence[EpisodeFile]) -> list[Hashable]:
    """Episodes of the same task and scene seed form a group when the seed occurs more than once
    in the batch (G rollouts of one scene); the others are grouped by task (a batch baseline)."""
    counts: dict[tuple[str, int], int] = {}
    for e in episodes:
        if e.seed is not None:
            counts[(e.task, e.seed)] = counts.get((e.task, e.seed), 0) + 1
    return [
        ("scene", e.task, e.seed) if e.seed is not None and counts[(e.task, e.seed)] > 1 else ("task", e.task)
        for e in episodes
    ]


def recorded_trace(chunk: ChunkRecord, where: str) -> PolicyTrace:
    """The chunk's policy trace (``read_episode`` gives format-1 files theirs)."""
    if chunk.trace is None:
        raise ValueError(
            f"{where} has no policy trace: PPO trains on episodes recorded by "
            "the learner's actor (demonstrations are for `pde learner sft`)"
        )
    return chunk.trace


def build_rollout_batch(policy: Policy, batch: Batch) -> RolloutBatch:
    observations, chains, logps, elems, values, rewards, dones, ep_index, rps, cps, ran = (
        [], [], [], [], [], [], [], [], [], [], []
    )  # fmt: skip
    # A person's chunks (takeovers) leave the batch: their rows are not the policy's actions, and
    # the episode's reward goes on its last policy chunk.
    person_rows = sum(rows_commanded_by(e, "person") for e, _ in batch)
    kept: list[tuple[EpisodeFile, float]] = [
        (e, r) for e, r in batch if any(c.commanded_by == "policy" for c in e.chunks)
    ]
    for k, (episode, reward) in enumerate(kept):
        chunks = [c for c in episode.chunks if c.commanded_by == "policy"]
        for i, chunk in enumerate(chunks):
            trace = recorded_trace(chunk, f"episode {episode.episode_id} chunk {i}")
            observations.append(chunk.observation)
            chain = np.asarray(trace.chain, dtype=np.float32)
            chains.append(chain)
            logps.append(trace.log_prob)
            el = trace.log_prob_elements
            t, d = policy.chunk_len, policy.action_dim
            elems.append(
                np.asarray(el, dtype=np.float32).reshape(t, d)
                if el is not None
                else np.full((t, d), np.nan, np.float32)
            )
            values.append(trace.value)
            ran.append(policy_rows_mask(chunk, t))
            last = i == len(chunks) - 1
            rewards.append(float(reward) if last else 0.0)
            dones.append(1.0 if last else 0.0)
            ep_index.append(k)
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
        old_log_prob_elements=torch.from_numpy(np.stack(elems)),
        old_values=np.asarray(values),
        rows_ran=torch.from_numpy(np.stack(ran)),
        rewards=np.asarray(rewards),
        dones=np.asarray(dones),
        episode_index=np.asarray(ep_index),
        episode_rewards=np.asarray([float(r) for _, r in kept]),
        episode_groups=advantage_groups([e for e, _ in kept]),
        rollout_prompts=rps,
        canonical_prompts=cps,
        person_rows_left_out=int(person_rows),
    )


@dataclass
class _UpdateStart:
    """An update's start, at theta_old: behaviour log-probs and w0 per ratio unit, the units of rows
    that ran, the chunks' prompt sources and the per-source diagnostics being filled in."""

    old_units: torch.Tensor  # [N, U]
    log_w0: torch.Tensor  # [N, U]
    units_ran: torch.Tensor  # [N, U] bool
    sources: dict[str, np.ndarray]
    pool_texts: list[str]
    per_source: dict[str, mech.SourceDiagnostics]


@dataclass
class _LossTensors:
    """The loss's inputs on the policy's device."""

    adv: torch.Tensor
    weights: torch.Tensor
    returns: torch.Tensor
    old_values: torch.Tensor
    old_units: torch.Tensor
    log_w0: torch.Tensor
    units_ran: torch.Tensor
    differs: torch.Tensor


@dataclass
class _Steps:
    """What the minibatch steps of one update measured."""

    clips: mech.ClipCounter
    approx_kls: list[float] = field(default_factory=list)
    clipfracs: list[float] = field(default_factory=list)
    pg_losses: list[float] = field(default_factory=list)
    v_losses: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)
    anchors: list[float] = field(default_factory=list)
    early_stop: bool = False

    def stats(self) -> dict[str, float]:
        out = {
            "pg_loss": float(np.mean(self.pg_losses)),
            "v_loss": float(np.mean(self.v_losses)),
            "entropy": float(np.mean(self.entropies)),
            "approx_kl": float(np.mean(self.approx_kls)),
            "approx_kl_last": float(self.approx_kls[-1]),
            "clipfrac": float(np.mean(self.clipfracs)),
            "kept_frac": float(np.mean(self.kept)),
            "early_stop": float(self.early_stop),
            "minibatch_steps": float(len(self.pg_losses)),
        }
        if self.anchors:
            out["pool_anchor"] = float(np.mean(self.anchors))
        return out


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
            step = cfg.learning_rate if lr is None else lr
            if trainable and step > 0:  # a step size of 0 keeps those parameters where they are
                groups.append({"params": trainable, "lr": step})
        self.optimizer = torch.optim.Adam(groups, eps=1e-5)
        self.rng = np.random.default_rng(self.config.seed)
        self.n_updates = 0
        self.last_diagnostics: mech.UpdateDiagnostics | None = None  # the last update's, per prompt

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
        # Single-prompt variants need no canonical pass for the loss: the rollout prompt as both
        # prompts makes none (the canonical log-probs are then the rollout's, the prompt KL 0).
        single = self.config.ratio_variant in ("rollout", "plain")
        cps = rps if single else [rb.canonical_prompts[i] for i in idx]
        return self.policy.evaluate_pair(obs, rps, cps, chains)

    def _advantages(
        self, rb: RolloutBatch, stats: dict[str, float]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(advantages [N], returns [N], policy-loss weights [N]) per chunk."""
        cfg = self.config
        n_chunks = np.bincount(rb.episode_index).astype(np.float64)
        weights = 1.0 / n_chunks[rb.episode_index] if cfg.episode_weighting else np.ones(len(rb))
        if cfg.advantage == "group":
            ep_adv, informative = group_advantages(rb.episode_rewards, rb.episode_groups, cfg.group_scale)
            advantages = ep_adv[rb.episode_index]
            returns = rb.episode_rewards[rb.episode_index]  # gamma = 1: the value head predicts success
            if cfg.drop_uniform_groups:
                weights = weights * informative[rb.episode_index]
            stats["n_groups"] = float(len(set(rb.episode_groups)))
            stats["informative_episode_frac"] = float(informative.mean())
        else:
            advantages, returns = compute_gae(rb.rewards, rb.old_values, rb.dones, cfg.gamma, cfg.gae_lambda)
        return advantages, returns, weights

    def _pool_anchor(
        self,
        rb: RolloutBatch,
        mb: np.ndarray,
        logp_rollout: torch.Tensor,
        old_units: torch.Tensor,
        units_ran: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        """PPOConfig.pool_anchor_coef's penalty: 0.5 * (log pi(a|o,p) - log pi_old(a|o,p))^2 per unit
        of the chunks with nonzero ``weights`` (those rolled out under another prompt than the
        canonical one), a unit mean per chunk, chunks weighted as the policy loss weighs them."""
        device = logp_rollout.device
        units = ratio_units(logp_rollout * rb.rows_ran[mb].unsqueeze(-1).to(device), self.config.ratio_unit)
        ran = units_ran.to(units.dtype)
        per_chunk = (0.5 * (units - old_units) ** 2 * ran).sum(1) / ran.sum(1).clamp(min=1)
        return (per_chunk * weights).sum() / weights.sum().clamp(min=1e-12)

    def _half_gradient_norms(
        self,
        rb: RolloutBatch,
        sources: dict[str, np.ndarray],
        out: dict[str, mech.SourceDiagnostics],
        t_adv: torch.Tensor,
        t_weights: torch.Tensor,
        t_old_units: torch.Tensor,
        t_log_w0: torch.Tensor,
        t_units_ran: torch.Tensor,
    ) -> None:
        """At the update's start, per source ('canonical', 'pool'): the norm of the policy loss's
        gradient through each half of the mixed log-likelihood, on at most ``diagnostics_chunks``
        of its chunks (the other half held fixed)."""
        cfg = self.config
        if cfg.diagnostics_chunks == 0 or not isinstance(self.policy, ChunkPolicy):
            return  # a torchrun trainer's policy is distributed: its extra passes would be collectives
        rng = np.random.default_rng([cfg.seed, self.n_updates])  # not self.rng: minibatches stay as they were
        params = [p for p in self.policy.parameters() if p.requires_grad]
        for name in (mech.CANONICAL, mech.POOL):
            rows = np.flatnonzero(sources[name])
            if rows.size == 0:
                continue
            idx = np.sort(rng.choice(rows, size=min(rows.size, cfg.diagnostics_chunks), replace=False))
            ev = self.policy.evaluate_pair(
                rb.obs.index(idx),
                [rb.rollout_prompts[i] for i in idx],
                [rb.canonical_prompts[i] for i in idx],
                rb.chains[idx],
            )
            lr, lc = ev.rollout.log_prob_elements, ev.canonical_log_prob_elements
            ran = rb.rows_ran[idx].unsqueeze(-1).to(lr.device)
            for half, ell in (
                ("grad_norm_canonical_half", mixed_log_prob(cfg.ratio_variant, lr.detach(), lc)),
                ("grad_norm_rollout_half", mixed_log_prob(cfg.ratio_variant, lr, lc.detach())),
            ):
                if not ell.requires_grad:  # that half is not in this variant's ratio
                    setattr(out[name], half, 0.0)
                    continue
                log_ratio, keep = guard_w0(
                    ratio_units(ell * ran, cfg.ratio_unit) - t_old_units[idx], t_log_w0[idx], cfg.w0_guard,
                    cfg.w0_log_max,
                )  # fmt: skip
                pl = clipped_policy_loss(
                    log_ratio,
                    t_adv[idx],
                    cfg.clip_coef,
                    cfg.dual_clip,
                    keep & t_units_ran[idx],
                    t_weights[idx],
                )
                grads = torch.autograd.grad(pl.pg_loss, params, retain_graph=True, allow_unused=True)
                norm = float(np.sqrt(sum(float((g.float() ** 2).sum()) for g in grads if g is not None)))
                setattr(out[name], half, norm)

    def _watched(
        self, rb: RolloutBatch, pool_texts: list[str]
    ) -> tuple[ObsBatch, torch.Tensor, list[str]] | None:
        """Fixed observations for the per-prompt movement: up to ``diagnostics_obs`` chunks of the
        batch's most frequent task (its canonical prompt), with that prompt and its pool prompts."""
        cfg = self.config
        if cfg.diagnostics_obs == 0 or not isinstance(self.policy, ChunkPolicy):
            return None  # as in _half_gradient_norms
        canonical = max(set(rb.canonical_prompts), key=rb.canonical_prompts.count)
        rows = np.flatnonzero(np.asarray(rb.canonical_prompts, dtype=object) == canonical)
        pools = sorted(
            {rb.rollout_prompts[i] for i in rows if rb.rollout_prompts[i] != canonical}, key=pool_texts.index
        )
        idx = mech.fixed_subset(rows.size, cfg.diagnostics_obs, np.random.default_rng(cfg.seed))
        return rb.obs.index(rows[idx]), rb.chains[rows[idx]], [canonical, *pools]

    def update(self, batch: Batch) -> dict[str, float]:
        """One PPO update: the batch's start-of-update quantities (theta_old's log-probs under both
        prompts, w0, the diagnostics' first half), the epochs of minibatch steps, the statistics."""
        t_start = time.perf_counter()
        self.policy.train()
        rb = build_rollout_batch(self.policy, batch)
        differs = np.array([r != c for r, c in zip(rb.rollout_prompts, rb.canonical_prompts, strict=True)])
        if self.config.ratio_variant == "plain" and differs.any():
            raise ValueError(
                "ratio_variant 'plain' is single-prompt PPO on the canonical prompt, but "
                f"{int(differs.sum())} chunks were rolled out under another prompt; use 'mixed'"
            )
        stats: dict[str, float] = {
            "n_chunks": float(len(rb)),
            "n_other_prompt_chunks": float(differs.sum()),
            "person_rows_left_out": float(rb.person_rows_left_out),
        }
        advantages, returns, weights = self._advantages(rb, stats)
        start = self._start_of_update(rb, differs, stats)
        tensors = self._loss_tensors(rb, start, differs, advantages, returns, weights)
        self._half_gradient_norms(
            rb, start.sources, start.per_source, tensors.adv, tensors.weights, tensors.old_units,
            tensors.log_w0, tensors.units_ran,
        )  # fmt: skip
        watched = self._watched(rb, start.pool_texts)
        before = mech.snapshot(self.policy, *watched, seed=self.config.seed) if watched else None
        steps = self._epochs(rb, start, tensors)
        self.n_updates += 1
        self.policy.eval()
        for name, frac in steps.clips.fractions().items():
            start.per_source[name].clipfrac = frac
        if before is not None and watched is not None:
            after = mech.snapshot(self.policy, *watched, seed=self.config.seed)
            names = {rb_c: mech.CANONICAL for rb_c in before.prompts[:1]}
            names.update({p: f"{mech.POOL}{start.pool_texts.index(p) + 1}" for p in before.prompts[1:]})
            mech.movement(self.policy, before, after, start.per_source, names)
        self.last_diagnostics = mech.UpdateDiagnostics(list(start.per_source.values()))
        stats.update(self.last_diagnostics.metrics())
        stats.update(steps.stats())
        stats["explained_variance"] = explained_variance(rb.old_values, returns)
        stats["mean_reward"] = float(rb.episode_rewards.mean())
        stats["update_s"] = time.perf_counter() - t_start
        stats["n_updates"] = float(self.n_updates)
        return stats

    def _start_of_update(
        self, rb: RolloutBatch, differs: np.ndarray, stats: dict[str, float]
    ) -> _UpdateStart:
        """theta_old's per-element log-probs under both prompts and the prompt KL (no grad), the
        behaviour log-probs per ratio unit, w0, and the per-source diagnostics' start."""
        cfg = self.config
        n, t, d = len(rb), self.policy.chunk_len, self.policy.action_dim
        logp_r0, logp_c0 = torch.zeros(n, t, d), torch.zeros(n, t, d)
        kl0 = np.zeros(n)
        with torch.no_grad():
            for first in range(0, n, cfg.minibatch_size):
                idx = np.arange(first, min(n, first + cfg.minibatch_size))
                ev = self.policy.evaluate_pair(
                    rb.obs.index(idx),
                    [rb.rollout_prompts[i] for i in idx],
                    [rb.canonical_prompts[i] for i in idx],
                    rb.chains[idx],
                )
                logp_r0[idx] = ev.rollout.log_prob_elements.float().cpu()
                logp_c0[idx] = ev.canonical_log_prob_elements.float().cpu()
                kl0[idx] = ev.prompt_kl.cpu().numpy()
        # The behaviour log-probs: recorded by the actor; episodes recorded before per-element
        # log-probs existed use theta_old's (the update's start) in their place.
        old_elems = rb.old_log_prob_elements.clone()
        missing = torch.isnan(old_elems)
        old_elems[missing] = logp_r0[missing]
        # Rows the robot never ran (overlapped inference: skipped or preempted) leave the ratios.
        ran = rb.rows_ran.unsqueeze(-1)
        old_elems, logp_r0, logp_c0 = old_elems * ran, logp_r0 * ran, logp_c0 * ran
        units_ran = ratio_units(ran.expand(-1, -1, d).float(), cfg.ratio_unit) > 0
        stats["old_log_prob_reevaluated_frac"] = float(missing.any(-1).any(-1).float().mean())
        old_units = ratio_units(old_elems, cfg.ratio_unit)
        log_w0 = ratio_units(mixed_log_prob(cfg.ratio_variant, logp_r0, logp_c0), cfg.ratio_unit) - old_units
        # Recorded vs re-evaluated log-prob of the rollout prompt: > 0 means the policy changed
        # since the episodes were recorded (stale batch) or the recording is inconsistent.
        stats["behaviour_log_ratio_abs_mean"] = float(
            (ratio_units(logp_r0, cfg.ratio_unit) - old_units).abs().mean()
        )
        stats.update(ratio_stats("w0", log_w0.numpy().reshape(-1)))
        stats["w0_guarded_frac"] = float((log_w0.abs() > cfg.w0_log_max).float().mean())
        sources = mech.prompt_sources(rb.rollout_prompts, rb.canonical_prompts)
        pool_texts = mech.pool_prompt_texts(rb.rollout_prompts, rb.canonical_prompts)
        texts = {f"{mech.POOL}{i}": p for i, p in enumerate(pool_texts, start=1)}
        _, keep0 = guard_w0(log_w0, log_w0, cfg.w0_guard, cfg.w0_log_max)
        per_source = mech.start_of_update(sources, log_w0, keep0 & units_ran, cfg.clip_coef, texts)
        if differs.any():
            chunk_lr = (logp_c0 - logp_r0).flatten(1).sum(1).numpy()
            stats.update(ratio_stats("prompt_ratio", chunk_lr[differs]))
            stats["prompt_kl"] = float(kl0[differs].mean())
        return _UpdateStart(old_units, log_w0, units_ran, sources, pool_texts, per_source)

    def _loss_tensors(
        self,
        rb: RolloutBatch,
        start: _UpdateStart,
        differs: np.ndarray,
        advantages: np.ndarray,
        returns: np.ndarray,
        weights: np.ndarray,
    ) -> _LossTensors:
        """What the loss reads, on the policy's device (the batch was assembled on the CPU)."""
        device = self.policy.device
        adv = torch.from_numpy(advantages).float().to(device)
        if self.config.norm_adv and len(rb) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return _LossTensors(
            adv=adv,
            weights=torch.from_numpy(weights).float().to(device),
            returns=torch.from_numpy(returns).float().to(device),
            old_values=torch.from_numpy(rb.old_values).float().to(device),
            old_units=start.old_units.to(device),
            log_w0=start.log_w0.to(device),
            units_ran=start.units_ran.to(device),
            differs=torch.from_numpy(differs).to(device),
        )

    def _epochs(self, rb: RolloutBatch, start: _UpdateStart, tt: _LossTensors) -> _Steps:
        """``update_epochs`` passes of shuffled minibatches, stopped early past ``target_kl``."""
        cfg = self.config
        # the pool prompt's own likelihood is unbounded only where the canonical one enters the ratio
        anchored = cfg.pool_anchor_coef > 0 and cfg.ratio_variant in ("mixed", "canonical")
        steps = _Steps(clips=mech.ClipCounter(list(start.sources)))
        b_inds = np.arange(len(rb))
        for _epoch in range(cfg.update_epochs):
            self.rng.shuffle(b_inds)
            for first in range(0, len(rb), cfg.minibatch_size):
                mb = b_inds[first : first + cfg.minibatch_size]
                approx_kl = self._minibatch_step(rb, start, tt, mb, anchored, steps)
                if cfg.target_kl is not None and approx_kl > cfg.target_kl:
                    steps.early_stop = True
                    return steps
        return steps

    def _minibatch_step(
        self, rb: RolloutBatch, start: _UpdateStart, tt: _LossTensors, mb: np.ndarray, anchored: bool,
        steps: _Steps,
    ) -> float:  # fmt: skip
        """One gradient step on minibatch ``mb``; returns its approx_kl."""
        cfg = self.config
        ev = self._evaluate(rb, mb)
        new_units = ratio_units(
            mixed_log_prob(cfg.ratio_variant, ev.rollout.log_prob_elements, ev.canonical_log_prob_elements)
            * rb.rows_ran[mb].unsqueeze(-1).to(self.policy.device),
            cfg.ratio_unit,
        )
        log_ratio, keep = guard_w0(new_units - tt.old_units[mb], tt.log_w0[mb], cfg.w0_guard, cfg.w0_log_max)
        keep = keep & tt.units_ran[mb]
        steps.clips.add(start.sources, mb, log_ratio.detach(), keep, cfg.clip_coef)
        pl = clipped_policy_loss(log_ratio, tt.adv[mb], cfg.clip_coef, cfg.dual_clip, keep, tt.weights[mb])
        v_loss = value_loss(
            ev.rollout.value, tt.old_values[mb], tt.returns[mb], cfg.clip_coef, cfg.clip_vloss
        )
        entropy = ev.rollout.entropy.mean()
        loss = pl.pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
        if anchored and bool(tt.differs[mb].any()):
            anchor = self._pool_anchor(rb, mb, ev.rollout.log_prob_elements, tt.old_units[mb],
                                       tt.units_ran[mb], tt.weights[mb] * tt.differs[mb])  # fmt: skip
            loss = loss + cfg.pool_anchor_coef * anchor
            steps.anchors.append(float(anchor.detach()))
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        steps.approx_kls.append(pl.approx_kl)
        steps.clipfracs.append(pl.clipfrac)
        steps.pg_losses.append(float(pl.pg_loss.detach()))
        steps.v_losses.append(float(v_loss.detach()))
        steps.entropies.append(float(entropy.detach()))
        steps.kept.append(float(keep.float().mean()))
        return pl.approx_kl
