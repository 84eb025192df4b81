"""The π0.5 network written here, at a tiny size: LeRobot 0.6.1's parameter names and shapes, and the
VLM half computing what transformers' PaliGemma computes with the same weights."""

import pytest
import torch
from transformers import PaliGemmaConfig
from transformers import PaliGemmaForConditionalGeneration as HFPaliGemma

from learner.policies.pi05_model import (
    TINY_CONFIG,
    UNUSED_CHECKPOINT_KEYS,
    Pi05Config,
    Pi05Model,
    additive_mask,
)

TINY = TINY_CONFIG

# LeRobot 0.6.1 ``PI05Policy.state_dict()`` keys of one decoder layer of each stream and of the rest,
# read from ``policies/pi_gemma.py`` / ``modeling_pi05.py`` (the VLM's norms are plain Gemma norms,
# the expert's adaptive ones hold only ``dense``); "{i}" is the layer index.
PREFIX = "model.paligemma_with_expert."
GEMMA_LAYER_KEYS = [  # both streams' attention and MLP (no biases)
    *(f"self_attn.{m}_proj.weight" for m in "qkvo"),
    *(f"mlp.{m}_proj.weight" for m in ("gate", "up", "down")),
]
LEROBOT_LAYER_KEYS = {
    "paligemma.model.language_model.layers.{i}.": [
        *GEMMA_LAYER_KEYS,
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
    ],
    "gemma_expert.model.layers.{i}.": [
        *GEMMA_LAYER_KEYS,
        *(
            f"{n}.dense.{p}"
            for n in ("input_layernorm", "post_attention_layernorm")
            for p in ("weight", "bias")
        ),
    ],
    "paligemma.model.vision_tower.vision_model.encoder.layers.{i}.": [
        f"{m}.{p}"
        for m in (
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.q_proj",
            "self_attn.out_proj",
            "layer_norm1",
            "layer_norm2",
            "mlp.fc1",
            "mlp.fc2",
        )
        for p in ("weight", "bias")
    ],
}
LEROBOT_OTHER_KEYS = [
    PREFIX + "paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.weight",
    PREFIX + "paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.bias",
    PREFIX + "paligemma.model.vision_tower.vision_model.embeddings.position_embedding.weight",
    PREFIX + "paligemma.model.vision_tower.vision_model.post_layernorm.weight",
    PREFIX + "paligemma.model.vision_tower.vision_model.post_layernorm.bias",
    PREFIX + "paligemma.model.multi_modal_projector.linear.weight",
    PREFIX + "paligemma.model.multi_modal_projector.linear.bias",
    PREFIX + "paligemma.model.language_model.embed_tokens.weight",
    PREFIX + "paligemma.model.language_model.norm.weight",
    PREFIX + "gemma_expert.model.norm.dense.weight",
    PREFIX + "gemma_expert.model.norm.dense.bias",
    *(
        f"model.{m}.{p}"
        for m in ("action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out")
        for p in ("weight", "bias")
    ),
]


def _lerobot_keys(cfg: Pi05Config) -> set[str]:
    depth = {"paligemma.model.language_model": cfg.vlm_dims.depth, "gemma_expert": cfg.expert_dims.depth}
    keys = set(LEROBOT_OTHER_KEYS)
    for stem, names in LEROBOT_LAYER_KEYS.items():
        n = (
            cfg.vision_dims.depth
            if "vision" in stem
            else depth["gemma_expert" if "expert" in stem else "paligemma.model.language_model"]
        )
        keys |= {PREFIX + stem.format(i=i) + name for i in range(n) for name in names}
    return keys


def _wrapped(model: Pi05Model) -> dict[str, torch.Tensor]:
    return {f"model.{k}": v for k, v in model.state_dict().items()}


def test_parameter_names_are_lerobot_0_6_1s():
    model = Pi05Model(TINY)
    assert set(_wrapped(model)) == _lerobot_keys(TINY)
    assert not set(UNUSED_CHECKPOINT_KEYS) & set(_wrapped(model))


