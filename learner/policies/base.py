"""The Policy boundary: what the actor and PPO need from any prompt-conditioned action-chunk policy
(the small CPU policy in ``vla.py``, π0.5 in ``pi05.py``).

A policy turns a batch of observations + prompts into an action chunk with its log-probability and
value, and re-evaluates stored chunks (their stochastic chain) under any prompt. The expensive part,
the observation encoding, is computed once per sample and shared between the rollout prompt and the
canonical prompt; rows whose rollout prompt is the canonical one get no second pass.

Subclasses implement five hooks (observation encoding, prompt conditioning, head log-prob/means,
value, sampling); ``evaluate`` and ``evaluate_pair`` are written once here.
"""

from __future__ import annotations

import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from pde_contract.messages import ActionSpace, Observation, ServerInfo

log = logging.getLogger(__name__)


@dataclass
class ObsBatch:
    """Preprocessed observations: tensors ready for the network."""

    images: torch.Tensor  # uint8 [B, n_cameras, 3, H, W]
    state: torch.Tensor  # float32 [B, state_dim], raw units (the policy normalises)

    def __len__(self) -> int:
        return int(self.state.shape[0])

    def to(self, device: torch.device) -> ObsBatch:
        """On ``device`` (itself when already there)."""
        if self.images.device == device and self.state.device == device:
            return self
        return ObsBatch(images=self.images.to(device), state=self.state.to(device))

    def index(self, idx: torch.Tensor | slice | np.ndarray) -> ObsBatch:
        if isinstance(idx, np.ndarray):
            idx = torch.as_tensor(idx)
        return ObsBatch(images=self.images[idx], state=self.state[idx])

    @staticmethod
    def cat(batches: Sequence[ObsBatch]) -> ObsBatch:
        return ObsBatch(
            images=torch.cat([b.images for b in batches]), state=torch.cat([b.state for b in batches])
        )


@dataclass
class ChunkSample:
    """What the actor sends and records for each sample of a batch (numpy, detached)."""

    actions: np.ndarray  # [B, T, D] in the action space's units (denormalised)
    log_prob: np.ndarray  # [B] log-probability of the chain under the prompt it was sampled with
    log_prob_elements: np.ndarray  # [B, T, D] the same per executed element (sums to log_prob)
    value: np.ndarray  # [B]
    chain: np.ndarray  # [B, K+1, T, D] normalised; chain[:, -1] is the executed chunk


@dataclass
class ChunkEvaluation:
    log_prob_elements: torch.Tensor  # [B, T, D] per executed element (summed over denoising steps)
    entropy: torch.Tensor  # [B]
    value: torch.Tensor  # [B]

    @property
    def log_prob(self) -> torch.Tensor:
        """Chunk-level log-probability [B]."""
        return self.log_prob_elements.flatten(1).sum(1)


def chunk_sample(
    actions: torch.Tensor, chain: torch.Tensor, log_prob: torch.Tensor, value: torch.Tensor
) -> ChunkSample:
    """A sampled batch on the host: actions [B, T, D] in action-space units, chain [B, K+1, T, D],
    log_prob [B, T, D] per executed element, value [B]."""
    return ChunkSample(
        actions=actions.cpu().numpy().astype(np.float64),
        log_prob=log_prob.flatten(1).sum(1).cpu().numpy().astype(np.float64),
        log_prob_elements=log_prob.cpu().numpy().astype(np.float32),
        value=value.cpu().numpy().astype(np.float64),
        chain=chain.cpu().numpy().astype(np.float32),
    )


class ActingChoice(Protocol):
    """How the actor's copy of a policy samples (learner.actor.ActorSettings has the defaults)."""

    @property
    def fast_inference(self) -> bool: ...
    @property
    def bf16_weights(self) -> bool: ...
    @property
    def cuda_graphs(self) -> bool: ...


@dataclass
class PairEvaluation:
    """Evaluation of stored chunks under their rollout prompt and the canonical prompt."""

    rollout: ChunkEvaluation
    canonical_log_prob_elements: torch.Tensor  # [B, T, D]; the rollout's where the prompts are equal
    prompt_kl: torch.Tensor  # [B] KL(pi(.|o,p) || pi(.|o,p_g)); 0 where the prompts are equal
    n_second_pass: int  # rows that needed the canonical pass

    @property
    def canonical_log_prob(self) -> torch.Tensor:
        return self.canonical_log_prob_elements.flatten(1).sum(1)


