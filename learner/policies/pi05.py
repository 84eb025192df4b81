"""π0.5 behind the Policy boundary (a FlowChunkPolicy), with the same flow-SDE chain and
log-probabilities as the small policy.

Observation -> policy input, as LeRobot 0.6.1's π0.5 processors do it:
- cameras: JPEG -> RGB, resized with padding (aspect kept, black bars) to the model's square size,
  [0, 1] -> [-1, 1]; an image input with no camera (``Pi05Mapping.cameras`` null) is masked out,
  which is the same as leaving its tokens away, so they are not computed;
- state: the mapped FR3 entries, normalised with the checkpoint's statistics (QUANTILES: [q01, q99]
  -> [-1, 1]), cut into 256 bins and written into the prompt
  ``"Task: <prompt>, State: <bins>;\\nAction: "``, tokenised offline (PaliGemma tokenizer);
- actions: the first ``action_dim`` of the model's 32 columns, de-normalised with the action
  statistics. Log-probabilities count only those columns: the padded ones never reach the robot.

The prefix (images + prompt) runs once per sample and prompt; its per-layer keys/values are the
conditioning (packed into one tensor, as the ABC passes tensors), so sampling and PPO's chain
evaluation run only the action expert per denoising step. The actor's copy can sample through the
real-time path instead (``for_acting``; learner/policies/pi05_realtime.py): the prefix kept as it
is, bf16 weights, SDPA attention, CUDA graphs.

Training options (``Pi05Options``): bf16 autocast (weights stay float32 for the optimiser),
gradient checkpointing, and what trains: everything, everything but SigLIP, the action expert only
(LeRobot's ``train_expert_only``), or LoRA adapters on the attention projections with the rest frozen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from learner.policies import flow_sde
from learner.policies.base import ActingChoice, ChunkSample, DemoRows, FlowChunkPolicy, ObsBatch, Policy
from learner.policies.choice import PolicyChoice
from learner.policies.observations import STATE_DIM
from learner.policies.pi05_checkpoint import (
    MAPPING_FILE,
    FeatureStats,
    Pi05Checkpoint,
    Pi05CheckpointError,
    Pi05Mapping,
    WeightsNotLoadedError,
    read_checkpoint,
    tokenizer_from_json,
)
from learner.policies.pi05_model import Pi05Config, Pi05Model, PrefixCache
from learner.policies.pi05_options import Pi05Options, pi05_options
from learner.policies.pi05_realtime import RealtimeSampler
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import ACTION_DIMS, STATE_VECTOR_NAMES, Observation, ServerInfo, state_vector

__all__ = ["Pi05CheckpointError", "Pi05Options", "Pi05Policy", "WeightsNotLoadedError", "load_pi05"]

STATE_BINS = 256


class LoRA(nn.Module):
    """A low-rank update ``alpha/r * B(A(x))`` added to a frozen linear layer's output by a forward
    hook, so the base layer keeps LeRobot's parameter names. B starts at zero: no change at start."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def delta_weight(self) -> torch.Tensor:
        """The change to the base layer's weight: merged, the layer computes base + adapter."""
        return (self.B @ self.A) * self.scale

    def hook(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
        x = inputs[0]
        return output + F.linear(F.linear(x, self.A.to(x.dtype)), self.B.to(x.dtype)) * self.scale


def resize_with_pad(images: torch.Tensor, size_px: int) -> torch.Tensor:
    """float [N, 3, H, W] in [0, 1] -> [N, 3, size, size]: bilinear resize keeping the aspect ratio,
    zero padding centred (openpi's ``resize_with_pad_torch``, which LeRobot's π0.5 uses)."""
    h, w = images.shape[-2:]
    if (h, w) == (size_px, size_px):
        return images
    ratio = max(w / size_px, h / size_px)
    rh, rw = int(h / ratio), int(w / ratio)
    out = F.interpolate(images, size=(rh, rw), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    top, left = (size_px - rh) // 2, (size_px - rw) // 2
    return F.pad(out, (left, size_px - rw - left, top, size_px - rh - top), value=0.0)


def _clean_task(prompt: str) -> str:
    return prompt.strip().replace("_", " ").replace("\n", " ")  # LeRobot's and openpi's cleaning


def task_prompt(prompt: str) -> str:
    """openpi's prompt without the state (``discrete_state_input=False``, e.g. ``pi05_libero``): the
    cleaned task and a newline, openpi's "start of answer" token."""
    return f"{_clean_task(prompt)}\n"


def state_prompt(prompt: str, state_norm: np.ndarray) -> str:
    """LeRobot's ``Pi05PrepareStateTokenizerProcessorStep`` (0.5 on, 0.6.1 included): the normalised
    state in 256 bins of [-1, 1] written after the task, one bin per entry (0.4.x padded the state
    to ``max_state_dim`` first; LeRobot dropped that, as openpi never did it)."""
    bins = np.digitize(state_norm, bins=np.linspace(-1, 1, STATE_BINS + 1)[:-1]) - 1
    return f"Task: {_clean_task(prompt)}, State: {' '.join(map(str, bins.tolist()))};\nAction: "


class Pi05Policy(FlowChunkPolicy):
    def __init__(self, checkpoint: Pi05Checkpoint, options: Pi05Options | None = None) -> None:
        super().__init__()
        options = options or Pi05Options()
        cfg = checkpoint.config
        self.config, self.options, self.mapping = cfg, options, checkpoint.mapping
        self.image_keys = checkpoint.image_keys
        self.state_in_prompt = checkpoint.state_in_prompt
        self.source_dir = str(checkpoint.directory)
        self.tokenizer_json = checkpoint.tokenizer_json
        self._tokenizer = tokenizer_from_json(checkpoint.tokenizer_json, cfg.tokenizer_max_length)
        self.action_space = checkpoint.mapping.action_space
        self.chunk_len = cfg.chunk_size
        self.action_dim = ACTION_DIMS[self.action_space]
        self.model = Pi05Model(cfg)
        self.model.set_gradient_checkpointing(options.gradient_checkpointing)
        self.schedule = flow_sde.make_schedule(options.flow_steps, options.noise_level)
        # Deterministic sampling (evaluation) is LeRobot's: Euler with the checkpoint's step count.
        self.euler = flow_sde.euler_schedule(cfg.num_inference_steps)
        self.cameras = tuple(c for c in checkpoint.mapping.cameras if c is not None)
        self._state_index = [STATE_VECTOR_NAMES.index(n) for n in checkpoint.mapping.state_names]
        self.stats = {"state": checkpoint.state, "action": checkpoint.action}
        self.register_buffer("state_offset", torch.from_numpy(checkpoint.state.offset))
        self.register_buffer("state_scale", torch.from_numpy(checkpoint.state.scale))
        self.register_buffer("action_offset", torch.from_numpy(checkpoint.action.offset[: self.action_dim]))
        self.register_buffer("action_scale", torch.from_numpy(checkpoint.action.scale[: self.action_dim]))
        # LeRobot's use_relative_actions: column i is an offset from the checkpoint's state entry i.
        self.relative = checkpoint.relative
        self._relative_index = [self._state_index[i] for i, rel in enumerate(self.relative) if rel]
        self._relative_columns = [i for i, rel in enumerate(self.relative) if rel]
        width = cfg.vlm_dims.width
        self.value_head = nn.Sequential(nn.Linear(width, 256), nn.Tanh(), nn.Linear(256, 1))
        self.lora = nn.ModuleDict()
        self._apply_trainable()
        self._realtime: RealtimeSampler | None = None  # the actor's copy only (for_acting)

    state_offset: torch.Tensor
    state_scale: torch.Tensor
    action_offset: torch.Tensor
    action_scale: torch.Tensor

    # --- training options --------------------------------------------------------------------------

    def _apply_trainable(self) -> None:
        mode = self.options.trainable
        vlm = self.model.vlm
        if mode == "no_vision":
            vlm.vision_tower.requires_grad_(False)
        elif mode == "expert":
            vlm.requires_grad_(False)
        elif mode == "lora":
            self.model.requires_grad_(False)
            for name, module in self.model.named_modules():
                if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in ("q_proj", "v_proj"):
                    if ".vision_tower." in f".{name}":
                        continue
                    adapter = LoRA(module, self.options.lora_rank, self.options.lora_alpha)
                    self.lora[name.replace(".", "__")] = adapter
                    module.register_forward_hook(adapter.hook)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.options.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def fsdp_units(self) -> list[nn.Module]:
        """Every SigLIP and Gemma (VLM and expert) transformer block: they are called as modules
        (their ``forward``), so FSDP gathers each block's weights just for its turn."""
        return [
            *self.model.vlm.vision_tower.vision_model.encoder.layers,
            *self.model.vlm.language_model.layers,
            *self.model.expert.layers,
        ]

    # --- observation -> tensors ----------------------------------------------------------------------

    def preprocess(self, observations: Sequence[Observation]) -> ObsBatch:
        size = self.config.image_resolution_px
        images = torch.zeros(len(observations), len(self.cameras), 3, size, size, dtype=torch.uint8)
        states = np.zeros((len(observations), STATE_DIM), dtype=np.float32)
        for i, obs in enumerate(observations):
            frames = {f.name: f for f in obs.cameras}
            for j, cam in enumerate(self.cameras):
                if cam not in frames:
                    raise ValueError(
                        f"observation {obs.seq} has cameras {sorted(frames)}; the π0.5 mapping needs "
                        f"{list(self.cameras)} (pde_pi05.json 'cameras')"
                    )
                try:
                    hwc = decode_jpeg(frames[cam].jpeg)
                except ValueError as e:
                    raise ValueError(f"observation {obs.seq}: camera {cam!r}: {e}") from None
                rgb = torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1)))
                padded = resize_with_pad(rgb[None].float() / 255.0, size)[0]
                images[i, j] = (padded * 255.0).round().to(torch.uint8)
            states[i] = state_vector(obs.state)
        return ObsBatch(images=images, state=torch.from_numpy(states))

    def robot_mismatch(self, info: ServerInfo) -> str | None:
        mismatch = super().robot_mismatch(info)
        if mismatch is None:
            return None
        return (
            f"{mismatch}. π0.5's cameras and action space come from {MAPPING_FILE} in {self.source_dir} "
            "(docs/pi05.md, step 2); a policy checkpoint keeps the mapping it was made with"
        )

    @property
    def statistics_known(self) -> bool:
        return self.stats["state"].known and self.stats["action"].known

    def _require_statistics(self) -> None:
        if not self.statistics_known:
            raise Pi05CheckpointError(
                f"{self.source_dir} has no normalisation statistics and none were computed: train with "
                "`pde learner sft --policy pi05 --init DIR` (it takes them from the demos) and use that "
                "checkpoint"
            )

    def fit_statistics(self, states: np.ndarray, actions: np.ndarray) -> None:
        """The demos' statistics only for a checkpoint that has none: π0.5 keeps its own."""
        if not self.statistics_known:
            self.set_statistics_from(states, actions)

    def set_statistics_from(self, states: np.ndarray, actions: np.ndarray) -> None:
        """QUANTILES statistics from demonstrations: raw FR3 states [N, 15] and action chunks
        [N, T, D] in action-space units (for a base checkpoint that has none of this robot); of the
        offsets from each chunk's state for relative columns (LeRobot's relative action stats)."""
        states = np.asarray(states)
        state = FeatureStats.quantiles_of(states[:, self._state_index])
        offsets = np.array(actions, dtype=np.float64)
        offsets[..., self._relative_columns] -= states[:, None, self._relative_index]
        action = FeatureStats.quantiles_of(offsets.reshape(-1, self.action_dim))
        self.stats = {"state": state, "action": action}
        for name, value in (
            ("state_offset", state.offset),
            ("state_scale", state.scale),
            ("action_offset", action.offset),
            ("action_scale", action.scale),
        ):
            getattr(self, name).copy_(torch.from_numpy(value))

    def normalize_state(self, state: torch.Tensor) -> torch.Tensor:
        """Raw FR3 state [B, 15] -> the checkpoint's normalised state [B, S]."""
        self._require_statistics()
        shift = self.stats["state"].shift
        return (state[:, self._state_index] - self.state_offset) / self.state_scale - shift

    def _state_reference(self, state: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """[B, 1, D]: the raw state entry each relative column is an offset from, 0 elsewhere."""
        ref = torch.zeros(state.shape[0], 1, self.action_dim, dtype=like.dtype, device=like.device)
        if self._relative_columns:
            picked = state[:, self._relative_index].to(like)
            ref[:, 0, self._relative_columns] = picked
        return ref

    def normalize_actions(self, actions: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Action-space units [B, T, D] of observations with raw ``state`` [B, 15] -> the model's
        normalised columns [B, T, max_action_dim] (relative columns first made offsets, as LeRobot's
        RelativeActionsProcessorStep before its normaliser)."""
        offsets = actions - self._state_reference(state, actions)
        norm = (offsets - self.action_offset) / self.action_scale - self.stats["action"].shift
        return F.pad(norm, (0, self.config.max_action_dim - self.action_dim))

    def denormalize_actions(self, actions_norm: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The model's columns -> action-space units: de-normalised, then the state added back to
        relative columns (LeRobot's unnormaliser, then its AbsoluteActionsProcessorStep)."""
        self._require_statistics()
        shift = self.stats["action"].shift
        actions = (actions_norm[..., : self.action_dim] + shift) * self.action_scale + self.action_offset
        return actions + self._state_reference(state, actions)

    # --- Policy hooks ----------------------------------------------------------------------------------

    def encode_observations(self, obs: ObsBatch) -> torch.Tensor:
        """[B, cameras * image_tokens * width + S]: image tokens and normalised state, flat."""
        obs = obs.to(self.device)
        with self._autocast():
            pixels = obs.images.float() / 255.0 * 2.0 - 1.0
            tokens = self.model.embed_images(pixels).float()
        return torch.cat([tokens.flatten(1), self.normalize_state(obs.state)], dim=1)

    def tokenize(self, prompts: Sequence[str], states_norm: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        texts = [
            state_prompt(p, s) if self.state_in_prompt else task_prompt(p)
            for p, s in zip(prompts, states_norm, strict=True)
        ]
        enc = self._tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long, device=self.device)
        valid = torch.tensor([e.attention_mask for e in enc], dtype=torch.bool, device=self.device)
        return ids, valid

    def condition(self, obs_features: torch.Tensor, prompts: Sequence[str]) -> torch.Tensor:
        b, s = obs_features.shape[0], self.state_offset.shape[0]
        width = self.config.vlm_dims.width
        image_tokens = obs_features[:, :-s].view(b, -1, width)
        ids, valid = self.tokenize(prompts, obs_features[:, -s:].detach().cpu().numpy())
        image_valid = torch.ones(b, len(self.cameras), dtype=torch.bool, device=self.device)
        with self._autocast():
            prefix = self.model.embed_prefix(image_tokens, image_valid, ids, valid)
        return pack_prefix(prefix)

    def velocity_fn(self, cond: torch.Tensor) -> flow_sde.VelocityFn:
        return self.prefix_velocity_fn(unpack_prefix(cond, self.config))

    def prefix_velocity_fn(self, prefix: PrefixCache) -> flow_sde.VelocityFn:
        """The expert's velocity over ``prefix`` (batch B) for x [B, K', T, D] at times t [K']."""

        def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            b, k = x.shape[:2]
            with self._autocast():
                v = self.model.velocity(
                    prefix.repeat_interleave(k), x.reshape(b * k, *x.shape[2:]), t.repeat(b).to(x.device)
                )
            return v.float().view(b, k, *x.shape[2:])

        return velocity

    @property
    def acting_schedule(self) -> flow_sde.FlowSDESchedule:
        return self.euler

    @property
    def model_action_dim(self) -> int:
        return self.config.max_action_dim

    def value(self, cond: torch.Tensor) -> torch.Tensor:
        return self.value_from_prefix(unpack_prefix(cond, self.config))

    def value_from_prefix(self, prefix: PrefixCache) -> torch.Tensor:
        # Detached: the value loss trains the value head only, the VLM is shaped by the policy loss.
        # Pooled in float32 whatever the cache's dtype (the packed conditioning is float32).
        pooled = dataclasses.replace(prefix, hidden=prefix.hidden.float()).pooled().detach()
        head_dtype = next(self.value_head.parameters()).dtype  # bfloat16 in a bf16 actor copy
        return self.value_head(pooled.to(head_dtype)).float().squeeze(-1)

    # --- the actor's copy ------------------------------------------------------------------------------

    def for_acting(self, choice: ActingChoice) -> Pi05Policy:
        """This policy made the actor's copy, in place (it is the actor's own: a loaded checkpoint or
        a trainer's snapshot; the trainer's weights stay float32, its master copy). ``bf16_weights``:
        the network's weights cast to bfloat16 (the statistics stay float32) and run under autocast;
        ``fast_inference``: sampling through the real-time path (fused weights); ``cuda_graphs``: that
        path captured; ``compiled_kernels``: its elementwise pieces compiled."""
        if (choice.cuda_graphs or choice.compiled_kernels) and not choice.fast_inference:
            raise ValueError(
                "cuda_graphs and compiled_kernels apply to the real-time path: set fast_inference too"
            )
        if not (choice.fast_inference or choice.bf16_weights):
            return self
        # No autograd: nothing trains this copy (and autocast then keeps no cast weights that a
        # captured graph would hold on to).
        self.eval().requires_grad_(False)
        if choice.bf16_weights:
            for module in self.children():
                module.to(dtype=torch.bfloat16)
            self.options = dataclasses.replace(self.options, bf16=True)
        if choice.fast_inference:
            self.model.set_sdpa_attention(True)
            self._realtime = RealtimeSampler(self, choice.cuda_graphs, choice.compiled_kernels)
        return self

    def take_weights_of(self, new: Policy) -> bool:
        """The swap without re-capture: ``new``'s weights (the trainer's snapshot, float32) copied
        into this real-time copy's tensors (cast to their dtype on the way; the fused weights and a
        captured CUDA graph read those tensors, so they run the new weights with no new capture and
        no allocation). False when ``new`` is not the same π0.5 (architecture, options, mapping,
        tokenizer, adapters) or this copy has no real-time path: the caller then makes ``new`` the
        acting copy."""
        if self._realtime is None or not isinstance(new, Pi05Policy) or not self._same_policy_as(new):
            return False
        mine, theirs = self.state_dict(), new.state_dict()
        if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape for k in mine):
            return False
        with torch.no_grad():
            for name, tensor in mine.items():
                tensor.copy_(theirs[name])
        self.stats = dict(new.stats)
        return True

    def _same_policy_as(self, other: Pi05Policy) -> bool:
        mine = dataclasses.replace(self.options, bf16=other.options.bf16)  # the actor's copy sets bf16
        return (
            self.config == other.config
            and mine == other.options
            and self.mapping == other.mapping
            and self.tokenizer_json == other.tokenizer_json
            and self.relative == other.relative
            and self.state_in_prompt == other.state_in_prompt
            and self.image_keys == other.image_keys
        )

    @torch.no_grad()
    def sample(self, obs: ObsBatch, prompts: Sequence[str], deterministic: bool = False) -> ChunkSample:
        if self._realtime is None:
            return super().sample(obs, prompts, deterministic)
        return self._realtime.sample(self, obs, prompts, deterministic)

    def demo_loss(self, rows: DemoRows) -> torch.Tensor:
        """Flow matching on demonstrations (LeRobot's π0.5 loss), averaged over the executed columns
        only."""
        cond = self.condition(self.encode_observations(rows.obs), rows.prompts)
        prefix = unpack_prefix(cond, self.config)
        target = self.normalize_actions(rows.actions.to(self.device).float(), rows.obs.state.to(self.device))
        noise, t = rows.noise.to(target.device), rows.t.to(target.device)
        with self._autocast():
            err = self.model.flow_matching_loss(prefix, target, noise, t)
        return err[..., : self.action_dim].float().mean()

    def supervised_noise(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Noise [n, T, 32] over all the model's action columns and flow times [n] ~ Beta(1.5, 1)
        scaled into (0.001, 1], in that order, on the CPU (also when the model runs on a GPU)."""
        noise = torch.randn(n, self.chunk_len, self.config.max_action_dim)
        return noise, self.model.sample_time(n, torch.device("cpu"))

    # --- checkpoints -----------------------------------------------------------------------------------

    def trainable_state(self) -> Iterator[tuple[str, torch.Tensor]]:
        """What training changes: trainable parameters, the value head, LoRA and buffers."""
        frozen = {n for n, p in self.named_parameters() if not p.requires_grad}
        for name, tensor in self.state_dict().items():
            if name not in frozen:
                yield name, tensor

    def checkpoint_state(self) -> dict[str, Any]:
        """Self-contained unless the base is frozen: then only what trains, and the source directory
        the frozen weights are read from again (a 3B base is not copied into every PPO version)."""
        partial = self.options.trainable in ("expert", "lora")
        weights = dict(self.trainable_state()) if partial else self.state_dict()
        return {
            "kind": "pi05",
            "source_dir": self.source_dir,
            "partial": partial,
            "config": self.config.to_json_dict(),
            "options": asdict(self.options),
            "mapping": self.mapping.to_json_dict(),
            "image_keys": list(self.image_keys),
            "stats": {k: asdict(v) for k, v in self.stats.items()},
            "tokenizer_json": self.tokenizer_json,
            "relative": list(self.relative),
            "state_in_prompt": self.state_in_prompt,
            "state_dict": {k: v.detach().cpu().clone() for k, v in weights.items()},
        }

    @classmethod
    def from_init_dir(cls, choice: PolicyChoice, stats_from_demos: bool = False) -> Pi05Policy:
        return load_pi05(choice.init, pi05_options(choice), stats_from_demos)

    @classmethod
    def init_key(cls, choice: PolicyChoice) -> dict[str, Any]:
        return {"pi05_init": str(Path(choice.init).resolve()), "options": asdict(pi05_options(choice))}

    @classmethod
    def from_checkpoint_state(cls, state: dict[str, Any]) -> Pi05Policy:
        ckpt = Pi05Checkpoint(
            directory=Path(state["source_dir"]),
            config=Pi05Config.from_json_dict(state["config"]),
            image_keys=tuple(state["image_keys"]),
            state=FeatureStats(**state["stats"]["state"]),
            action=FeatureStats(**state["stats"]["action"]),
            mapping=Pi05Mapping.from_json_dict(state["mapping"]),
            tokenizer_json=state["tokenizer_json"],
            relative=tuple(state.get("relative", ())),
            state_in_prompt=state.get("state_in_prompt", True),
        )
        policy = cls(ckpt, Pi05Options(**state["options"]))
        if state["partial"]:
            ckpt.load_weights(policy.model)
            missing = set(dict(policy.trainable_state())) - set(state["state_dict"])
            if missing:
                raise WeightsNotLoadedError(f"the policy checkpoint lacks {sorted(missing)[:3]}")
            policy.load_state_dict(state["state_dict"], strict=False)
        else:
            policy.load_state_dict(state["state_dict"])
        return policy


def pack_prefix(prefix: PrefixCache) -> torch.Tensor:
    """PrefixCache -> one float32 tensor [B, L, depth * 2 * kv_heads * head_dim + width + 1]
    (indexable along the batch, as the network hooks pass conditionings)."""
    b, length = prefix.pad.shape
    parts = [t.transpose(1, 2).reshape(b, length, -1).float() for kv in prefix.kv for t in kv]
    return torch.cat([*parts, prefix.hidden.float(), prefix.pad.unsqueeze(-1).float()], dim=-1)


def unpack_prefix(packed: torch.Tensor, cfg: Pi05Config) -> PrefixCache:
    dims = cfg.vlm_dims
    b, length, _ = packed.shape
    per = dims.num_kv_heads * dims.head_dim
    kv = []
    for layer in range(dims.depth):
        k, v = (
            packed[..., (2 * layer + i) * per : (2 * layer + i + 1) * per]
            .reshape(b, length, dims.num_kv_heads, dims.head_dim)
            .transpose(1, 2)
            for i in (0, 1)
        )
        kv.append((k, v))
    start = 2 * dims.depth * per
    return PrefixCache(kv=kv, hidden=packed[..., start : start + dims.width], pad=packed[..., -1] > 0.5)


def load_pi05(
    directory: str | Path, options: Pi05Options | None = None, stats_from_demos: bool = False
) -> Pi05Policy:
    """π0.5 from a checkpoint directory (learner/policies/pi05_checkpoint.py), its weights loaded;
    Pi05CheckpointError (or WeightsNotLoadedError) with what to do when anything is missing.
    ``stats_from_demos``: accept a directory without statistics (SFT computes them)."""
    ckpt = read_checkpoint(directory, stats_from_demos)
    policy = Pi05Policy(ckpt, options)
    ckpt.load_weights(policy.model)
    policy.eval()
    return policy
