"""The Policy boundary: what the actor, PPO, SFT and checkpoints need from any prompt-conditioned
action-chunk policy (the small CPU policy in ``vla.py``, π0.5 in ``pi05.py``), and the network
behind it.

A policy turns a batch of observations + prompts into an action chunk with its log-probability and
value, and re-evaluates stored chunks (their stochastic chain) under any prompt. The expensive part,
the observation encoding, is computed once per sample and shared between the rollout prompt and the
canonical prompt; rows whose rollout prompt is the canonical one get no second pass.

Three pieces:
- ``Policy``: the public interface (preprocess, sample, evaluate_pair, supervised_loss,
  checkpoint_state / from_checkpoint_state), which callers type against; a PPO pass under one
  prompt is ``evaluate_pair(obs, p, p, chain).rollout`` (no second pass where the prompts are equal);
- ``PolicyNetwork``: the network hooks (observation encoding, prompt conditioning, the action head's
  means, log-prob, KL and sampling, value, de-normalisation, the SFT loss), which the functions
  ``sample_chunks`` and ``evaluate_chunk_pair`` run, written once here;
- ``ChunkPolicy``: the template a policy subclasses, a Policy over its own network hooks;
  ``FlowChunkPolicy`` writes the action head's four for a flow-SDE chain over a velocity field.
``learner/distributed.py`` runs those functions over the network inside DDP/FSDP.
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

from learner.policies import flow_sde
from learner.policies.choice import PolicyChoice
from learner.policies.heads import ActionHead, FlowHead
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
    """How the actor's copy of a policy samples (learner.episode.settings.ActorSettings has the defaults)."""

    @property
    def fast_inference(self) -> bool: ...
    @property
    def bf16_weights(self) -> bool: ...
    @property
    def cuda_graphs(self) -> bool: ...
    @property
    def compiled_kernels(self) -> bool: ...


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


@dataclass
class DemoRows:
    """Demonstration rows for the supervised (SFT) loss, with the random draws it uses:
    ``noise`` and ``t`` are these rows of what ``supervised_noise`` drew for the whole batch, so that
    every rank of a torchrun job computes its rows as one process computes them."""

    obs: ObsBatch
    prompts: Sequence[str]
    actions: torch.Tensor  # [B, T, D] in the action space's units
    noise: torch.Tensor  # flow noise [B, T, D'] (D': the network's action columns)
    t: torch.Tensor  # flow times [B]

    def __post_init__(self) -> None:
        check_len(self.obs, self.prompts, "prompts")
        for name in ("actions", "noise", "t"):
            rows = int(getattr(self, name).shape[0])
            if rows != len(self.obs):
                raise ValueError(f"{name} has {rows} rows for {len(self.obs)} observations")