class Policy(nn.Module, ABC):
    """Prompt-conditioned action-chunk policy with a value head."""

    action_space: ActionSpace
    cameras: tuple[str, ...]  # the robot's cameras ``preprocess`` reads
    chunk_len: int
    action_dim: int
    version: int = 0  # checkpoint version the weights came from (set by CheckpointStore.load)

    def robot_mismatch(self, info: ServerInfo) -> str | None:
        """What this policy needs that the robot server (``info``, from ``connect()``) lacks, with
        both sides said; None when its cameras and action space are all there. Checked at start-up:
        otherwise every episode would be aborted by the first observation or chunk."""
        lacking = [c for c in self.cameras if c not in info.cameras]
        if not lacking and self.action_space in info.action_spaces:
            return None
        return (
            f"the policy reads cameras {list(self.cameras)} and acts in {self.action_space.value}; the "
            f"robot server {info.server_name!r} ({info.backend}) has cameras {list(info.cameras)} and "
            f"action spaces {[s.value for s in info.action_spaces]}"
        )

    # --- hooks -----------------------------------------------------------------------------------

    @abstractmethod
    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        """Decode camera frames and state into tensors (no parameters involved)."""

    @abstractmethod
    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        """Observation features [B, F]; the part shared between prompts."""

    @abstractmethod
    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        """Fuse observation features with prompts: conditioning [B, C] for the heads."""

    @abstractmethod
    def head_means(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        """Distribution parameters of every stochastic step of stored chains [B, K+1, T, D]
        (transition means for flow-SDE, the chunk mean for a Gaussian head): [B, K, T, D]."""

    @abstractmethod
    def head_log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_prob [B, T, D] of each executed element, entropy [B]) of chains given ``head_means``.
        Only the executed action columns count: padded model columns never reach the robot."""

    @abstractmethod
    def head_kl(self, means_p: torch.Tensor, means_q: torch.Tensor) -> torch.Tensor:
        """KL between the two conditioned distributions along the stored chains, [B]."""

    @abstractmethod
    def value(self, cond: torch.Tensor) -> torch.Tensor:
        """State value [B] under the conditioning's prompt."""

    @abstractmethod
    def sample_chain(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(chain [B, K+1, T, D] normalised, log_prob [B, T, D] per executed element; NaN when
        deterministic, whose K may differ: such chains are for acting, not for PPO)."""

    @abstractmethod
    def denormalize_actions(self, actions_norm: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Normalised chunk [B, T, D] -> action-space units. ``state``: the raw state [B, S] of the
        observations the chunk was sampled for (a policy acting in offsets from it adds it back)."""

    @abstractmethod
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to rebuild this policy (config, weights, statistics, caches)."""

    def supervised_loss(
        self,
        obs: ObsBatch,
        prompts: Sequence[str],
        actions: torch.Tensor,
        noise: torch.Tensor | None = None,
        t: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Behaviour-cloning loss on demonstration chunks (``actions`` [B, T, D] in action-space
        units), for SFT (learner/sft.py). ``noise`` and ``t``: these rows of what
        ``supervised_noise`` drew for the whole batch (both, or neither: then drawn here)."""
        raise NotImplementedError(f"{type(self).__name__} has no supervised loss")

    def supervised_noise(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The random draws of ``supervised_loss`` for ``n`` rows (flow noise, flow times), from the
        global CPU stream: every rank of a torchrun job draws the same whole batch and takes its rows."""
        raise NotImplementedError(f"{type(self).__name__} has no supervised loss")

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters that only the value loss trains (the trainer gives them their own step size:
        a value head starting from scratch after SFT needs a larger one than the action head)."""
        head = getattr(self, "value_head", None)
        return list(head.parameters()) if isinstance(head, nn.Module) else []

    def fsdp_units(self) -> list[nn.Module]:
        """Submodules FSDP shards as units of their own (a large network's transformer blocks: their
        weights are gathered only while each runs); everything else is one unit. None: the policy
        is one unit (small enough to gather whole)."""
        return []

    def noise_parameters(self) -> list[nn.Parameter]:
        """Parameters of the exploration noise (a Gaussian head's log std; none for a flow-SDE
        chain, whose noise level is fixed): PPO moves them with their own step size."""
        return []

    # --- written once ----------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """Where the weights are (PDE_LEARNER_DEVICE, see learner/device.py); inputs move here."""
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            return tensor.device
        return torch.device("cpu")

    def for_acting(self, choice: ActingChoice) -> Policy:
        """This policy made the actor's copy (it is one already: a loaded checkpoint or a trainer's
        snapshot), where it is. Only π0.5 has a faster way to sample; others sample as they are."""
        if choice.fast_inference or choice.bf16_weights or choice.cuda_graphs:
            log.info(
                "%s has no real-time path: fast_inference, bf16_weights and cuda_graphs apply to "
                "π0.5 only; it samples eagerly as trained",
                type(self).__name__,
            )
        return self

    @torch.no_grad()
    def sample(self, obs: ObsBatch, prompts: Sequence[str], deterministic: bool = False) -> ChunkSample:
        check_len(obs, prompts, "prompts")
        obs = obs.to(self.device)
        cond = self.condition(self.encode_observations(obs), prompts)
        chain, log_prob = self.sample_chain(cond, deterministic)
        actions = self.denormalize_actions(chain[:, -1], obs.state)
        return chunk_sample(actions, chain, log_prob, self.value(cond))

    def evaluate(self, obs: ObsBatch, prompts: Sequence[str], chain: torch.Tensor) -> ChunkEvaluation:
        check_len(obs, prompts, "prompts")
        obs, chain = obs.to(self.device), chain.to(self.device)
        cond = self.condition(self.encode_observations(obs), prompts)
        log_prob, entropy = self.head_log_prob(chain, self.head_means(cond, chain))
        return ChunkEvaluation(log_prob_elements=log_prob, entropy=entropy, value=self.value(cond))

    def evaluate_pair(
        self,
        obs: ObsBatch,
        rollout_prompts: Sequence[str],
        canonical_prompts: Sequence[str],
        chain: torch.Tensor,
    ) -> PairEvaluation:
        """Both prompts in one batched pass: the observation encoding is computed once; rows whose
        rollout prompt is the canonical prompt are not evaluated twice."""
        check_len(obs, rollout_prompts, "rollout_prompts")
        check_len(obs, canonical_prompts, "canonical_prompts")
        obs, chain = obs.to(self.device), chain.to(self.device)
        feats = self.encode_observations(obs)
        differs = [r != c for r, c in zip(rollout_prompts, canonical_prompts, strict=True)]
        second = torch.tensor([i for i, d in enumerate(differs) if d], dtype=torch.long, device=chain.device)
        n2 = int(second.numel())
        prompts = list(rollout_prompts) + [canonical_prompts[i] for i in second.tolist()]
        cond = self.condition(torch.cat([feats, feats[second]]), prompts)
        chains = torch.cat([chain, chain[second]])
        means = self.head_means(cond, chains)
        log_prob, entropy = self.head_log_prob(chains, means)
        b = len(obs)
        rollout = ChunkEvaluation(
            log_prob_elements=log_prob[:b], entropy=entropy[:b], value=self.value(cond[:b])
        )
        canonical = log_prob[:b].clone()
        prompt_kl = torch.zeros(b, dtype=log_prob.dtype, device=log_prob.device)
        if n2:
            canonical = canonical.index_copy(0, second, log_prob[b:])
            kl = self.head_kl(means[:b][second], means[b:])
            prompt_kl = prompt_kl.index_copy(0, second, kl)
        return PairEvaluation(
            rollout=rollout, canonical_log_prob_elements=canonical, prompt_kl=prompt_kl, n_second_pass=n2
        )


def check_len(obs: ObsBatch, prompts: Sequence[str], name: str) -> None:
    if len(prompts) != len(obs):
        raise ValueError(f"{name} has {len(prompts)} entries for {len(obs)} observations")
