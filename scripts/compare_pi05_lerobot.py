"""The project's π0.5 network against LeRobot's own PI05 (lerobot 0.6.1), same random weights, tiny sizes.

LeRobot's ``PI05Policy`` is built at a tiny size, its weights randomised and written by its own
``save_pretrained``; ``learner.policies.pi05_checkpoint.load_weights`` (what ``--init DIR`` uses)
loads that ``model.safetensors`` into the project's ``Pi05Model``. Both then see the same inputs
(two cameras, the second absent in one row; prompts of different lengths) and the script prints the
largest absolute difference of: the prefix embeddings (SigLIP + projector image tokens, scaled
language embeddings), the VLM's final prefix states and every layer's keys/values, one denoising
step's velocity, the per-element flow-matching loss (LeRobot's joint forward of both streams), and a
10-step Euler chunk sampled from the same noise (LeRobot's ``sample_actions``).

LeRobot needs Python >= 3.12 (this project's development venv is 3.11), so it runs from a separate
venv with lerobot[pi]==0.6.1 (which pins torch < 2.12) and this repository on the path:

    python3.12 -m venv /work/venv312 && /work/venv312/bin/pip install "lerobot[pi]==0.6.1" msgspec
    /work/venv312/bin/python scripts/compare_pi05_lerobot.py [--json OUT]

It exits 1 when any difference exceeds ``--tolerance`` (1e-5). (Not a pytest: the test suite runs
in the 3.11 venv, where it could only skip, and CI fails on skips other than hardware/GPU ones.)

Tiny sizes: LeRobot builds only its two Gemma variants and PaliGemma's default SigLIP So400m, so the
script gives its ``get_gemma_config`` and PaliGemma config tiny sizes (as openpi's ``dummy`` variant)
and sizes the image projector (hard-wired to a 2048-wide Gemma) to the tiny Gemma; every other
module is LeRobot's as it ships. Everything runs in float32 on the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from learner.policies import flow_sde  # noqa: E402
from learner.policies.pi05_checkpoint import load_weights  # noqa: E402
from learner.policies.pi05_model import (  # noqa: E402
    GEMMA_VARIANTS,
    SIGLIP_VARIANTS,
    GemmaDims,
    Pi05Config,
    Pi05Model,
    SiglipDims,
)

# Tiny sizes, shared by both sides. LeRobot hard-wires 8 attention heads and a 4304-wide SigLIP MLP.
VLM = GemmaDims(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=16)
EXPERT = GemmaDims(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=16)
VISION = SiglipDims(width=32, depth=2, num_heads=2, mlp_dim=4304, patch_px=8)
IMAGE_PX, CHUNK, ACTION_DIM, STEPS = 16, 4, 8, 10
COMPARED = (
    "prefix_embeddings",
    "prefix_hidden_valid_tokens",
    "prefix_keys_values_valid_tokens",
    "velocity",
    "flow_matching_loss",
    "sampled_chunk_10_euler_steps",
)


def lerobot_pi05(tmp: Path, seed: int) -> Any:
    """LeRobot's PI05Policy at the tiny sizes, weights random, saved and returned."""
    from lerobot.policies.pi05 import modeling_pi05
    from lerobot.policies.pi05.configuration_pi05 import PI05Config
    from lerobot.policies.pi05.modeling_pi05 import PI05Policy
    from transformers.models.auto import CONFIG_MAPPING

    def gemma_config(variant: str) -> Any:
        dims = {"gemma_2b": VLM, "gemma_300m": EXPERT}[variant]
        return modeling_pi05.GemmaConfig(
            dims.width, dims.depth, dims.mlp_dim, dims.num_heads, dims.num_kv_heads, dims.head_dim
        )

    def paligemma_config(**kwargs: Any) -> Any:
        cfg = CONFIG_MAPPING["paligemma"](**kwargs)
        v = cfg.vision_config
        v.hidden_size, v.num_hidden_layers = VISION.width, VISION.depth
        v.num_attention_heads, v.patch_size = VISION.num_heads, VISION.patch_px
        return cfg

    class TinyConfigs(dict):  # LeRobot reads CONFIG_MAPPING["paligemma"] and ["gemma"]
        def __getitem__(self, key: str) -> Any:
            return paligemma_config if key == "paligemma" else CONFIG_MAPPING[key]

    modeling_pi05.get_gemma_config = gemma_config
    modeling_pi05.CONFIG_MAPPING = TinyConfigs()
    config = PI05Config(
        dtype="float32",
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        max_action_dim=ACTION_DIM,
        max_state_dim=8,
        image_resolution=(IMAGE_PX, IMAGE_PX),
        num_inference_steps=STEPS,
        device="cpu",
    )
    policy = PI05Policy(config)
    pwe = policy.model.paligemma_with_expert
    pwe.paligemma.model.multi_modal_projector.linear = nn.Linear(VISION.width, VLM.width)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():  # LeRobot zero-initialises norms and adaRMS: random exercises them
            p.normal_(0.0, 0.1)
    policy.save_pretrained(tmp)
    return policy.eval()


def ours(weights: Path) -> Pi05Model:
    GEMMA_VARIANTS["compare_vlm"], GEMMA_VARIANTS["compare_expert"] = VLM, EXPERT
    SIGLIP_VARIANTS["compare"] = VISION
    cfg = Pi05Config(
        paligemma_variant="compare_vlm",
        action_expert_variant="compare_expert",
        vision_variant="compare",
        image_resolution_px=IMAGE_PX,
        chunk_size=CHUNK,
        max_state_dim=8,
        max_action_dim=ACTION_DIM,
        num_inference_steps=STEPS,
    )
    model = Pi05Model(cfg)
    load_weights(model, weights)  # the loader `--init DIR` uses: every key covered, none unknown
    return model.eval()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.double() - b.double()).abs().max())


