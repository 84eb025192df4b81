"""Data-parallel PPO and SFT over several processes (``torchrun --nproc_per_node N``) with PyTorch
DDP or FSDP (``fully_shard``, FSDP2).

``DistributedPolicy`` is itself a Policy (as openpi's wrappers are), so the Trainer runs unchanged:
every rank runs the same update on the same batch. The engine (DDP or FSDP) wraps the policy's
network, not the policy: each ``evaluate``/``evaluate_pair`` call runs the written-once functions of
learner/policies/base.py (``evaluate_chunk_pair``) over this rank's share of the
minibatch rows inside the engine's forward. The shares are gathered with autograd-aware
``all_gather``, so every rank computes the same loss from all rows; the gather's backward hands
each rank W times its rows' gradient, and the engine's average over the W ranks gives exactly the
single-process gradient. The optimiser steps therefore stay identical on every rank (same
gradients, same seed), and the network work of a minibatch is split W ways.

DDP (the default) keeps a whole replica and Adam state on every rank: for π0.5 (3.35B parameters,
all trained) float32 weights, gradients and Adam moments come to an estimated 50 GiB before
activations and, on rank 0, the actor's copies (docs/pi05.md, "Several GPUs").
FSDP (``engine="fsdp"``) shards every parameter, gradient and Adam state over the ranks (1/W each),
gathering a block's weights only while it runs: each of the network's ``fsdp_units()`` (π0.5's
transformer blocks) is one unit, the rest of the network another. The same split of rows and the
same gradient average (FSDP's reduce-scatter averages as DDP's all-reduce does) give the same update.
Under FSDP no rank holds the whole weights, so after every update all ranks gather them (and the
Adam state) to rank 0: its plain CPU replica is what ``copy.deepcopy`` (the actor's snapshots) and
checkpoints see, written in the single-process format.

SFT (learner/sft.py) runs through the same wrapper: ``supervised_loss`` computes the network's
``demo_loss`` of this rank's rows of the batch (the caller splits it and weights the loss by its
share), and ``gather_weights`` hands rank 0 the whole trained weights at the end.
"""

from __future__ import annotations

import atexit
import copy
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.nn.functional import all_gather
from torch.nn.parallel import DistributedDataParallel

from learner.policies.base import (
    ChunkEvaluation,
    ChunkPolicy,
    ChunkSample,
    DemoRows,
    ObsBatch,
    PairEvaluation,
    Policy,
    PolicyNetwork,
    evaluate_chunk_pair,
)
from learner.ppo import PPOConfig
from learner.trainer import Batch, Trainer
from pde_contract.messages import Observation

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
Engine = Literal["ddp", "fsdp"]
ENGINES: tuple[Engine, ...] = ("ddp", "fsdp")


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