def test_full_size_shapes_match_lerobot_variants():
    """The shapes a gemma_2b + gemma_300m checkpoint holds, without allocating 3B parameters."""
    with torch.device("meta"):
        model = Pi05Model(Pi05Config())
    sd = _wrapped(model)
    assert sd[PREFIX + "paligemma.model.language_model.embed_tokens.weight"].shape == (257152, 2048)
    assert sd[PREFIX + "paligemma.model.language_model.layers.17.self_attn.k_proj.weight"].shape == (
        256,
        2048,
    )
    assert sd[PREFIX + "paligemma.model.language_model.layers.0.mlp.gate_proj.weight"].shape == (16384, 2048)
    assert sd[PREFIX + "gemma_expert.model.layers.0.self_attn.q_proj.weight"].shape == (2048, 1024)
    assert sd[PREFIX + "gemma_expert.model.layers.0.input_layernorm.dense.weight"].shape == (3072, 1024)
    assert sd[
        PREFIX + "paligemma.model.vision_tower.vision_model.embeddings.position_embedding.weight"
    ].shape == (256, 1152)
    assert sd[
        PREFIX + "paligemma.model.vision_tower.vision_model.encoder.layers.26.mlp.fc1.weight"
    ].shape == (4304, 1152)
    assert sd[PREFIX + "paligemma.model.multi_modal_projector.linear.weight"].shape == (2048, 1152)
    assert sd["model.action_in_proj.weight"].shape == (1024, 32)
    assert sd["model.time_mlp_in.weight"].shape == (1024, 1024)
    n_params = sum(p.numel() for p in model.parameters())
    assert 3.0e9 < n_params < 3.7e9  # π0.5 is "3B" (2B PaliGemma text + 0.4B SigLIP + 0.3B expert)


def _hf_twin(model: Pi05Model) -> HFPaliGemma:
    """transformers' PaliGemma at TINY's size holding ``model``'s VLM weights."""
    vlm, vis = TINY.vlm_dims, TINY.vision_dims
    cfg = PaliGemmaConfig(
        vision_config={
            "hidden_size": vis.width,
            "intermediate_size": vis.mlp_dim,
            "num_hidden_layers": vis.depth,
            "num_attention_heads": vis.num_heads,
            "patch_size": vis.patch_px,
            "image_size": TINY.image_resolution_px,
            "vision_use_head": False,
        },
        text_config={
            "hidden_size": vlm.width,
            "intermediate_size": vlm.mlp_dim,
            "num_hidden_layers": vlm.depth,
            "num_attention_heads": vlm.num_heads,
            "num_key_value_heads": vlm.num_kv_heads,
            "head_dim": vlm.head_dim,
            "vocab_size": TINY.vocab_size,
            "hidden_activation": "gelu_pytorch_tanh",
        },
        projection_dim=vlm.width,
        vocab_size=TINY.vocab_size,
        image_token_index=TINY.vocab_size - 1,
    )
    hf = HFPaliGemma(cfg).eval()
    # transformers 5.2x drops SiglipVisionModel's ``vision_model`` level; LeRobot 0.6.1 (transformers
    # 5.4-5.5) and the published checkpoints have it.
    ours = {
        k.removeprefix("paligemma_with_expert.paligemma.").replace(
            "vision_tower.vision_model.", "vision_tower."
        ): v
        for k, v in model.state_dict().items()
    }
    missing, unexpected = hf.load_state_dict(
        {k: v for k, v in ours.items() if k.startswith("model.")}, strict=False
    )
    assert not unexpected
    assert all(k.startswith("lm_head") for k in missing), missing
    return hf


