"""The π0.5 network, written here: a PaliGemma-style prefix (SigLIP image tokens + Gemma over the
prompt) and a Gemma action expert with adaptive RMS norms, trained by flow matching.

Module and parameter names follow LeRobot 0.6.1's ``PI05Pytorch`` (``policies/pi05/modeling_pi05.py``
and ``policies/pi_gemma.py``), so the ``state_dict`` of a LeRobot π0.5 checkpoint (``model.safetensors``,
keys under ``model.``) loads into :class:`Pi05Model` wrapped as ``model``. What LeRobot holds and this
network does not need (the two unused ``lm_head`` matrices) is listed in :data:`UNUSED_CHECKPOINT_KEYS`.

The forward pass is split where π0.5's attention mask splits it: prefix tokens (images, prompt with
the discretised state) attend only to each other, so one prefix pass gives every layer's keys and
values (:class:`PrefixCache`); the action expert's tokens then attend to those and to each other.
Sampling runs the prefix once and the expert once per denoising step (as LeRobot's
``sample_actions``); PPO evaluates all K steps of a stored chain in one expert call over the same
cache, with gradients reaching the VLM through the cached keys and values.

Conventions (as openpi/LeRobot): ``x_t = t * noise + (1 - t) * actions``, ``t = 1`` is noise, the
expert predicts ``v = noise - actions``; images in [-1, 1]; language embeddings scaled by
``sqrt(width)``; masked attention logits set to ``-2.3819763e38``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

ATTENTION_MASK_VALUE = -2.3819763e38  # openpi's masked-logit constant (LeRobot's as well)
ROPE_THETA = 10_000.0
RMS_EPS = 1e-6
LAYER_NORM_EPS = 1e-6


@dataclass(frozen=True)
class GemmaDims:
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class SiglipDims:
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    patch_px: int


# LeRobot's two variants (``get_gemma_config``) and openpi's ``dummy`` (tests, CPU).
GEMMA_VARIANTS: dict[str, GemmaDims] = {
    "gemma_2b": GemmaDims(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256),
    "gemma_300m": GemmaDims(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256),
    "dummy": GemmaDims(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16),
    "dummy_expert": GemmaDims(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16),
}
# PaliGemma's SigLIP So400m/14 (LeRobot keeps transformers' default vision config) and a tiny one.
SIGLIP_VARIANTS: dict[str, SiglipDims] = {
    "so400m": SiglipDims(width=1152, depth=27, num_heads=16, mlp_dim=4304, patch_px=14),
    "dummy": SiglipDims(width=32, depth=1, num_heads=2, mlp_dim=64, patch_px=8),
}
PALIGEMMA_VOCAB_SIZE = 257_152

# In a LeRobot π0.5 checkpoint but not used by π0.5 (nothing decodes text tokens): skipped on load.
UNUSED_CHECKPOINT_KEYS = (
    "model.paligemma_with_expert.paligemma.lm_head.weight",
    "model.paligemma_with_expert.gemma_expert.lm_head.weight",
)


def _variant(table: dict[str, Any], name: str, field_name: str) -> Any:
    if name not in table:
        raise ValueError(f"{field_name}={name!r} is not a known variant; use one of {sorted(table)}")
    return table[name]


@dataclass(frozen=True)
class Pi05Config:
    """The architecture and sampling fields of LeRobot's ``PI05Config`` (same names and defaults)
    plus ``vision_variant`` and ``vocab_size``, which LeRobot fixes (So400m, 257152) and tests shrink."""

    paligemma_variant: str = "gemma_2b"
    action_expert_variant: str = "gemma_300m"
    vision_variant: str = "so400m"
    vocab_size: int = PALIGEMMA_VOCAB_SIZE
    image_resolution_px: int = 224
    chunk_size: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    num_inference_steps: int = 10
    tokenizer_max_length: int = 200
    min_period: float = 4e-3
    max_period: float = 4.0
    time_sampling_beta_alpha: float = 1.5
    time_sampling_beta_beta: float = 1.0
    time_sampling_scale: float = 0.999
    time_sampling_offset: float = 0.001
    n_action_steps: int | None = None
    """LeRobot's: rows of each chunk its ``select_action`` runs before it infers again. Kept as the
    checkpoint said and written back by the LeRobot export (None: ``chunk_size``, what our actor
    runs)."""

    def __post_init__(self) -> None:
        if self.n_action_steps is not None and not 1 <= self.n_action_steps <= self.chunk_size:
            raise ValueError(
                f"n_action_steps {self.n_action_steps} must be in 1..chunk_size ({self.chunk_size})"
            )
        vlm, expert = self.vlm_dims, self.expert_dims
        _variant(SIGLIP_VARIANTS, self.vision_variant, "vision_variant")
        if (vlm.depth, vlm.num_heads, vlm.num_kv_heads, vlm.head_dim) != (
            expert.depth,
            expert.num_heads,
            expert.num_kv_heads,
            expert.head_dim,
        ):
            raise ValueError(
                f"paligemma_variant {self.paligemma_variant!r} and action_expert_variant "
                f"{self.action_expert_variant!r} must share depth, heads and head_dim "
                "(their layers attend jointly)"
            )
        if self.image_resolution_px % self.vision_dims.patch_px:
            raise ValueError(
                f"image_resolution_px {self.image_resolution_px} is not a multiple of the "
                f"{self.vision_dims.patch_px} px SigLIP patch"
            )

    @property
    def vlm_dims(self) -> GemmaDims:
        return _variant(GEMMA_VARIANTS, self.paligemma_variant, "paligemma_variant")

    @property
    def expert_dims(self) -> GemmaDims:
        return _variant(GEMMA_VARIANTS, self.action_expert_variant, "action_expert_variant")

    @property
    def vision_dims(self) -> SiglipDims:
        return _variant(SIGLIP_VARIANTS, self.vision_variant, "vision_variant")

    @property
    def image_tokens(self) -> int:
        return (self.image_resolution_px // self.vision_dims.patch_px) ** 2

    @classmethod
    def from_json_dict(cls, raw: dict[str, Any]) -> Pi05Config:
        """From a LeRobot ``config.json`` (its other fields are ignored); square ``image_resolution``."""
        kept: dict[str, Any] = {f.name: raw[f.name] for f in fields(cls) if f.name in raw}
        if "image_resolution" in raw:
            h, w = raw["image_resolution"]
            if h != w:
                raise ValueError(
                    f"image_resolution {raw['image_resolution']} is not square, as PaliGemma needs"
                )
            kept["image_resolution_px"] = int(h)
        return cls(**kept)

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        res = out.pop("image_resolution_px")
        out["image_resolution"] = [res, res]
        out["type"] = "pi05"
        return out


# A few hundred thousand parameters with π0.5's structure: tests and the bench's script check.
TINY_CONFIG = Pi05Config(
    paligemma_variant="dummy",
    action_expert_variant="dummy_expert",
    vision_variant="dummy",
    vocab_size=512,
    image_resolution_px=16,
    chunk_size=4,
    max_state_dim=16,
    max_action_dim=8,
    tokenizer_max_length=40,
)


# --- SigLIP ----------------------------------------------------------------------------------------


class SiglipEmbeddings(nn.Module):
    def __init__(self, dims: SiglipDims, image_px: int) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(3, dims.width, kernel_size=dims.patch_px, stride=dims.patch_px)
        self.position_embedding = nn.Embedding((image_px // dims.patch_px) ** 2, dims.width)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        patches = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        return patches + self.position_embedding.weight.unsqueeze(0)


class SiglipAttention(nn.Module):
    def __init__(self, dims: SiglipDims) -> None:
        super().__init__()
        self.num_heads = dims.num_heads
        self.k_proj = nn.Linear(dims.width, dims.width)
        self.v_proj = nn.Linear(dims.width, dims.width)
        self.q_proj = nn.Linear(dims.width, dims.width)
        self.out_proj = nn.Linear(dims.width, dims.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.num_heads, -1).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        )
        return self.out_proj(out.transpose(1, 2).reshape(b, n, w))


class SiglipMLP(nn.Module):
    def __init__(self, dims: SiglipDims) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dims.width, dims.mlp_dim)
        self.fc2 = nn.Linear(dims.mlp_dim, dims.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class SiglipEncoderLayer(nn.Module):
    def __init__(self, dims: SiglipDims) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(dims.width, eps=LAYER_NORM_EPS)
        self.self_attn = SiglipAttention(dims)
        self.layer_norm2 = nn.LayerNorm(dims.width, eps=LAYER_NORM_EPS)
        self.mlp = SiglipMLP(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipEncoder(nn.Module):
    def __init__(self, dims: SiglipDims) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(dims) for _ in range(dims.depth))


class SiglipVisionTransformer(nn.Module):
    def __init__(self, dims: SiglipDims, image_px: int) -> None:
        super().__init__()
        self.embeddings = SiglipEmbeddings(dims, image_px)
        self.encoder = SiglipEncoder(dims)
        self.post_layernorm = nn.LayerNorm(dims.width, eps=LAYER_NORM_EPS)


class SiglipVisionModel(nn.Module):
    def __init__(self, dims: SiglipDims, image_px: int) -> None:
        super().__init__()
        self.vision_model = SiglipVisionTransformer(dims, image_px)
        self.gradient_checkpointing = False

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        vm = self.vision_model
        x = vm.embeddings(pixels)
        for layer in vm.encoder.layers:
            x = _maybe_checkpoint(layer, self.gradient_checkpointing and self.training, x)
        return vm.post_layernorm(x)


class MultiModalProjector(nn.Module):
    def __init__(self, vision_width: int, text_width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(vision_width, text_width)


# --- Gemma -----------------------------------------------------------------------------------------


class GemmaRMSNorm(nn.Module):
    """Gemma's RMS norm (``x * (1 + weight)``, in float32), or with ``cond_dim`` the adaptive one of
    the action expert: ``dense(cond)`` gives scale, shift and a gate for the residual."""

    def __init__(self, dim: int, cond_dim: int | None = None) -> None:
        super().__init__()
        self.dense: nn.Linear | None = None
        if cond_dim is None:
            self.weight = nn.Parameter(torch.zeros(dim))
        else:
            self.dense = nn.Linear(cond_dim, 3 * dim)
            nn.init.zeros_(self.dense.weight)  # starts as a plain RMS norm, as LeRobot's

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
        if self.dense is None:
            return (normed * (1.0 + self.weight.float())).to(x.dtype), None
        if cond is None:
            raise ValueError("the action expert's adaptive norm needs the flow-time condition")
        scale, shift, gate = self.dense(cond).unsqueeze(1).chunk(3, dim=-1)
        return (normed * (1.0 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


def _gated(residual: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return residual + y if gate is None else residual + y * gate


class GemmaAttention(nn.Module):
    def __init__(self, dims: GemmaDims) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = dims.num_heads, dims.num_kv_heads, dims.head_dim
        self.q_proj = nn.Linear(dims.width, dims.num_heads * dims.head_dim, bias=False)
        self.k_proj = nn.Linear(dims.width, dims.num_kv_heads * dims.head_dim, bias=False)
        self.v_proj = nn.Linear(dims.width, dims.num_kv_heads * dims.head_dim, bias=False)
        self.o_proj = nn.Linear(dims.num_heads * dims.head_dim, dims.width, bias=False)
        # False: LeRobot's eager attention (softmax in float32 over materialised logits), what
        # training and checkpoint checks use; True: one fused SDPA call (the actor's real-time path).
        self.sdpa = False

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q [B, heads, Lq, d] over k, v [B, kv_heads, Lk, d] with the additive mask [B, 1, Lq, Lk]."""
        rep = self.num_heads // self.num_kv_heads
        if self.sdpa:
            # A finite additive mask, not a boolean one: a padded prefix token attends to nothing,
            # and SDPA gives such a row NaN with a boolean mask, which its keys would then spread.
            return F.scaled_dot_product_attention(
                q,
                _shared_kv(k, rep),
                _shared_kv(v, rep),
                attn_mask=mask.to(q.dtype),
                scale=self.head_dim**-0.5,
            )
        logits = q @ k.repeat_interleave(rep, 1).transpose(2, 3) * self.head_dim**-0.5
        # softmax in float32, as LeRobot's eager attention
        weights = torch.softmax(logits.float() + mask, dim=-1).to(q.dtype)
        return weights @ v.repeat_interleave(rep, 1)


