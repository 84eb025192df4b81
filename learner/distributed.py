"""Data-parallel PPO over several processes (``torchrun --nproc_per_node N``) with PyTorch DDP.

``DistributedPolicy`` is itself a Policy wrapping another one (as openpi's wrappers are), so the
Trainer runs unchanged: every rank runs the same update on the same batch, and each
``evaluate``/``evaluate_pair`` call computes only this rank's share of the minibatch rows through
``DistributedDataParallel``. The shares are gathered with autograd-aware ``all_gather``, so every
rank computes the same loss from all rows; the gather's backward hands each rank W times its rows'
gradient, and DDP's average over the W ranks gives exactly the single-process gradient. The
optimiser steps therefore stay identical on every rank (same gradients, same seed), and the network
work of a minibatch is split W ways. DDP rather than FSDP: a π0.5 replica (about 3.3B parameters,
bf16 autocast over float32 weights: ~13 GB, plus Adam's ~27 GB) fits one 80 GB GPU; FSDP is the step
for models that do not.
"""

from __future__ import annotations

import atexit
import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.nn.functional import all_gather
from torch.nn.parallel import DistributedDataParallel

from learner.policies.base import ChunkEvaluation, ObsBatch, PairEvaluation, Policy
from learner.trainer import Batch, Trainer
from pde_contract.messages import Observation

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_world_size() -> int:
    """How many processes torchrun started (1 when not started by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1")) if "RANK" in os.environ else 1


@dataclass(frozen=True)
class DistributedContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def init_distributed() -> DistributedContext:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT):
    NCCL with one GPU per process where CUDA is available, else gloo on the CPU."""
    missing = [k for k in TORCHRUN_ENV if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"not started by torchrun (environment lacks {missing}): run "
            "`torchrun --nproc_per_node N ...`, one process per GPU"
        )
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)
        # Left to interpreter teardown, gloo's worker threads can outlive the group and abort the
        # process ("terminate called without an active exception", exit -6) after a clean run.
        atexit.register(_destroy_process_group)
    return DistributedContext(dist.get_rank(), dist.get_world_size(), local_rank, device)