def test_vlm_computes_what_transformers_paligemma_computes():
    torch.manual_seed(0)
    model = Pi05Model(TINY).eval()
    for p in model.parameters():  # norms start at zero; random values exercise them too
        p.data.normal_(0, 0.2)
    hf = _hf_twin(model)
    pixels = torch.rand(2, 3, 16, 16) * 2 - 1
    with torch.no_grad():
        ours = model.embed_images(pixels[:, None])
        theirs = hf.model.get_image_features(pixels).pooler_output
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)

        # PaliGemma's text model attends bidirectionally (``use_bidirectional_attention``), as π0.5's
        # prefix does: ours under a full mask equals transformers' own.
        x = torch.randn(2, 6, TINY.vlm_dims.width)
        pos = torch.arange(6)[None].expand(2, 6)
        full = torch.ones(2, 6, 6, dtype=torch.bool)
        ours_h, _ = model.vlm.language_model(x, pos, additive_mask(full))
        theirs_h = hf.model.language_model(inputs_embeds=x).last_hidden_state
        torch.testing.assert_close(ours_h, theirs_h, atol=1e-5, rtol=1e-5)

        tokens = torch.randint(0, TINY.vocab_size, (2, 5))
        embed = model.vlm.language_model.embed_tokens
        assert embed is not None
        emb = embed(tokens) * TINY.vlm_dims.width**0.5
        torch.testing.assert_close(emb, hf.model.language_model.embed_tokens(tokens))


def _prefix(model: Pi05Model, b: int = 2):
    images = torch.rand(b, 2, 3, 16, 16) * 2 - 1
    tokens = torch.randint(0, TINY.vocab_size, (b, TINY.tokenizer_max_length))
    valid = torch.ones(b, TINY.tokenizer_max_length, dtype=torch.bool)
    valid[:, 7:] = False
    return model.embed_prefix(model.embed_images(images), torch.tensor([[True, False]] * b), tokens, valid)


def test_padding_and_absent_cameras_do_not_change_the_velocity():
    torch.manual_seed(1)
    model = Pi05Model(TINY).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.2)
    x = torch.randn(2, TINY.chunk_size, TINY.max_action_dim)
    t = torch.tensor([0.3, 0.9])
    with torch.no_grad():
        prefix = _prefix(model)
        v = model.velocity(prefix, x, t)
        # Garbage in the masked positions' keys/values must not leak into the expert.
        masked = ~prefix.pad[:, None, :, None]
        prefix.kv = [(k + 100.0 * masked, vv - 50.0 * masked) for k, vv in prefix.kv]
        torch.testing.assert_close(model.velocity(prefix, x, t), v)
    assert v.shape == (2, TINY.chunk_size, TINY.max_action_dim)


def test_flow_matching_loss_trains_and_checkpointing_gives_the_same_gradients():
    torch.manual_seed(2)
    model = Pi05Model(TINY).train()
    actions = torch.randn(2, TINY.chunk_size, TINY.max_action_dim)
    noise, t = torch.randn_like(actions), torch.tensor([0.2, 0.7])

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad()
        torch.manual_seed(3)
        model.flow_matching_loss(_prefix(model), actions, noise, t).mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.set_gradient_checkpointing(True)
    ckpt = grads()
    assert plain.keys() == ckpt.keys()
    assert any("vision_tower" in n for n in plain) and any("gemma_expert" in n for n in plain)
    for n in plain:
        torch.testing.assert_close(ckpt[n], plain[n], atol=1e-6, rtol=1e-5)


def test_config_refuses_unknown_variants_and_mismatched_streams():
    with pytest.raises(ValueError, match="paligemma_variant='gemma_7b' is not a known variant"):
        Pi05Config(paligemma_variant="gemma_7b")
    with pytest.raises(ValueError, match="must share depth"):
        Pi05Config(paligemma_variant="gemma_2b", action_expert_variant="dummy")
    with pytest.raises(ValueError, match="not square"):
        Pi05Config.from_json_dict({"image_resolution": [224, 160]})
    assert Pi05Config.from_json_dict(Pi05Config().to_json_dict()) == Pi05Config()