def end_distributed(code: int = 0) -> NoReturn:
    """Every rank at the normal end of a torchrun job, from its main thread: wait until all ranks are
    done with collectives, destroy the process group and leave with ``os._exit(code)`` (logs and
    streams flushed first), skipping the interpreter's teardown.

    Why not return: the gloo group's C++ object is freed only when the last module holding it (DDP's
    reducer, FSDP's mesh) is, which happens as a function's locals go, at no agreed time. Freed
    after a peer rank had exited, it hung the rank in its destructor or aborted it ("terminate called
    without an active exception", exit -6): a few torchrun jobs in a hundred under load."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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


class _NetworkCall(nn.Module):
    """Routes the network's work through ``forward`` so DDP sees the call (and syncs its gradients)
    and FSDP gathers the root unit's weights for it (each block unit gathers its own in its forward)."""

    def __init__(self, network: PolicyNetwork) -> None:
        super().__init__()
        self.network = network

    def forward(self, method: str, *args: Any) -> tuple[torch.Tensor, ...]:
        if method == "demo_loss":
            return (self.network.demo_loss(*args),)
        pe = evaluate_chunk_pair(self.network, *args)
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
    """``policy`` with its network under DDP or FSDP (``engine``); deep copies (the Trainer's
    snapshots for the actor and checkpoints) are copies of the plain policy: the inner one under DDP,
    rank 0's gathered replica under FSDP (only rank 0 may take them)."""

    def __init__(self, policy: Policy, ctx: DistributedContext, engine: Engine = "ddp") -> None:
        super().__init__()
        if engine not in ENGINES:
            raise ValueError(f"unknown distributed engine {engine!r}; use one of {ENGINES}")
        if not isinstance(policy, ChunkPolicy):
            raise TypeError(
                f"DistributedPolicy wraps a policy's network: {type(policy).__name__} is not a "
                "ChunkPolicy (learner/policies/base.py) and has none of its own to wrap"
            )
        self.engine = engine
        self.ctx = ctx
        self.action_space, self.chunk_len, self.action_dim = (
            policy.action_space,
            policy.chunk_len,
            policy.action_dim,
        )
        self.cameras = policy.cameras
        # Rank 0's plain replica (FSDP), in a list so that it is not a submodule: its parameters are
        # not trained, only overwritten with the gathered weights after each update.
        self._replica: list[ChunkPolicy] = []
        self._full_optimizer_state: dict[str, Any] | None = None
        call = _NetworkCall(policy)
        if engine == "ddp":
            self.inner = policy.to(ctx.device)
            # find_unused_parameters: some parameters get no gradient from a PPO loss (e.g. π0.5's
            # final VLM norm only feeds the value head's detached features), the value heads and the
            # Gaussian std none from SFT.
            self.wrapped: nn.Module = DistributedDataParallel(
                call.to(ctx.device),
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                find_unused_parameters=True,
            )
        else:
            if ctx.rank == 0:
                self._replica.append(copy.deepcopy(policy).cpu())
            self.inner = policy.to(ctx.device)
            mesh = _device_mesh(ctx)
            for unit in policy.fsdp_units():
                fully_shard(unit, mesh=mesh)
            self.wrapped = cast(nn.Module, fully_shard(call, mesh=mesh))

    def __deepcopy__(self, memo: dict[int, Any]) -> ChunkPolicy:
        plain = copy.deepcopy(self.plain_policy(), memo)
        return plain if self.engine == "ddp" else plain.to(self.ctx.device)

    def plain_policy(self) -> ChunkPolicy:
        """The policy with whole weights, outside the engine: the inner one under DDP, rank 0's
        replica under FSDP (on its CPU, as of the last gather)."""
        if self.engine == "ddp":
            return self.inner
        if not self._replica:
            raise RuntimeError(
                f"rank {self.ctx.rank} holds no replica under FSDP: only rank 0 has the whole weights"
            )
        return self._replica[0]

    # --- FSDP: whole weights and optimiser state in the single-process format -----------------------

    def gather_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Every rank, after each update (collective; nothing to do under DDP): rank 0's replica gets
        the whole weights and keeps the whole Adam state for checkpoints."""
        if self.engine == "ddp":
            return
        self.gather_weights()
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        optim = get_optimizer_state_dict(self.wrapped, optimizer, options=opts)
        if self.ctx.rank == 0:
            self._full_optimizer_state = self._by_index(optimizer, optim)

    def gather_weights(self) -> None:
        """Every rank (collective under FSDP; nothing to do under DDP): rank 0's replica gets the
        whole weights."""
        if self.engine == "ddp":
            return
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(self.wrapped, options=opts)
        if self.ctx.rank == 0:
            self._replica[0].load_state_dict({_inner_name(k): v for k, v in weights.items()})

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimiser's state as a single process's ``optimizer.state_dict()`` (rank 0 under FSDP:
        as of the last ``gather_state`` or ``load_optimizer_state``)."""
        if self.engine == "ddp" or self._full_optimizer_state is None:
            return optimizer.state_dict()  # under FSDP before any step: no state, only the groups
        return self._full_optimizer_state

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Every rank (collective under FSDP): a single-process optimiser state (a checkpoint's) into
        this rank's shards."""
        if self.engine == "ddp":
            optimizer.load_state_dict(state)
            return
        names = self._param_names(optimizer)
        by_name: dict[str, Any] = {
            "state": {names[int(i)]: v for i, v in state["state"].items()},
            "param_groups": [
                {**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]
            ],
        }
        set_optimizer_state_dict(
            self.wrapped, optimizer, by_name, options=StateDictOptions(full_state_dict=True)
        )
        # The hyperparameters exactly as saved (the state-dict helpers turn Adam's betas into a list).
        for group, saved in zip(optimizer.param_groups, state["param_groups"], strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        if self.ctx.rank == 0:
            self._full_optimizer_state = copy.deepcopy(state)

    def _param_names(self, optimizer: torch.optim.Optimizer) -> list[str]:
        """Names (as the wrapped module calls them) of the optimiser's parameters in its own order:
        a single process's ``state_dict`` numbers them so."""
        name_of = {id(p): n for n, p in self.wrapped.named_parameters()}
        return [name_of[id(p)] for g in optimizer.param_groups for p in g["params"]]

    def _by_index(self, optimizer: torch.optim.Optimizer, by_name: dict[str, Any]) -> dict[str, Any]:
        """The gathered state keyed by position, with the groups (hyperparameters, positions) as
        this rank's optimiser writes them (they are the same on every rank and in one process)."""
        index = {n: i for i, n in enumerate(self._param_names(optimizer))}
        groups = optimizer.state_dict()["param_groups"]
        return {"state": {index[n]: v for n, v in by_name["state"].items()}, "param_groups": groups}

    # --- the work of a minibatch, split over the ranks -----------------------------------------------

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
        outs = self.wrapped(
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

    def supervised_loss(self, rows: DemoRows) -> torch.Tensor:
        """This rank's rows through the engine: the caller (learner/sft.py) splits the batch and
        weights the loss by its share, so that the engine's gradient average is the whole batch's."""
        loss: torch.Tensor = self.wrapped("demo_loss", rows)[0]
        return loss

    # --- what runs outside the engine is the inner policy's ------------------------------------------

    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        return self.inner.preprocess(observations)

    def sample(self, obs: ObsBatch, prompts: Sequence[str], deterministic: bool = False) -> ChunkSample:
        return self.inner.sample(obs, prompts, deterministic)

    def supervised_noise(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.supervised_noise(n)

    def checkpoint_state(self) -> dict[str, Any]:
        return self.inner.checkpoint_state()

    def value_parameters(self) -> list[nn.Parameter]:
        return self.inner.value_parameters()

    def noise_parameters(self) -> list[nn.Parameter]:
        return self.inner.noise_parameters()


def _device_mesh(ctx: DistributedContext) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(ctx.device.type, (ctx.world_size,))


def _inner_name(name: str) -> str:
    """A parameter's name in the wrapped ``_NetworkCall`` -> its name in the policy (its network)."""
    return name.removeprefix("network.")


class DistributedTrainer(Trainer):
    """A rank's trainer over a ``DistributedPolicy``: after each update the ranks gather what rank 0
    needs for snapshots and checkpoints (FSDP), and its optimiser state reads and loads in the
    single-process format, so a checkpoint written under FSDP resumes in one process and back."""

    policy: DistributedPolicy

    def __init__(self, policy: DistributedPolicy, config: PPOConfig | None = None) -> None:
        super().__init__(policy, config)

    def update(self, batch: Batch) -> dict[str, float]:
        stats = super().update(batch)
        self.policy.gather_state(self.optimizer)
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.policy.optimizer_state(self.optimizer), "n_updates": self.n_updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_optimizer_state(self.optimizer, state["optimizer"])
        self.n_updates = int(state["n_updates"])


class BroadcastTrainer(DistributedTrainer):
    """Rank 0's trainer: hands each update's batch to the other ranks before running it, so every
    rank runs the same update (``follow_updates``) and DDP/FSDP can split its minibatches."""

    def update(self, batch: Batch) -> dict[str, float]:
        dist.broadcast_object_list([list(batch)], src=0)
        return super().update(batch)

    def stop_followers(self) -> None:
        dist.broadcast_object_list([None], src=0)


def follow_updates(trainer: DistributedTrainer) -> int:
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