def weights_device(module: nn.Module) -> torch.device:
    """Where ``module``'s weights are (PDE_LEARNER_DEVICE, see learner/device.py); inputs move here."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


class Policy(nn.Module, ABC):
    """The public boundary: what the actor (``sample``), PPO (``evaluate_pair``), SFT
    (``supervised_loss``) and checkpoints (``checkpoint_state``) call. A new policy does not write it:
    it subclasses ``ChunkPolicy`` (or ``FlowChunkPolicy``), which writes these over the network hooks
    of ``PolicyNetwork``."""

    action_space: ActionSpace
    cameras: tuple[str, ...]  # the robot's cameras ``preprocess`` reads
    chunk_len: int
    action_dim: int
    version: int = 0  # checkpoint version the weights came from (set by CheckpointStore.load)

    @abstractmethod
    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        """Decode camera frames and state into tensors (no parameters involved)."""

    @abstractmethod
    def sample(self, obs: ObsBatch, prompts: Sequence[str], deterministic: bool = False) -> ChunkSample:
        """One action chunk per observation under its prompt, with what PPO needs of it."""

    @abstractmethod
    def evaluate_pair(
        self,
        obs: ObsBatch,
        rollout_prompts: Sequence[str],
        canonical_prompts: Sequence[str],
        chain: torch.Tensor,
    ) -> PairEvaluation:
        """Stored chains under their rollout prompt and the canonical prompt, in one pass."""

    @abstractmethod
    def supervised_loss(self, rows: DemoRows) -> torch.Tensor:
        """Behaviour-cloning loss on demonstration chunks, for SFT (learner/sft.py)."""

    def supervised_noise(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The random draws of ``supervised_loss`` for ``n`` rows (flow noise, flow times), from the
        global CPU stream: every rank of a torchrun job draws the same whole batch and takes its rows.
        A ``ChunkPolicy`` inherits its action head's (``ActionHead.supervised_draws``), so SFT is one
        hook for it to write, ``demo_loss``."""
        raise NotImplementedError(f"{type(self).__name__} has no supervised loss")

    def fit_statistics(self, states: np.ndarray, actions: np.ndarray) -> None:
        """SFT's demonstrations, before the first step: every sample's raw state [N, S] and action
        window [N, T, D] in action-space units, for a policy that normalises by them (none here)."""

    @abstractmethod
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to rebuild this policy (config, weights, statistics, caches), with the
        ``kind`` field of its row in ``learner/policies/registry.py``."""

    @classmethod
    def from_checkpoint_state(cls, state: dict[str, Any]) -> Policy:
        """The policy ``checkpoint_state`` stored (every kind in the registry writes it)."""
        raise NotImplementedError(f"{cls.__name__} cannot be loaded from a checkpoint")

    @classmethod
    def from_init_dir(cls, choice: PolicyChoice, stats_from_demos: bool = False) -> Policy:
        """The policy of ``choice.init`` (a kind whose registry row ``starts_from_dir``)."""
        raise NotImplementedError(f"{cls.__name__} starts from `pde learner sft`, not from --init DIR")

    @classmethod
    def init_key(cls, choice: PolicyChoice) -> dict[str, Any]:
        """What SFT's cache key records of the policy ``from_init_dir`` builds."""
        raise NotImplementedError(f"{cls.__name__} starts from `pde learner sft`, not from --init DIR")

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters that only the value loss trains (the trainer gives them their own step size:
        a value head starting from scratch after SFT needs a larger one than the action head)."""
        head = getattr(self, "value_head", None)
        return list(head.parameters()) if isinstance(head, nn.Module) else []

    def noise_parameters(self) -> list[nn.Parameter]:
        """Parameters of the exploration noise (a Gaussian head's log std; none for a flow-SDE
        chain, whose noise level is fixed): PPO moves them with their own step size."""
        return []

    @property
    def device(self) -> torch.device:
        return weights_device(self)

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

    def for_acting(self, choice: ActingChoice) -> Policy:
        """This policy made the actor's copy (it is one already: a loaded checkpoint or a trainer's
        snapshot), where it is. Only π0.5 has a faster way to sample; others sample as they are."""
        if choice.fast_inference or choice.bf16_weights or choice.cuda_graphs or choice.compiled_kernels:
            log.info(
                "%s has no real-time path: fast_inference, bf16_weights, cuda_graphs and "
                "compiled_kernels apply to π0.5 only; it samples eagerly as trained",
                type(self).__name__,
            )
        return self

    def take_weights_of(self, new: Policy) -> bool:
        """A swap in place: this acting copy takes ``new``'s weights (the trainer's snapshot) and
        keeps what it built around its own (π0.5's fused weights and captured CUDA graphs). False
        when it cannot; the caller then makes ``new`` the acting copy (``for_acting``)."""
        return False


class PolicyNetwork(nn.Module, ABC):
    """The network behind a policy: the hooks that ``sample_chunks``,
    ``evaluate_chunk_pair`` (written once, below) and SFT run. A distributed engine wraps this, not
    the policy (learner/distributed.py), since the network is all that trains."""

    @abstractmethod
    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        """Observation features [B, F]; the part shared between prompts."""

    @abstractmethod
    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        """Fuse observation features with prompts: conditioning [B, C] for the heads."""

    @property
    @abstractmethod
    def action_head(self) -> ActionHead:
        """The action head over this network's conditioning (learner/policies/heads.py: ``FlowHead``
        over a velocity field, ``GaussianHead`` over a chunk mean), built from the network's own
        weights each time it is asked for."""

    @abstractmethod
    def value(self, cond: torch.Tensor) -> torch.Tensor:
        """State value [B] under the conditioning's prompt."""

    @abstractmethod
    def denormalize_actions(self, actions_norm: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Normalised chunk [B, T, D] -> action-space units. ``state``: the raw state [B, S] of the
        observations the chunk was sampled for (a policy acting in offsets from it adds it back)."""

    def demo_loss(self, rows: DemoRows) -> torch.Tensor:
        """The supervised loss of ``rows`` (``Policy.supervised_loss``); a network without one
        cannot be fine-tuned on demonstrations."""
        raise NotImplementedError(f"{type(self).__name__} has no supervised loss")

    def fsdp_units(self) -> list[nn.Module]:
        """Submodules FSDP shards as units of their own (a large network's transformer blocks: their
        weights are gathered only while each runs); everything else is one unit. None: the network
        is one unit (small enough to gather whole)."""
        return []

    @property
    def device(self) -> torch.device:
        return weights_device(self)


# --- written once over the network hooks ------------------------------------------------------------


@torch.no_grad()
def sample_chunks(
    net: PolicyNetwork, obs: ObsBatch, prompts: Sequence[str], deterministic: bool = False
) -> ChunkSample:
    check_len(obs, prompts, "prompts")
    obs = obs.to(net.device)
    cond = net.condition(net.encode_observations(obs), prompts)
    chain, log_prob = net.action_head.sample_chain(cond, deterministic)
    actions = net.denormalize_actions(chain[:, -1], obs.state)
    return chunk_sample(actions, chain, log_prob, net.value(cond))


def evaluate_chunk_pair(
    net: PolicyNetwork,
    obs: ObsBatch,
    rollout_prompts: Sequence[str],
    canonical_prompts: Sequence[str],
    chain: torch.Tensor,
) -> PairEvaluation:
    """Both prompts in one batched pass: the observation encoding is computed once; rows whose
    rollout prompt is the canonical prompt are not evaluated twice."""
    check_len(obs, rollout_prompts, "rollout_prompts")
    check_len(obs, canonical_prompts, "canonical_prompts")
    obs, chain = obs.to(net.device), chain.to(net.device)
    feats = net.encode_observations(obs)
    differs = [r != c for r, c in zip(rollout_prompts, canonical_prompts, strict=True)]
    second = torch.tensor([i for i, d in enumerate(differs) if d], dtype=torch.long, device=chain.device)
    n2 = int(second.numel())
    prompts = list(rollout_prompts) + [canonical_prompts[i] for i in second.tolist()]
    cond = net.condition(torch.cat([feats, feats[second]]), prompts)
    chains = torch.cat([chain, chain[second]])
    head = net.action_head
    means = head.means(cond, chains)
    log_prob, entropy = head.log_prob(chains, means)
    b = len(obs)
    rollout = ChunkEvaluation(log_prob_elements=log_prob[:b], entropy=entropy[:b], value=net.value(cond[:b]))
    canonical = log_prob[:b].clone()
    prompt_kl = torch.zeros(b, dtype=log_prob.dtype, device=log_prob.device)
    if n2:
        canonical = canonical.index_copy(0, second, log_prob[b:])
        kl = head.kl(means[:b][second], means[b:])
        prompt_kl = prompt_kl.index_copy(0, second, kl)
    return PairEvaluation(
        rollout=rollout, canonical_log_prob_elements=canonical, prompt_kl=prompt_kl, n_second_pass=n2
    )


class ChunkPolicy(Policy, PolicyNetwork):
    """The template every policy subclasses: a Policy that is its own network. A new policy writes
    ``preprocess``, ``checkpoint_state`` and the network hooks (``PolicyNetwork``; a flow-matching
    head from ``FlowChunkPolicy``), and for SFT ``demo_loss`` (the draws come from its head);
    ``sample``, ``evaluate_pair`` and ``supervised_loss`` are written once, here and
    above."""

    sample = sample_chunks
    evaluate_pair = evaluate_chunk_pair

    def supervised_loss(self, rows: DemoRows) -> torch.Tensor:
        return self.demo_loss(rows)

    def supervised_noise(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.action_head.supervised_draws(n)

    def noise_parameters(self) -> list[nn.Parameter]:
        return self.action_head.noise_parameters()


class FlowChunkPolicy(ChunkPolicy):
    """A ChunkPolicy whose action head is a flow-SDE chain (learner/policies/flow_sde.py) over its
    network's velocity field (a ``FlowHead``): it writes ``velocity_fn`` and sets ``schedule``. The
    network may predict more action columns (``model_action_dim``) than the robot executes
    (``action_dim``; π0.5 pads 7 to 32): only the executed ones count in log-probabilities and KL,
    since the padded ones never reach the robot."""

    schedule: flow_sde.FlowSDESchedule  # the stochastic chain the actor samples and PPO evaluates

    @abstractmethod
    def velocity_fn(self, cond: torch.Tensor) -> flow_sde.VelocityFn:
        """The network's velocity v(x [B, K', T, D'], t [K']) under the conditioning ``cond``."""

    @property
    def acting_schedule(self) -> flow_sde.FlowSDESchedule:
        """The steps of deterministic sampling (evaluation episodes): the chain's, unless overridden."""
        return self.schedule

    @property
    def model_action_dim(self) -> int:
        """Action columns D' the network predicts (``action_dim`` unless it pads)."""
        return self.action_dim

    @property
    def action_head(self) -> ActionHead:
        return FlowHead(
            self.velocity_fn,
            self.schedule,
            self.acting_schedule,
            self.chunk_len,
            self.action_dim,
            self.model_action_dim,
        )


def check_len(obs: ObsBatch, prompts: Sequence[str], name: str) -> None:
    if len(prompts) != len(obs):
        raise ValueError(f"{name} has {len(prompts)} entries for {len(obs)} observations")


def exploration_log_std(policy: Policy) -> float | None:
    """The exploration log std the policy acts at (a Gaussian head's, mean over dims; None for a
    flow chain, whose noise is fixed): the sigma a premise must be measured at and a benchmark run
    at (issue 32: runs at -1.0 against a premise measured at -1.5)."""
    noise = policy.noise_parameters()
    return float(noise[0].detach().float().mean()) if noise else None
