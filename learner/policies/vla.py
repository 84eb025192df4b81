r"""A small VLA-like policy that trains on a CPU: CNN over both cameras, frozen MiniLM prompt
embedding, robot state, and an action-chunk head — flow matching with a flow-SDE chain (as π0.5
under PPO) or a diagonal Gaussian — plus a value head.

    images --CNN--> \
                     obs features [B, F]  (shared between prompts)  --+
    state --MLP---> /                                                 |--> cond [B, C] --> value
    prompt --MiniLM (frozen, cached)--> proj ------------------------+          \--> action head
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from learner.policies import flow_sde
from learner.policies.base import DemoRows, FlowChunkPolicy, ObsBatch
from learner.policies.heads import ActionHead, GaussianHead
from learner.policies.observations import STATE_DIM, preprocess
from learner.policies.text import FakeTextEncoder, MiniLMTextEncoder, PromptEmbeddingCache
from pde_contract.messages import ACTION_DIMS, ActionSpace, Observation

HeadKind = Literal["flow", "gaussian"]


@dataclass
class VLAConfig:
    image_size_px: int = 64
    """Camera frames are downscaled to a square of this many pixels."""
    cameras: tuple[str, ...] = ("external", "wrist")
    """Camera names, in the order the encoder sees them."""
    chunk_len: int = 10
    """Rows T per action chunk (at the server's control rate)."""
    action_space: str = ActionSpace.EE_DELTA.value
    """Action space of the chunk rows (pde_contract.messages.ActionSpace)."""
    head: HeadKind = "flow"
    """'flow': flow matching with a flow-SDE chain (π0.5-like); 'gaussian': diagonal Gaussian chunk."""
    flow_steps: int = 5
    """Denoising steps K of the flow chain."""
    flow_noise_level: float = 0.5
    """a in sigma_i = a * sqrt(t_i / (1 - t_i)) (flow-SDE exploration noise)."""
    gaussian_init_log_std: float = -1.5
    """Initial log std (normalised action units) of the Gaussian head."""
    gaussian_log_std_range: tuple[float, float] = (-3.0, -0.5)
    """The Gaussian head's log std is clamped to this range when PPO learns it (bounded
    exploration: above e^-0.5 = 0.61 demo stds the sampled policy stops resembling the SFT policy)."""
    hidden_dim: int = 256
    """Width of the trunk and heads."""
    value_detached: bool = True
    """The value head reads detached features, so the value loss never moves the action trunk
    (with chunk log-probs summed over many dimensions, trunk moves from the value loss alone
    pushed PPO ratios far outside the clip range)."""
    text_encoder: str = MiniLMTextEncoder.name
    """Frozen prompt encoder ('all-MiniLM-L6-v2'; 'fake-hashing' in unit tests)."""
    text_dim: int = 384
    """Prompt embedding width."""
    action_clip_std: float = 4.0
    """Executed actions are clamped to this many demo standard deviations around the demo mean."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes stored with the checkpoint (e.g. SFT data and wording)."""

    @property
    def action_dim(self) -> int:
        return ACTION_DIMS[ActionSpace(self.action_space)]


def _time_features(t: torch.Tensor, n: int = 16) -> torch.Tensor:
    freqs = torch.exp(torch.linspace(0.0, math.log(1000.0), n // 2, device=t.device))
    ang = t.unsqueeze(-1) * freqs * math.pi
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


class ImageEncoder(nn.Module):
    """Shared conv stack per camera; spatial features flattened (positions matter for reaching)."""

    def __init__(self, n_cameras: int, size_px: int, out_dim: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 32, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 32, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        side = math.ceil(size_px / 16)
        self.proj = nn.Linear(n_cameras * 32 * side * side, out_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b = images.shape[0]
        x = images.flatten(0, 1).float() / 255.0 - 0.5
        return torch.relu(self.proj(self.conv(x).reshape(b, -1)))


class SmallVLAPolicy(FlowChunkPolicy):
    action_mean: torch.Tensor
    action_std: torch.Tensor
    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(self, config: VLAConfig, prompt_cache: PromptEmbeddingCache | None = None) -> None:
        super().__init__()
        self.config = config
        self.action_space = ActionSpace(config.action_space)
        self.cameras = tuple(config.cameras)
        self.chunk_len = config.chunk_len
        self.action_dim = config.action_dim
        h = config.hidden_dim
        td = self.chunk_len * self.action_dim
        self.prompt_cache = prompt_cache or PromptEmbeddingCache(config.text_encoder)
        self.image_encoder = ImageEncoder(len(config.cameras), config.image_size_px, h)
        self.state_encoder = nn.Sequential(nn.Linear(STATE_DIM, 64), nn.ReLU())
        self.obs_fuse = nn.Sequential(nn.Linear(h + 64, h), nn.ReLU())
        self.prompt_proj = nn.Sequential(nn.Linear(config.text_dim, h), nn.ReLU())
        self.cond_mlp = nn.Sequential(nn.Linear(2 * h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.value_head = nn.Sequential(nn.Linear(h, h), nn.Tanh(), nn.Linear(h, 1))
        if config.head == "flow":
            self.schedule = flow_sde.make_schedule(config.flow_steps, config.flow_noise_level)
            self.velocity = nn.Sequential(
                nn.Linear(td + 16 + h, h), nn.SiLU(), nn.Linear(h, h), nn.SiLU(), nn.Linear(h, td)
            )
        elif config.head == "gaussian":
            self.mean_head = nn.Linear(h, td)
            self.log_std = nn.Parameter(torch.full((td,), config.gaussian_init_log_std))
        else:
            raise ValueError(f"unknown head {config.head!r}: use 'flow' or 'gaussian'")
        # Normalisation statistics (set from the demonstrations by SFT).
        self.register_buffer("action_mean", torch.zeros(self.action_dim))
        self.register_buffer("action_std", torch.ones(self.action_dim))
        self.register_buffer("state_mean", torch.zeros(STATE_DIM))
        self.register_buffer("state_std", torch.ones(STATE_DIM))

    # --- normalisation ---------------------------------------------------------------------------

    def set_normalization(
        self, action_mean: np.ndarray, action_std: np.ndarray, state_mean: np.ndarray, state_std: np.ndarray
    ) -> None:
        for name, arr in (
            ("action_mean", action_mean),
            ("action_std", np.maximum(action_std, 1e-4)),
            ("state_mean", state_mean),
            ("state_std", np.maximum(state_std, 1e-4)),
        ):
            getattr(self, name).copy_(torch.as_tensor(arr, dtype=torch.float32))

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return (actions - self.action_mean) / self.action_std

    def denormalize_actions(self, actions_norm: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        clip = self.config.action_clip_std
        return actions_norm.clamp(-clip, clip) * self.action_std + self.action_mean

    # --- hooks -----------------------------------------------------------------------------------

    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        return preprocess(observations, self.config.cameras, self.config.image_size_px)

    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        obs = obs.to(self.device)  # preprocess decodes on the CPU
        state = (obs.state - self.state_mean) / self.state_std
        return self.obs_fuse(torch.cat([self.image_encoder(obs.images), self.state_encoder(state)], dim=-1))

    def prompt_embeddings(self, prompts: Sequence[str]) -> torch.Tensor:
        return torch.from_numpy(self.prompt_cache.get(prompts)).to(self.action_mean.device)

    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        p = self.prompt_proj(self.prompt_embeddings(prompts))
        return self.cond_mlp(torch.cat([obs_features, p], dim=-1))

    def value(self, cond: torch.Tensor) -> torch.Tensor:
        return self.value_head(cond.detach() if self.config.value_detached else cond).squeeze(-1)

    def velocity_fn(self, cond: torch.Tensor) -> flow_sde.VelocityFn:
        def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            b, k, tt, d = x.shape
            feats = torch.cat(
                [
                    x.reshape(b, k, tt * d),
                    _time_features(t).unsqueeze(0).expand(b, k, -1),
                    cond.unsqueeze(1).expand(b, k, -1),
                ],
                dim=-1,
            )
            return self.velocity(feats).reshape(b, k, tt, d)

        return velocity

    def velocity_at(self, cond: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """v(x [B, T, D], t [B]) for flow-matching training."""
        feats = torch.cat([x.flatten(1), _time_features(t), cond], dim=-1)
        return self.velocity(feats).reshape(x.shape)

    def gaussian_mean(self, cond: torch.Tensor) -> torch.Tensor:
        return self.mean_head(cond).reshape(-1, self.chunk_len, self.action_dim)

    @property
    def action_head(self) -> ActionHead:
        # The head type is chosen here, once: every hook PPO and the actor run goes through it.
        return self._gaussian_head() if self.config.head == "gaussian" else super().action_head

    def _gaussian_head(self) -> GaussianHead:
        return GaussianHead(
            self.gaussian_mean,
            self.log_std,
            self.config.gaussian_log_std_range,
            self.chunk_len,
            self.action_dim,
        )

    def _gaussian_std(self) -> torch.Tensor:
        return self._gaussian_head().std()

    # --- SFT (learner/sft.py) ---------------------------------------------------------------------

    def demo_loss(self, rows: DemoRows) -> torch.Tensor:
        """Flow head: flow-matching velocity regression; Gaussian head: mean regression (the std
        stays at its initial value so PPO has exploration noise)."""
        cond = self.condition(self.encode_observations(rows.obs), rows.prompts)
        target = self.normalize_actions(rows.actions.to(self.device))
        if self.config.head == "flow":
            noise, t = rows.noise.to(target.device), rows.t.to(target.device)
            x_t = (1 - t.view(-1, 1, 1)) * target + t.view(-1, 1, 1) * noise
            return ((self.velocity_at(cond, x_t, t) - (noise - target)) ** 2).mean()
        return ((self.gaussian_mean(cond) - target) ** 2).mean()

    def fit_statistics(self, states: np.ndarray, actions: np.ndarray) -> None:
        """Mean and std of the demo action rows and states (``set_normalization``)."""
        rows = actions.reshape(-1, actions.shape[-1])
        self.set_normalization(rows.mean(0), rows.std(0), states.mean(0), states.std(0))

    # --- checkpoints -----------------------------------------------------------------------------

    def checkpoint_state(self) -> dict[str, Any]:
        cfg = asdict(self.config)
        cfg["cameras"] = list(self.config.cameras)
        return {
            "kind": "small_vla",
            "config": cfg,
            "state_dict": {k: v.detach().cpu().clone() for k, v in self.state_dict().items()},
            "prompt_embeddings": {k: torch.from_numpy(v) for k, v in self.prompt_cache.state().items()},
        }

    @classmethod
    def from_checkpoint_state(cls, state: dict[str, Any]) -> SmallVLAPolicy:
        cfg = dict(state["config"])
        cfg["cameras"] = tuple(cfg["cameras"])
        if "gaussian_log_std_range" in cfg:
            cfg["gaussian_log_std_range"] = tuple(cfg["gaussian_log_std_range"])
        config = VLAConfig(**cfg)
        cache = PromptEmbeddingCache(
            config.text_encoder, {k: v.numpy() for k, v in state.get("prompt_embeddings", {}).items()}
        )
        policy = cls(config, cache)
        policy.load_state_dict(state["state_dict"])
        return policy


def make_test_policy(head: HeadKind = "flow", **overrides: Any) -> SmallVLAPolicy:
    """A tiny policy with the fake text encoder, for unit tests and smoke runs."""
    cfg = VLAConfig(
        head=head, image_size_px=16, hidden_dim=32, chunk_len=4, text_encoder=FakeTextEncoder.name
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return SmallVLAPolicy(cfg)
