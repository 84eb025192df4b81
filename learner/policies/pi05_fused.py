"""Fewer, fatter kernels for the actor's π0.5 (the real-time path, learner/policies/pi05_realtime.py).

At batch 1 the chunk is thousands of tiny kernels (a profile of the eager path on an H200 counted
7,815), each a few microseconds even inside a CUDA graph. This module computes the same chunk with
fewer of them:

- one GEMM for q, k and v and one for gate and up in every Gemma layer, one for q, k and v in every
  SigLIP layer: the weights are concatenated once (``FusedPi05``, made on the actor's copy after
  its bf16 cast) and each original weight becomes a view of its rows, so nothing is held twice and
  whatever writes a weight (a swap's ``copy_``, ``load_state_dict``) writes the fused tensor;
- the action expert's adaptive norms: the flow-time conditioning of every step and the scale,
  shift and gate of all its norms for all steps, in one GEMM per chunk instead of one per norm per
  step; the rotary tables and the attention mask once per chunk instead of once per step; one
  key and one value buffer per expert layer, the prefix's copied in once per chunk and each step's
  written behind them (by the RoPE kernel when compiled) instead of a concatenation per step;
- the elementwise pieces (the residual add with the next RMS norm, GeGLU, RoPE on q and k, the
  residual add with SigLIP's layer norm, the flow-SDE step's arithmetic) are plain functions here;
  with ``compiled`` they go through ``torch.compile`` (Inductor, ``mode="default"``: no CUDA graphs
  of its own, the real-time path captures the whole chunk), which fuses each into one kernel.

The eager path (``Pi05Model``'s modules) stays the reference: the same operations in the same
order, so uncompiled the chunk differs only by the GEMMs' rounding of a wider matrix, and compiled
by Inductor's reordering of float arithmetic (tests/learner/test_pi05_fused.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from learner.policies import flow_sde
from learner.policies.pi05_model import (
    LAYER_NORM_EPS,
    RMS_EPS,
    GemmaDecoderLayer,
    GemmaModel,
    Pi05Model,
    PrefixCache,
    SiglipEncoderLayer,
    SiglipVisionModel,
    _apply_rope,
    _rope,
    _shared_kv,
    additive_mask,
)

log = logging.getLogger(__name__)


# --- the elementwise pieces (eager, or each one compiled kernel) -------------------------------------


def _rms(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """GemmaRMSNorm without a condition."""
    return (_rms(x) * (1.0 + weight.float())).to(x.dtype)


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add, then the next GemmaRMSNorm: (x + y, its norm)."""
    x = x + y
    return x, rms_norm(x, weight)