def _shared_kv(t: torch.Tensor, rep: int) -> torch.Tensor:
    """[B, kv_heads, L, d] -> [B, kv_heads * rep, L, d]; a view (no copy) for one KV head, π0.5's."""
    b, kv_heads, length, d = t.shape
    return t[:, :, None].expand(b, kv_heads, rep, length, d).reshape(b, kv_heads * rep, length, d)


class GemmaMLP(nn.Module):
    def __init__(self, dims: GemmaDims) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dims.width, dims.mlp_dim, bias=False)
        self.up_proj = nn.Linear(dims.width, dims.mlp_dim, bias=False)
        self.down_proj = nn.Linear(dims.mlp_dim, dims.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class GemmaDecoderLayer(nn.Module):
    def __init__(self, dims: GemmaDims, cond_dim: int | None) -> None:
        super().__init__()
        self.self_attn = GemmaAttention(dims)
        self.mlp = GemmaMLP(dims)
        self.input_layernorm = GemmaRMSNorm(dims.width, cond_dim)
        self.post_attention_layernorm = GemmaRMSNorm(dims.width, cond_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        past_kv: tuple[torch.Tensor, torch.Tensor] | None,
        cond: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(output, this layer's keys, values) for tokens ``x`` that also attend to ``past_kv``."""
        attn = self.self_attn
        b, n, _ = x.shape
        h, gate = self.input_layernorm(x, cond)
        q = attn.q_proj(h).view(b, n, attn.num_heads, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(b, n, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(b, n, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
        q, k = _apply_rope(q, *cos_sin), _apply_rope(k, *cos_sin)
        k_all, v_all = (
            (k, v) if past_kv is None else (torch.cat([past_kv[0], k], 2), torch.cat([past_kv[1], v], 2))
        )
        out = attn.attend(q, k_all, v_all, mask).transpose(1, 2).reshape(b, n, -1)
        x = _gated(x, attn.o_proj(out), gate)
        h, gate = self.post_attention_layernorm(x, cond)
        return _gated(x, self.mlp(h), gate), k, v


class GemmaModel(nn.Module):
    """Decoder layers and final norm; ``embed_tokens`` only for the VLM (the expert embeds actions)."""

    def __init__(self, dims: GemmaDims, vocab_size: int | None, cond_dim: int | None) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, dims.width) if vocab_size else None
        self.layers = nn.ModuleList(GemmaDecoderLayer(dims, cond_dim) for _ in range(dims.depth))
        self.norm = GemmaRMSNorm(dims.width, cond_dim)
        self.head_dim = dims.head_dim
        self.gradient_checkpointing = False

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        past: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
        cond: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """(final-normed hidden states, per-layer (keys, values) of these tokens)."""
        cos_sin = _rope(position_ids, self.head_dim, x.dtype)
        kvs: list[tuple[torch.Tensor, torch.Tensor]] = []
        ckpt = self.gradient_checkpointing and self.training
        for i, layer in enumerate(self.layers):
            x, k, v = _maybe_checkpoint(
                layer, ckpt, x, cos_sin, mask, None if past is None else past[i], cond
            )
            kvs.append((k, v))
        return self.norm(x, cond)[0], kvs


class GemmaForCausalLM(nn.Module):
    """Holds ``model`` where LeRobot's ``PiGemmaForCausalLM`` does (its ``lm_head`` is unused)."""

    def __init__(self, dims: GemmaDims, cond_dim: int) -> None:
        super().__init__()
        self.model = GemmaModel(dims, None, cond_dim)


class PaliGemmaModel(nn.Module):
    def __init__(self, config: Pi05Config) -> None:
        super().__init__()
        vision, vlm = config.vision_dims, config.vlm_dims
        self.vision_tower = SiglipVisionModel(vision, config.image_resolution_px)
        self.multi_modal_projector = MultiModalProjector(vision.width, vlm.width)
        self.language_model = GemmaModel(vlm, config.vocab_size, None)


class PaliGemmaForConditionalGeneration(nn.Module):
    def __init__(self, config: Pi05Config) -> None:
        super().__init__()
        self.model = PaliGemmaModel(config)


class PaliGemmaWithExpertModel(nn.Module):
    def __init__(self, config: Pi05Config) -> None:
        super().__init__()
        self.paligemma = PaliGemmaForConditionalGeneration(config)
        self.gemma_expert = GemmaForCausalLM(config.expert_dims, cond_dim=config.expert_dims.width)


def _maybe_checkpoint(fn: nn.Module, enabled: bool, *args: Any) -> Any:
    if enabled:
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def _rope(position_ids: torch.Tensor, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / ROPE_THETA ** (
        torch.arange(0, head_dim, 2, dtype=torch.float32, device=position_ids.device) / head_dim
    )
    freqs = position_ids.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def sinusoidal_time_embedding(
    t: torch.Tensor, dim: int, min_period: float, max_period: float
) -> torch.Tensor:
    """openpi's sine-cosine embedding of scalar flow times [N] -> [N, dim] (float64 inside)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = (2 * math.pi / period)[None, :] * t.double()[:, None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()


@dataclass
class PrefixCache:
    """Every VLM layer's keys/values of the prefix tokens and its final hidden states."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer ([B, kv_heads, L, head_dim] x 2)
    pad: torch.Tensor  # bool [B, L], False for padding (an absent camera, prompt padding)
    hidden: torch.Tensor  # [B, L, width], final-normed

    def pooled(self) -> torch.Tensor:
        """Mean of the valid prefix tokens' hidden states [B, width]."""
        m = self.pad.unsqueeze(-1).to(self.hidden.dtype)
        return (self.hidden * m).sum(1) / m.sum(1).clamp(min=1.0)

    def repeat_interleave(self, k: int) -> PrefixCache:
        if k == 1:
            return self
        return PrefixCache(
            kv=[(a.repeat_interleave(k, 0), b.repeat_interleave(k, 0)) for a, b in self.kv],
            pad=self.pad.repeat_interleave(k, 0),
            hidden=self.hidden.repeat_interleave(k, 0),
        )


def additive_mask(allowed: torch.Tensor) -> torch.Tensor:
    """bool [B, Lq, Lk] -> float32 [B, 1, Lq, Lk]: 0 where allowed, the openpi constant elsewhere."""
    return torch.where(allowed[:, None], 0.0, ATTENTION_MASK_VALUE).float()


class Pi05Model(nn.Module):
    """LeRobot's ``PI05Pytorch``: the VLM with its action expert and the action/time projections."""

    def __init__(self, config: Pi05Config) -> None:
        super().__init__()
        self.config = config
        expert = config.expert_dims
        self.paligemma_with_expert = PaliGemmaWithExpertModel(config)
        self.action_in_proj = nn.Linear(config.max_action_dim, expert.width)
        self.action_out_proj = nn.Linear(expert.width, config.max_action_dim)
        self.time_mlp_in = nn.Linear(expert.width, expert.width)
        self.time_mlp_out = nn.Linear(expert.width, expert.width)

    @property
    def vlm(self) -> PaliGemmaModel:
        return self.paligemma_with_expert.paligemma.model

    @property
    def expert(self) -> GemmaModel:
        return self.paligemma_with_expert.gemma_expert.model

    def set_gradient_checkpointing(self, enabled: bool) -> None:
        """Recompute each layer in the backward pass instead of storing its activations."""
        self.vlm.vision_tower.gradient_checkpointing = enabled
        self.vlm.language_model.gradient_checkpointing = enabled
        self.expert.gradient_checkpointing = enabled

    def set_sdpa_attention(self, enabled: bool) -> None:
        """Every Gemma layer (VLM and expert) attends through SDPA instead of the eager softmax."""
        for module in self.modules():
            if isinstance(module, GemmaAttention):
                module.sdpa = enabled

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """images float [B, C, 3, H, W] in [-1, 1] -> tokens [B, C * image_tokens, width]."""
        b, c = images.shape[:2]
        feats = self.vlm.vision_tower(images.flatten(0, 1))
        tokens = self.vlm.multi_modal_projector.linear(feats)
        return tokens.view(b, c * tokens.shape[1], -1)

    def embed_prefix(
        self,
        image_tokens: torch.Tensor,
        image_valid: torch.Tensor,
        tokens: torch.Tensor,
        token_valid: torch.Tensor,
    ) -> PrefixCache:
        """Run the VLM over [image tokens, prompt tokens] (bidirectional, as π0.5's prefix).
        image_valid bool [B, C] (False: an absent camera), token_valid bool [B, Lt]."""
        x, pad = self.prefix_inputs(image_tokens, image_valid, tokens, token_valid)
        allowed = pad[:, None, :] & pad[:, :, None]
        hidden, kv = self.vlm.language_model(x, torch.cumsum(pad, 1) - 1, additive_mask(allowed))
        return PrefixCache(kv=kv, pad=pad, hidden=hidden)

    def prefix_inputs(
        self,
        image_tokens: torch.Tensor,
        image_valid: torch.Tensor,
        tokens: torch.Tensor,
        token_valid: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prefix's embeddings [B, L, width] (image tokens, then the scaled prompt embeddings)
        and which of its tokens are valid, bool [B, L]."""
        lm = self.vlm.language_model
        assert lm.embed_tokens is not None
        lang = lm.embed_tokens(tokens) * math.sqrt(lm.embed_tokens.embedding_dim)
        x = torch.cat([image_tokens.to(lang.dtype), lang], dim=1)
        per_camera = image_tokens.shape[1] // image_valid.shape[1]
        # expand, not repeat_interleave: no host sync, so a CUDA graph can capture the prefix
        per_token = image_valid[:, :, None].expand(-1, -1, per_camera).reshape(image_valid.shape[0], -1)
        return x, torch.cat([per_token, token_valid], dim=1)

    @staticmethod
    def suffix_attention(prefix_pad: torch.Tensor, horizon: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For a chunk's ``horizon`` tokens after a prefix with valid tokens ``prefix_pad`` [N, L]:
        the additive mask [N, 1, horizon, L + horizon] (the valid prefix and the whole chunk) and the
        tokens' position ids [N, horizon]."""
        n, prefix_len = prefix_pad.shape
        allowed = torch.cat(
            [
                prefix_pad[:, None, :].expand(n, horizon, prefix_len),
                torch.ones(n, horizon, horizon, dtype=torch.bool, device=prefix_pad.device),
            ],
            dim=2,
        )
        offsets = prefix_pad.sum(1, keepdim=True)
        return additive_mask(allowed), offsets + torch.arange(horizon, device=prefix_pad.device)[None, :]

    def time_condition(self, t: torch.Tensor) -> torch.Tensor:
        emb = sinusoidal_time_embedding(
            t, self.time_mlp_in.in_features, self.config.min_period, self.config.max_period
        )
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb.to(self.time_mlp_in.weight.dtype)))))

    def velocity(self, prefix: PrefixCache, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Expert velocity for noisy chunks x_t [N, T, max_action_dim] at times t [N], attending to
        ``prefix`` (batch N). The chunk's tokens attend to each other and to the valid prefix."""
        horizon = x_t.shape[1]
        suffix = self.action_in_proj(x_t)
        cond = self.time_condition(t)
        mask, position_ids = self.suffix_attention(prefix.pad, horizon)
        past = [(k.to(suffix.dtype), v.to(suffix.dtype)) for k, v in prefix.kv]
        out, _ = self.expert(suffix, position_ids, mask, past, cond.to(suffix.dtype))
        return self.action_out_proj(out.float())

    def sample_time(self, n: int, device: torch.device) -> torch.Tensor:
        """Flow times for training, π0.5's Beta(1.5, 1) scaled into (0.001, 1]."""
        c = self.config
        beta = torch.distributions.Beta(c.time_sampling_beta_alpha, c.time_sampling_beta_beta)
        return beta.sample((n,)).to(device) * c.time_sampling_scale + c.time_sampling_offset

    def flow_matching_loss(
        self, prefix: PrefixCache, actions: torch.Tensor, noise: torch.Tensor, t: torch.Tensor
    ) -> torch.Tensor:
        """Per-element squared error [B, T, max_action_dim] of the velocity (LeRobot's ``forward``)."""
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        return (self.velocity(prefix, x_t, t) - (noise - actions)) ** 2