def _joint_velocity(model: Pi05Model, images, image_valid, tokens, token_valid, x_t, t):
    """LeRobot's training forward written plainly: prefix and suffix tokens through every layer
    together (q/k/v of both streams concatenated, ``make_att_2d_masks`` with att [0..0 | 1 0..0],
    positions cumsum(pad) - 1), as its ``compute_layer_complete`` does."""
    from learner.policies.pi05_model import GemmaDecoderLayer, _apply_rope, _gated, _rope

    lm, ex = model.vlm.language_model, model.expert
    assert lm.embed_tokens is not None
    img = model.embed_images(images)
    prefix = torch.cat([img, lm.embed_tokens(tokens) * lm.embed_tokens.embedding_dim**0.5], 1)
    per_cam = img.shape[1] // image_valid.shape[1]
    pad_p = torch.cat([image_valid.repeat_interleave(per_cam, 1), token_valid], 1)
    suffix = model.action_in_proj(x_t)
    cond = model.time_condition(t)
    n, hz = suffix.shape[:2]
    pad = torch.cat([pad_p, torch.ones(n, hz, dtype=torch.bool)], 1)
    att = torch.cat([torch.zeros_like(pad_p, dtype=torch.long), torch.tensor([[1] + [0] * (hz - 1)] * n)], 1)
    cum = att.cumsum(1)
    allowed = (cum[:, None, :] <= cum[:, :, None]) & pad[:, None, :] & pad[:, :, None]
    mask = additive_mask(allowed)
    cos_sin = _rope(pad.long().cumsum(1) - 1, lm.head_dim, prefix.dtype)
    streams = [prefix, suffix]
    for layer_p, layer_e in zip(lm.layers, ex.layers, strict=True):
        assert isinstance(layer_p, GemmaDecoderLayer) and isinstance(layer_e, GemmaDecoderLayer)
        layers, conds = (layer_p, layer_e), (None, cond)
        qs, ks, vs, gates, hs = [], [], [], [], []
        for layer, x, c in zip(layers, streams, conds, strict=True):
            h, gate = layer.input_layernorm(x, c)
            a = layer.self_attn
            b, m, _ = h.shape
            qs.append(a.q_proj(h).view(b, m, a.num_heads, a.head_dim).transpose(1, 2))
            ks.append(a.k_proj(h).view(b, m, a.num_kv_heads, a.head_dim).transpose(1, 2))
            vs.append(a.v_proj(h).view(b, m, a.num_kv_heads, a.head_dim).transpose(1, 2))
            gates.append(gate)
            hs.append(x)
        q, k, v = (torch.cat(z, 2) for z in (qs, ks, vs))
        q, k = _apply_rope(q, *cos_sin), _apply_rope(k, *cos_sin)
        a0 = layers[0].self_attn
        rep = a0.num_heads // a0.num_kv_heads
        w = torch.softmax(q @ k.repeat_interleave(rep, 1).transpose(2, 3) * a0.head_dim**-0.5 + mask, -1)
        out = (w @ v.repeat_interleave(rep, 1)).transpose(1, 2).reshape(n, pad.shape[1], -1)
        new, start = [], 0
        for layer, x, c, gate in zip(layers, hs, conds, gates, strict=True):
            o = layer.self_attn.o_proj(out[:, start : start + x.shape[1]])
            start += x.shape[1]
            y = _gated(x, o, gate)
            h2, gate2 = layer.post_attention_layernorm(y, c)
            new.append(_gated(y, layer.mlp(h2), gate2))
        streams = new
    return model.action_out_proj(ex.norm(streams[1], cond)[0])


def test_prefix_cache_then_expert_equals_lerobots_joint_forward():
    """Splitting at the prefix (one VLM pass, its keys/values reused by the expert) computes the
    same velocity as running both streams through every layer together."""
    torch.manual_seed(4)
    model = Pi05Model(TINY).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.2)
    images = torch.rand(2, 2, 3, 16, 16) * 2 - 1
    image_valid = torch.tensor([[True, True], [True, False]])
    tokens = torch.randint(0, TINY.vocab_size, (2, TINY.tokenizer_max_length))
    token_valid = torch.ones(2, TINY.tokenizer_max_length, dtype=torch.bool)
    token_valid[0, 9:] = False
    x_t = torch.randn(2, TINY.chunk_size, TINY.max_action_dim)
    t = torch.tensor([0.25, 0.8])
    with torch.no_grad():
        prefix = model.embed_prefix(model.embed_images(images), image_valid, tokens, token_valid)
        ours = model.velocity(prefix, x_t, t)
        joint = _joint_velocity(model, images, image_valid, tokens, token_valid, x_t, t)
    torch.testing.assert_close(ours, joint, atol=1e-5, rtol=1e-5)