def ada_rms_norm(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """The action expert's adaptive norm with its scale and shift (``dense(cond)``) given."""
    return (_rms(x) * (1.0 + scale.float()) + shift.float()).to(x.dtype)


def add_ada_rms_norm(
    x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated residual add, then the next adaptive norm."""
    x = x + y * gate.to(x.dtype)
    return x, ada_rms_norm(x, scale, shift)


def rope_qkv(
    qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One projection's [B, L, (heads + 2 kv_heads) * d] -> q, k with RoPE and v, [B, h, L, d]."""
    b, n, _ = qkv.shape
    q, k, v = qkv.view(b, n, heads + 2 * kv_heads, -1).transpose(1, 2).split([heads, kv_heads, kv_heads], 1)
    return _apply_rope(q, cos, sin), _apply_rope(k, cos, sin), v


def rope_qkv_into(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    heads: int,
    kv_heads: int,
    k_out: torch.Tensor,
    v_out: torch.Tensor,
) -> torch.Tensor:
    """``rope_qkv`` with k and v written into ``k_out`` / ``v_out`` (the tail of a layer's key/value
    buffer behind the prefix's): q. Compiled, the writes are the same kernel (no cat per step)."""
    q, k, v = rope_qkv(qkv, cos, sin, heads, kv_heads)
    k_out.copy_(k)
    v_out.copy_(v)
    return q


def geglu(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def add_layer_norm(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SigLIP's residual add, then its next layer norm."""
    x = x + y
    return x, F.layer_norm(x, x.shape[-1:], weight, bias, LAYER_NORM_EPS)


def image_pixels(images: torch.Tensor) -> torch.Tensor:
    """uint8 images -> [-1, 1], as the eager path computes them."""
    return images.float() / 255.0 * 2.0 - 1.0


@dataclass(frozen=True)
class Kernels:
    """The elementwise pieces as called: the functions above, or each compiled by Inductor."""

    rms_norm: Callable[..., Any] = rms_norm
    add_rms_norm: Callable[..., Any] = add_rms_norm
    ada_rms_norm: Callable[..., Any] = ada_rms_norm
    add_ada_rms_norm: Callable[..., Any] = add_ada_rms_norm
    rope_qkv: Callable[..., Any] = rope_qkv
    rope_qkv_into: Callable[..., Any] = rope_qkv_into
    geglu: Callable[..., Any] = geglu
    add_layer_norm: Callable[..., Any] = add_layer_norm
    image_pixels: Callable[..., Any] = image_pixels
    sde_step: Callable[..., Any] = flow_sde.sde_step

    @classmethod
    def compiled(cls) -> Kernels:
        """Each piece through torch.compile: static shapes (one compiled kernel per shape, made on
        first use: the real-time path's warm-up before a capture), no CUDA graphs of Inductor's own
        (the real-time path captures the whole chunk), a whole graph or an error (no silent
        splits into eager pieces)."""
        eager = cls()
        return cls(
            **{
                name: torch.compile(getattr(eager, name), mode="default", dynamic=False, fullgraph=True)
                for name in cls.__dataclass_fields__
            }
        )


# --- the fused weights -------------------------------------------------------------------------------


def gemma_layers(gemma: GemmaModel) -> list[GemmaDecoderLayer]:
    return [cast(GemmaDecoderLayer, layer) for layer in gemma.layers]


def siglip_layers(vision: SiglipVisionModel) -> list[SiglipEncoderLayer]:
    return [cast(SiglipEncoderLayer, layer) for layer in vision.vision_model.encoder.layers]


def fuse_rows(linears: Sequence[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The linears' weights (and biases) stacked along the output rows into one tensor; each linear's
    weight becomes a view of its rows, so one GEMM computes all of them and nothing is held twice."""
    weight = torch.cat([lin.weight.detach() for lin in linears], 0)
    has_bias = [lin.bias is not None for lin in linears]
    if any(has_bias) and not all(has_bias):
        raise ValueError("fuse_rows: either every linear has a bias or none")
    bias = (
        torch.cat([lin.bias.detach() for lin in linears if lin.bias is not None], 0)
        if all(has_bias)
        else None
    )
    start = 0
    for lin in linears:
        rows = slice(start, start + lin.out_features)
        lin.weight = nn.Parameter(weight[rows], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[rows], requires_grad=False)
        start += lin.out_features
    return weight, bias


def _shares(view: torch.Tensor, fused: torch.Tensor) -> bool:
    return view.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()


@dataclass
class FusedGemma:
    """One Gemma stack's fused projections; ``ada`` holds every adaptive norm's ``dense`` (the
    layers' two each, then the final norm's), for the action expert."""

    qkv: list[torch.Tensor]
    gate_up: list[torch.Tensor]
    ada: tuple[torch.Tensor, torch.Tensor | None] | None

    @classmethod
    def of(cls, gemma: GemmaModel) -> FusedGemma:
        qkv = [
            fuse_rows([a.q_proj, a.k_proj, a.v_proj])[0]
            for a in (layer.self_attn for layer in gemma_layers(gemma))
        ]
        gate_up = [fuse_rows([layer.mlp.gate_proj, layer.mlp.up_proj])[0] for layer in gemma_layers(gemma)]
        norms = [
            n
            for layer in gemma_layers(gemma)
            for n in (layer.input_layernorm, layer.post_attention_layernorm)
        ]
        denses = [n.dense for n in (*norms, gemma.norm) if n.dense is not None]
        ada = fuse_rows(denses) if denses else None
        return cls(qkv, gate_up, ada)

    def intact(self, gemma: GemmaModel) -> bool:
        layers_intact = all(
            _shares(layer.self_attn.q_proj.weight, self.qkv[i])
            and _shares(layer.mlp.gate_proj.weight, self.gate_up[i])
            for i, layer in enumerate(gemma_layers(gemma))
        )
        dense = gemma.norm.dense
        return layers_intact and (
            self.ada is None or (dense is not None and _shares(dense.weight, self.ada[0]))
        )


@dataclass
class FusedSiglip:
    qkv: list[tuple[torch.Tensor, torch.Tensor | None]]

    @classmethod
    def of(cls, vision: SiglipVisionModel) -> FusedSiglip:
        layers = siglip_layers(vision)
        return cls(
            [fuse_rows([la.self_attn.q_proj, la.self_attn.k_proj, la.self_attn.v_proj]) for la in layers]
        )

    def intact(self, vision: SiglipVisionModel) -> bool:
        layers = siglip_layers(vision)
        return all(_shares(la.self_attn.q_proj.weight, self.qkv[i][0]) for i, la in enumerate(layers))


def fusable(model: Pi05Model) -> str | None:
    """None when the fused path computes what the modules compute; else why not (a forward hook,
    LoRA's, adds to a projection's output, which a fused GEMM would skip)."""
    hooked = [n for n, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]
    if hooked:
        return f"forward hooks on {hooked[:3]} (LoRA adapters): their output is not in the fused GEMMs"
    return None


class FusedPi05:
    """The actor's π0.5 network on fused weights: images, prefix and the flow chain, each written
    with the fewest kernels the structure allows. Holds the fused tensors (the modules' weights are
    views of them) and no reference to the policy."""

    def __init__(self, model: Pi05Model, compiled: bool) -> None:
        if (why := fusable(model)) is not None:
            raise ValueError(f"π0.5's fused path cannot run this model: {why}")
        self.model = model
        self.kernels = Kernels.compiled() if compiled else Kernels()
        self.compiled = compiled
        self.vision = FusedSiglip.of(model.vlm.vision_tower)
        self.vlm = FusedGemma.of(model.vlm.language_model)
        self.expert = FusedGemma.of(model.expert)

    def intact(self) -> bool:
        """The modules' weights are still views of the fused tensors (a ``.to()`` of the model
        after fusing would have made them copies: the fused path would run stale weights)."""
        m = self.model
        return (
            self.vision.intact(m.vlm.vision_tower)
            and self.vlm.intact(m.vlm.language_model)
            and (self.expert.intact(m.expert))
        )

    # --- images --------------------------------------------------------------------------------------

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [B, C, 3, H, W] -> image tokens [B, C * image_tokens, width] (as
        ``Pi05Model.embed_images`` of the eager path's pixels)."""
        k = self.kernels
        b, c = images.shape[:2]
        vm = self.model.vlm.vision_tower.vision_model
        x = vm.embeddings(k.image_pixels(images.flatten(0, 1)))
        layers = siglip_layers(self.model.vlm.vision_tower)
        h = F.layer_norm(
            x, x.shape[-1:], layers[0].layer_norm1.weight, layers[0].layer_norm1.bias, LAYER_NORM_EPS
        )
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            n, w = h.shape[1:]
            qkv = F.linear(h, *self.vision.qkv[i]).view(h.shape[0], n, 3 * attn.num_heads, -1).transpose(1, 2)
            q, kk, v = qkv.split(attn.num_heads, 1)
            out = F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(h.shape[0], n, w)
            x, h = k.add_layer_norm(x, attn.out_proj(out), layer.layer_norm2.weight, layer.layer_norm2.bias)
            y = layer.mlp.fc2(F.gelu(layer.mlp.fc1(h), approximate="tanh"))
            nxt = layers[i + 1].layer_norm1 if i + 1 < len(layers) else vm.post_layernorm
            x, h = k.add_layer_norm(x, y, nxt.weight, nxt.bias)
        tokens = self.model.vlm.multi_modal_projector.linear(h)
        return tokens.view(b, c * tokens.shape[1], -1)

    # --- the Gemma stacks ----------------------------------------------------------------------------

    def _layers(
        self,
        gemma: GemmaModel,
        fused: FusedGemma,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        kv_cache: Sequence[tuple[torch.Tensor, torch.Tensor]] | None,
        mods: torch.Tensor | None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """GemmaModel.forward on the fused weights: (final-normed hidden states, per-layer keys and
        values of these tokens). ``kv_cache``: per layer, key and value buffers [B, kv_heads, L + n,
        d] holding the prefix's L in front; these n tokens' are written behind them and attention
        runs over the whole buffer (None: the tokens attend to each other only). ``mods``: the
        expert's [1, norms * 3 * width] scale/shift/gate of every adaptive norm for this step (None
        for the VLM's plain norms)."""
        k = self.kernels
        width = x.shape[-1]
        norms = [
            n
            for layer in gemma_layers(gemma)
            for n in (layer.input_layernorm, layer.post_attention_layernorm)
        ]
        norms.append(gemma.norm)

        def norm(
            j: int, x: torch.Tensor, y: torch.Tensor | None, gate: torch.Tensor | None
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
            """x plus ``y`` (gated, when there is a ``y``), then norm j: (x, normed, norm j's gate)."""
            if mods is None:
                if y is None:
                    return x, k.rms_norm(x, norms[j].weight), None
                return (*k.add_rms_norm(x, y, norms[j].weight), None)
            scale, shift, next_gate = mods[:, None, 3 * width * j : 3 * width * (j + 1)].chunk(3, dim=-1)
            if y is None:
                return x, k.ada_rms_norm(x, scale, shift), next_gate
            assert gate is not None
            return (*k.add_ada_rms_norm(x, y, gate, scale, shift), next_gate)

        kvs: list[tuple[torch.Tensor, torch.Tensor]] = []
        y: torch.Tensor | None = None
        gate: torch.Tensor | None = None
        attn_mask: torch.Tensor | None = None
        b, n, _ = x.shape
        for i, layer in enumerate(gemma_layers(gemma)):
            attn = layer.self_attn
            x, h, gate = norm(2 * i, x, y, gate)
            qkv = F.linear(h, fused.qkv[i])
            if kv_cache is not None:
                k_all, v_all = kv_cache[i]
                kk, v = k_all[:, :, -n:], v_all[:, :, -n:]
                q = k.rope_qkv_into(qkv, *cos_sin, attn.num_heads, attn.num_kv_heads, kk, v)
            else:
                q, kk, v = k.rope_qkv(qkv, *cos_sin, attn.num_heads, attn.num_kv_heads)
                k_all, v_all = kk, v
            if attn_mask is None:  # cast once for every layer (the eager SDPA path casts per layer)
                attn_mask = mask.to(q.dtype)
            rep = attn.num_heads // attn.num_kv_heads
            out = F.scaled_dot_product_attention(
                q,
                _shared_kv(k_all, rep),
                _shared_kv(v_all, rep),
                attn_mask=attn_mask,
                scale=attn.head_dim**-0.5,
            )
            y = attn.o_proj(out.transpose(1, 2).reshape(b, n, -1))
            x, h, gate = norm(2 * i + 1, x, y, gate)
            y = layer.mlp.down_proj(k.geglu(F.linear(h, fused.gate_up[i])))
            kvs.append((kk, v))
        x, h, _ = norm(len(norms) - 1, x, y, gate)
        return h, kvs

    def prefix(self, x: torch.Tensor, pad: torch.Tensor) -> PrefixCache:
        """``Pi05Model.embed_prefix`` on the fused weights, from ``Pi05Model.prefix_inputs``."""
        lm = self.model.vlm.language_model
        allowed = pad[:, None, :] & pad[:, :, None]
        cos_sin = _rope(torch.cumsum(pad, 1) - 1, lm.head_dim, x.dtype)
        hidden, kv = self._layers(lm, self.vlm, x, cos_sin, additive_mask(allowed), None, None)
        return PrefixCache(kv=kv, pad=pad, hidden=hidden)

    # --- the flow chain ------------------------------------------------------------------------------

    def sample_chain(
        self,
        prefix: PrefixCache,
        noise: torch.Tensor,
        schedule: flow_sde.FlowSDESchedule,
        deterministic: bool,
        step_noise: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``flow_sde.sample_chain`` with the expert's velocity over ``prefix``: (chain [B, K+1, T, D],
        log_prob [B, T, D]), under the caller's autocast. What does not change between steps (the
        mask, the rotary tables, every step's adaptive-norm scale, shift and gate) is computed once,
        before the first step."""
        m, k = self.model, self.kernels
        horizon = noise.shape[1]
        suffix = m.action_in_proj(noise)
        dtype = suffix.dtype  # the expert's compute dtype (bf16 under autocast)
        mask, position_ids = m.suffix_attention(prefix.pad, horizon)
        cos_sin = _rope(position_ids, m.expert.head_dim, dtype)
        times = schedule.times.to(noise.device)
        assert self.expert.ada is not None
        mods = F.linear(m.time_condition(times[:-1]).to(dtype), *self.expert.ada)  # [K, norms * 3 * width]

        # Per layer one key and one value buffer, the prefix's copied in once per chunk; each step
        # writes the chunk's behind them (a cat per layer and step otherwise).
        def with_room(t: torch.Tensor) -> torch.Tensor:
            tail = t.new_empty(*t.shape[:2], horizon, t.shape[3], dtype=dtype)
            return torch.cat([t.to(dtype), tail], 2)

        kv_cache = [(with_room(kk), with_room(v)) for kk, v in prefix.kv]
        stds = schedule.step_stds.to(noise.device)
        x, log_prob = noise, torch.zeros_like(noise)
        chain = [x]
        for i in range(schedule.num_steps):
            if i:
                suffix = m.action_in_proj(x)
            h, _ = self._layers(m.expert, self.expert, suffix, cos_sin, mask, kv_cache, mods[i : i + 1])
            v = m.action_out_proj(h.float()).float()
            if deterministic:
                x = x - schedule.dt * v
            else:
                assert step_noise is not None
                sigma = schedule.sigmas[i : i + 1].to(noise.device)
                x, log_prob = k.sde_step(
                    x, v, times[i : i + 1], sigma, stds[i], schedule.dt, step_noise[i], log_prob
                )
            chain.append(x)
        if deterministic:
            log_prob = torch.full_like(log_prob, float("nan"))
        return torch.stack(chain, dim=1), log_prob