class _MethodCall(nn.Module):
    """Routes a Policy method through ``forward`` so DDP sees the call (and syncs its gradients)."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, method: str, *args: Any) -> tuple[torch.Tensor, ...]:
        if method == "evaluate":
            ev = self.policy.evaluate(*args)
            return ev.log_prob_elements, ev.entropy, ev.value
        pe = self.policy.evaluate_pair(*args)
        r = pe.rollout
        n2 = torch.tensor([pe.n_second_pass], device=r.value.device)
        return r.log_prob_elements, r.entropy, r.value, pe.canonical_log_prob_elements, pe.prompt_kl, n2


def _share(n: int, rank: int, world: int) -> torch.Tensor:
    """This rank's rows of an n-row minibatch, padded by repeating its last row to ceil(n / world)
    (all_gather needs equal shapes; padded rows are dropped after the gather, so they get no gradient)."""
    per = -(-n // world)
    rows = torch.arange(rank * per, min(n, (rank + 1) * per))
    if rows.numel() == 0:
        rows = torch.tensor([n - 1])
    return torch.cat([rows, rows[-1:].expand(per - rows.numel())])


class DistributedPolicy(Policy):
    """``policy`` under DDP; deep copies (the Trainer's snapshots for the actor and checkpoints) are
    copies of the plain inner policy."""

    def __init__(self, policy: Policy, ctx: DistributedContext) -> None:
        super().__init__()
        self.inner = policy.to(ctx.device)
        self.ctx = ctx
        self.action_space, self.chunk_len, self.action_dim = (
            policy.action_space,
            policy.chunk_len,
            policy.action_dim,
        )
        # find_unused_parameters: some parameters get no gradient from a PPO loss (e.g. π0.5's final
        # VLM norm only feeds the value head's detached features).
        self.ddp = DistributedDataParallel(
            _MethodCall(policy),
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            find_unused_parameters=True,
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> Policy:
        return copy.deepcopy(self.inner, memo)

    def _gathered(self, outputs: tuple[torch.Tensor, ...], n: int) -> list[torch.Tensor]:
        per = -(-n // self.ctx.world_size)
        out = []
        for t in outputs:
            parts = all_gather(t)
            full = torch.cat([p[: self._valid(r, n, per)] for r, p in enumerate(parts)])
            out.append(full)
        return out

    @staticmethod
    def _valid(rank: int, n: int, per: int) -> int:
        return max(0, min(n, (rank + 1) * per) - rank * per)

    def evaluate(self, obs: ObsBatch, prompts: Sequence[str], chain: torch.Tensor) -> ChunkEvaluation:
        idx = _share(len(obs), self.ctx.rank, self.ctx.world_size)
        outs = self.ddp("evaluate", obs.index(idx), [prompts[i] for i in idx.tolist()], chain[idx])
        lp, ent, val = self._gathered(outs, len(obs))
        return ChunkEvaluation(log_prob_elements=lp, entropy=ent, value=val)

    def evaluate_pair(
        self,
        obs: ObsBatch,
        rollout_prompts: Sequence[str],
        canonical_prompts: Sequence[str],
        chain: torch.Tensor,
    ) -> PairEvaluation:
        n = len(obs)
        idx = _share(n, self.ctx.rank, self.ctx.world_size)
        rows = idx.tolist()
        outs = self.ddp(
            "evaluate_pair",
            obs.index(idx),
            [rollout_prompts[i] for i in rows],
            [canonical_prompts[i] for i in rows],
            chain[idx],
        )
        lp, ent, val, canon, kl = self._gathered(outs[:5], n)
        n2 = outs[5].detach().clone()
        dist.all_reduce(n2)
        return PairEvaluation(
            rollout=ChunkEvaluation(log_prob_elements=lp, entropy=ent, value=val),
            canonical_log_prob_elements=canon,
            prompt_kl=kl,
            n_second_pass=int(n2.item()),
        )

    # --- everything else is the inner policy's -----------------------------------------------------

    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        return self.inner.preprocess(observations)

    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        return self.inner.encode_observations(obs)

    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        return self.inner.condition(obs_features, prompts)

    def head_means(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        return self.inner.head_means(cond, chain)

    def head_log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.head_log_prob(chain, means)

    def head_kl(self, means_p: torch.Tensor, means_q: torch.Tensor) -> torch.Tensor:
        return self.inner.head_kl(means_p, means_q)

    def value(self, cond: torch.Tensor) -> torch.Tensor:
        return self.inner.value(cond)

    def sample_chain(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.sample_chain(cond, deterministic)

    def denormalize_actions(self, actions_norm: torch.Tensor) -> torch.Tensor:
        return self.inner.denormalize_actions(actions_norm)

    def checkpoint_state(self) -> dict[str, Any]:
        return self.inner.checkpoint_state()

    def value_parameters(self) -> list[nn.Parameter]:
        return self.inner.value_parameters()

    def noise_parameters(self) -> list[nn.Parameter]:
        return self.inner.noise_parameters()


class BroadcastTrainer(Trainer):
    """Rank 0's trainer: hands each update's batch to the other ranks before running it, so every
    rank runs the same update (``follow_updates``) and DDP can split its minibatches."""

    def update(self, batch: Batch) -> dict[str, float]:
        dist.broadcast_object_list([list(batch)], src=0)
        return super().update(batch)

    def stop_followers(self) -> None:
        dist.broadcast_object_list([None], src=0)


def follow_updates(trainer: Trainer) -> int:
    """Ranks > 0: run every update rank 0's BroadcastTrainer announces, until it stops them.
    Returns the number of updates run."""
    n = 0
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            return n
        trainer.update(box[0])
        n += 1