def compare(seed: int = 0) -> dict[str, Any]:
    from lerobot.policies.common.vla_utils import make_att_2d_masks, prepare_attention_masks_4d

    with tempfile.TemporaryDirectory() as tmp:
        lr = lerobot_pi05(Path(tmp), seed)
        model = ours(Path(tmp) / "model.safetensors")
        files = sorted(p.name for p in Path(tmp).iterdir())
    core = lr.model

    g = torch.Generator().manual_seed(seed + 1)
    b, n_cam, n_tok = 2, 2, 12
    images = torch.rand(b, n_cam, 3, IMAGE_PX, IMAGE_PX, generator=g) * 2 - 1
    image_valid = torch.tensor([[True, True], [True, False]])  # row 1: second camera absent
    tokens = torch.randint(0, 257_152, (b, n_tok), generator=g)
    token_valid = torch.arange(n_tok)[None, :] < torch.tensor([[n_tok], [7]])  # row 1: padded prompt
    x_t = torch.randn(b, CHUNK, ACTION_DIM, generator=g)
    t = torch.tensor([0.9, 0.35])
    actions = torch.randn(b, CHUNK, ACTION_DIM, generator=g)
    noise = torch.randn(b, CHUNK, ACTION_DIM, generator=g)
    cams = [images[:, i] for i in range(n_cam)]
    cam_masks = [image_valid[:, i] for i in range(n_cam)]
    out: dict[str, Any] = {"lerobot_files": files, "batch": b, "seed": seed}

    with torch.no_grad():
        # 1. prefix embeddings (before the VLM)
        lr_embs, lr_pad, lr_att = core.embed_prefix(cams, cam_masks, tokens, token_valid)
        lm = model.vlm.language_model
        assert lm.embed_tokens is not None
        img_tokens = model.embed_images(images)
        our_embs = torch.cat([img_tokens, lm.embed_tokens(tokens) * math.sqrt(VLM.width)], dim=1)
        out["prefix_embeddings"] = max_diff(our_embs, lr_embs)

        # 2. the VLM over the prefix: final states (valid tokens) and every layer's keys/values
        prefix = model.embed_prefix(img_tokens, image_valid, tokens, token_valid)
        mask4d = prepare_attention_masks_4d(make_att_2d_masks(lr_pad, lr_att))
        core.paligemma_with_expert.paligemma.model.language_model.config._attn_implementation = "eager"
        (lr_hidden, _), cache = core.paligemma_with_expert.forward(
            attention_mask=mask4d,
            position_ids=torch.cumsum(lr_pad, 1) - 1,
            past_key_values=None,
            inputs_embeds=[lr_embs, None],
            use_cache=True,
        )
        valid = prefix.pad
        out["prefix_hidden_valid_tokens"] = max_diff(prefix.hidden[valid], lr_hidden[valid])
        kv = 0.0
        for i, (k, v) in enumerate(prefix.kv):
            lk, lv = cache.layers[i].keys, cache.layers[i].values
            m = valid[:, None, :, None].expand_as(k)
            kv = max(kv, max_diff(k[m], lk[m]), max_diff(v[m], lv[m]))
        out["prefix_keys_values_valid_tokens"] = kv

        # 3. one denoising step's velocity over the prefix cache
        lr_v = core.denoise_step(lr_pad, cache, x_t, t)
        our_v = model.velocity(prefix, x_t, t)
        out["velocity"] = max_diff(our_v, lr_v)
        out["velocity_abs_max"] = float(lr_v.abs().max())

        # 4. flow-matching loss per element: LeRobot runs both streams jointly through every layer
        lr_loss = core.forward(cams, cam_masks, tokens, token_valid, actions, noise, t)
        our_loss = model.flow_matching_loss(prefix, actions, noise, t)
        out["flow_matching_loss"] = max_diff(our_loss, lr_loss)

        # 5. a chunk sampled from the same noise: LeRobot's 10 Euler steps, ours the deterministic
        # flow-SDE chain with 10 steps (its Euler ODE)
        lr_chunk = core.sample_actions(cams, cam_masks, tokens, token_valid, noise=noise, num_steps=STEPS)

        def velocity(x: torch.Tensor, tt: torch.Tensor) -> torch.Tensor:
            k = x.shape[1]
            v = model.velocity(prefix.repeat_interleave(k), x.reshape(b * k, *x.shape[2:]), tt.repeat(b))
            return v.view(b, k, *x.shape[2:])

        schedule = flow_sde.make_schedule(STEPS, 0.5)  # the noise level is unused when deterministic
        chain, _ = flow_sde.sample_chain(velocity, noise, schedule, deterministic=True)
        out["sampled_chunk_10_euler_steps"] = max_diff(chain[:, -1], lr_chunk)
        out["sampled_chunk_abs_max"] = float(lr_chunk.abs().max())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="largest accepted difference")
    args = ap.parse_args(argv)
    import lerobot
    import transformers

    result = {
        "lerobot": lerobot.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        **compare(args.seed),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    worse = [k for k in COMPARED if result[k] > args.tolerance]
    if worse or result["velocity_abs_max"] < 0.1:  # all-zero outputs would compare equal too
        print(f"differs from LeRobot's PI05 beyond {args.tolerance}: {worse}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
