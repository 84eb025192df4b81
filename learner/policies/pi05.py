"""π0.5 behind the Policy ABC, with the same flow-SDE log-probabilities as the small policy.

The adapter needs four things from a π0.5 implementation (``Pi05Backbone``): an observation
embedding shared between prompts, a prefix (images + state + prompt) per prompt, the velocity of
the action expert for noisy chunks at given flow times (one batched call over all denoising steps),
and prefix features for the value head. ``LeRobotPi05Backbone`` provides them from LeRobot's
PI05Policy (Python >= 3.12, the GPU image) loaded from a local directory, and refuses to start when
the weights did not load: LeRobot prints a message and silently keeps a random initialisation.

Chains live in the model's padded action width (π0.5 pads to ``max_action_dim``); the executed chunk
is the first ``action_dim`` columns of the last chain state, denormalised.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from learner.policies import flow_sde
from learner.policies.base import ObsBatch, Policy
from learner.policies.observations import preprocess
from pde_contract.messages import ActionSpace, Observation


class WeightsNotLoadedError(RuntimeError):
    """The π0.5 weights are missing or did not load into the model."""


class Pi05Backbone(nn.Module, ABC):
    chunk_len: int
    model_action_dim: int  # padded width of the action expert
    value_feature_dim: int
    image_size_px: int = 224
    cameras: tuple[str, ...] = ("external", "wrist")

    @abstractmethod
    def embed_observations(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """[B, ...] features shared between prompts (images uint8 [B, C, 3, H, W], state raw)."""

    @abstractmethod
    def embed_prefix(self, obs_emb: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        """[B, ...] prefix for each sample's prompt; indexable along the batch."""

    @abstractmethod
    def velocity(self, prefix: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """v for noisy chunks x [B, K, T, Dm] at flow times t [K] (1 = noise) -> [B, K, T, Dm]."""

    @abstractmethod
    def value_features(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, value_feature_dim] pooled prefix features for the value head."""


class Pi05Policy(Policy):
    def __init__(
        self,
        backbone: Pi05Backbone,
        action_space: ActionSpace = ActionSpace.EE_DELTA,
        action_dim: int = 7,
        flow_steps: int = 5,
        noise_level: float = 0.5,
        weights_dir: str = "",
    ) -> None:
        super().__init__()
        if action_dim > backbone.model_action_dim:
            raise ValueError(f"action_dim {action_dim} exceeds the model's width {backbone.model_action_dim}")
        self.backbone = backbone
        self.action_space = action_space
        self.chunk_len = backbone.chunk_len
        self.action_dim = action_dim
        self.weights_dir = weights_dir
        self.flow_steps, self.noise_level = flow_steps, noise_level
        self.schedule = flow_sde.make_schedule(flow_steps, noise_level)
        h = 256
        self.value_head = nn.Sequential(nn.Linear(backbone.value_feature_dim, h), nn.Tanh(), nn.Linear(h, 1))
        self.register_buffer("action_mean", torch.zeros(action_dim))
        self.register_buffer("action_std", torch.ones(action_dim))

    action_mean: torch.Tensor
    action_std: torch.Tensor

    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        return preprocess(observations, self.backbone.cameras, self.backbone.image_size_px)

    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        return self.backbone.embed_observations(obs.images, obs.state)

    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        return self.backbone.embed_prefix(obs_features, prompts)

    def _velocity_fn(self, cond: torch.Tensor) -> flow_sde.VelocityFn:
        return lambda x, t: self.backbone.velocity(cond, x, t)

    def head_means(self, cond: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        return flow_sde.chain_means(self._velocity_fn(cond), chain, self.schedule)

    def head_log_prob(self, chain: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Only the executed columns: the padded ones never reach the robot, and counting them
        # would add 25 of 32 columns of noise to every ratio.
        log_prob = flow_sde.chain_log_prob_from_means(chain, means, self.schedule)[..., : self.action_dim]
        ent = flow_sde.chain_entropy(self.schedule, self.chunk_len * self.action_dim)
        return log_prob, torch.full(log_prob.shape[:1], ent, dtype=log_prob.dtype, device=log_prob.device)

    def head_kl(self, means_p: torch.Tensor, means_q: torch.Tensor) -> torch.Tensor:
        return flow_sde.chain_kl(means_p, means_q, self.schedule)

    def value(self, cond: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.backbone.value_features(cond)).squeeze(-1)

    def sample_chain(self, cond: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn(cond.shape[0], self.chunk_len, self.backbone.model_action_dim, device=cond.device)
        chain, log_prob = flow_sde.sample_chain(self._velocity_fn(cond), noise, self.schedule, deterministic)
        return chain, log_prob[..., : self.action_dim]

    def denormalize_actions(self, actions_norm: torch.Tensor) -> torch.Tensor:
        return actions_norm[..., : self.action_dim] * self.action_std + self.action_mean

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "kind": "pi05",
            "weights_dir": self.weights_dir,
            "action_space": self.action_space.value,
            "action_dim": self.action_dim,
            "flow_steps": self.flow_steps,
            "noise_level": self.noise_level,
            "state_dict": {k: v.detach().cpu().clone() for k, v in self.state_dict().items()},
        }

    @classmethod
    def from_checkpoint_state(cls, state: dict[str, Any]) -> Pi05Policy:
        policy = load_pi05(
            state["weights_dir"],
            ActionSpace(state["action_space"]),
            int(state["action_dim"]),
            int(state["flow_steps"]),
            float(state["noise_level"]),
        )
        policy.load_state_dict(state["state_dict"])
        return policy


# --- LeRobot ------------------------------------------------------------------------------------


def check_weights_loaded(
    model_keys: Sequence[str], file_keys: Sequence[str], min_fraction: float = 0.99
) -> None:
    """Raise unless (almost) every model parameter has a tensor in the weights file."""
    if not file_keys:
        raise WeightsNotLoadedError("the weights file holds no tensors")
    strip = {k.removeprefix("model.") for k in file_keys}
    covered = [k for k in model_keys if k.removeprefix("model.") in strip]
    fraction = len(covered) / max(1, len(model_keys))
    if fraction < min_fraction:
        missing = [k for k in model_keys if k.removeprefix("model.") not in strip][:5]
        raise WeightsNotLoadedError(
            f"only {fraction:.1%} of the model's parameters are in the weights file "
            f"(missing e.g. {missing}); refusing to run a randomly initialised π0.5"
        )


class LeRobotPi05Backbone(Pi05Backbone):  # pragma: no cover - needs lerobot (Python >= 3.12) and weights
    """LeRobot's PI05Policy from a local directory (config.json + model.safetensors + processor).

    The prefix (SigLIP image tokens + prompt/state tokens) is embedded per prompt; the velocity runs the
    joint prefix+suffix forward used in LeRobot's training path, so gradients reach the whole model."""

    def __init__(self, weights_dir: Path, device: str = "cuda") -> None:
        super().__init__()
        try:
            from lerobot.policies.factory import make_pre_post_processors
            from lerobot.policies.pi05 import PI05Policy
            from safetensors import safe_open
        except ImportError as e:
            raise RuntimeError(
                f"the π0.5 adapter needs LeRobot with the 'pi' extra (Python >= 3.12, the GPU image): {e}"
            ) from e
        self.policy = PI05Policy.from_pretrained(str(weights_dir), local_files_only=True).to(device)
        with safe_open(str(weights_dir / "model.safetensors"), framework="pt") as f:
            file_keys = list(f.keys())
        check_weights_loaded(list(self.policy.state_dict().keys()), file_keys)
        self.preprocessor, _ = make_pre_post_processors(self.policy.config, str(weights_dir))
        cfg = self.policy.config
        self.chunk_len = int(cfg.chunk_size)
        self.model_action_dim = int(cfg.max_action_dim)
        self.image_size_px = int(cfg.image_resolution[0])
        self.value_feature_dim = int(
            self.policy.model.paligemma_with_expert.paligemma.config.text_config.hidden_size
        )
        self.device = device

    def embed_observations(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        # [B, C*3*H*W + S]: the camera images and state travel together until the prompt is known
        return torch.cat([images.flatten(1).float(), state], dim=1).to(self.device)

    def embed_prefix(self, obs_emb: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        b = obs_emb.shape[0]
        n_img = len(self.cameras) * 3 * self.image_size_px**2
        images = (
            obs_emb[:, :n_img].view(b, len(self.cameras), 3, self.image_size_px, self.image_size_px) / 255.0
        )
        state = obs_emb[:, n_img:]
        keys = list(self.policy.config.image_features)
        batch: dict[str, Any] = {k: images[:, i] for i, k in enumerate(keys[: len(self.cameras)])}
        batch.update({"observation.state": state, "task": list(prompts)})
        batch = self.preprocessor(batch)
        imgs, img_masks = self.policy._preprocess_images(batch)
        tokens, masks = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
        embs, pad, att = self.policy.model.embed_prefix(imgs, img_masks, tokens, masks)
        return torch.cat([embs.float(), pad.unsqueeze(-1).float(), att.unsqueeze(-1).float()], dim=-1)

    def velocity(self, prefix: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        from lerobot.policies.pi05.modeling_pi05 import make_att_2d_masks, prepare_attention_masks_4d

        b, k = x.shape[:2]
        model = self.policy.model
        rep = prefix.repeat_interleave(k, dim=0)
        embs, pad, att = rep[..., :-2], rep[..., -2].bool(), rep[..., -1].bool()
        x_flat = x.reshape(b * k, *x.shape[2:])
        time = t.repeat(b).to(x.device)
        suffix_embs, suffix_pad, suffix_att, adarms_cond = model.embed_suffix(x_flat, time)
        pad_all = torch.cat([pad, suffix_pad], dim=1)
        att_all = torch.cat([att, suffix_att], dim=1)
        masks_4d = prepare_attention_masks_4d(make_att_2d_masks(pad_all, att_all))
        position_ids = torch.cumsum(pad_all, dim=1) - 1
        (_, suffix_out), _ = model.paligemma_with_expert.forward(
            attention_mask=masks_4d,
            position_ids=position_ids,
            past_key_values=None,
            inputs_embeds=[embs.to(suffix_embs.dtype), suffix_embs],
            use_cache=False,
            adarms_cond=[None, adarms_cond],
        )
        v = model.action_out_proj(suffix_out[:, -self.chunk_len :].float())
        return v.reshape(b, k, self.chunk_len, -1)

    def value_features(self, prefix: torch.Tensor) -> torch.Tensor:
        pad = prefix[..., -2:-1]
        return (prefix[..., :-2] * pad).sum(1) / pad.sum(1).clamp(min=1.0)


def load_pi05(
    weights_dir: str | Path,
    action_space: ActionSpace = ActionSpace.EE_DELTA,
    action_dim: int = 7,
    flow_steps: int = 5,
    noise_level: float = 0.5,
    device: str = "cuda",
) -> Pi05Policy:
    """π0.5 from a local directory; raises a clear error when it is missing or the weights do not load."""
    path = Path(weights_dir)
    if not path.is_dir():
        raise FileNotFoundError(
            f"π0.5 weights directory {path} does not exist; download the checkpoint on a machine with "
            "internet access and copy it there (config.json, model.safetensors, processor files)"
        )
    if not (path / "model.safetensors").is_file():
        raise WeightsNotLoadedError(f"{path} has no model.safetensors: refusing to run an uninitialised π0.5")
    backbone = LeRobotPi05Backbone(path, device)
    return Pi05Policy(backbone, action_space, action_dim, flow_steps, noise_level, weights_dir=str(path))
