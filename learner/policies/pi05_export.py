"""A trained π0.5 policy as a LeRobot 0.6.1 checkpoint directory (``pde learner export-policy
--format lerobot``): what ``PI05Policy.from_pretrained(DIR)`` and
``PolicyProcessorPipeline.from_pretrained(DIR, config_filename="policy_preprocessor.json")`` /
``"policy_postprocessor.json"`` read, written from LeRobot 0.6.1's sources:

- ``config.json``: ``type: pi05`` and only fields ``PI05Config`` has (LeRobot refuses others), with
  ``input_features`` (the image inputs and ``observation.state``), ``output_features``,
  ``normalization_mapping``, the relative-action fields and ``device``;
- ``model.safetensors``: every key of LeRobot's ``PI05Policy.state_dict()``, loaded strictly there
  (a missing key makes LeRobot print a warning and keep random weights): ours under ``model.``,
  LoRA adapters merged into their layers, the VLM's tied ``lm_head`` (the token embedding) and the
  expert's unused one (zeros);
- ``policy_preprocessor.json`` with LeRobot's π0.5 steps and their configs
  (rename, batch, relative actions, normaliser, state-to-prompt, tokenizer, device: the one the
  policy runs on, as LeRobot writes ``config.device``; a ``cuda`` pipeline does not load on a
  machine without CUDA) and its
  statistics file ``policy_preprocessor_step_3_normalizer_processor.safetensors``;
  ``policy_postprocessor.json`` (unnormaliser, absolute actions, device) and
  ``policy_postprocessor_step_0_unnormalizer_processor.safetensors``;
- ours beside them, which LeRobot does not read: ``tokenizer.json`` and ``pde_pi05.json``, so the
  directory is also an ``--init DIR`` here.

The value head stays behind (LeRobot's π0.5 has none). LeRobot builds only its own sizes (SigLIP
So400m, a 257152-token vocabulary, the two Gemma variants): a smaller test model's two size fields
LeRobot has no name for go to ``pde_pi05.json`` (``model_sizes``), so ``config.json`` stays one
LeRobot decodes at any size (bench/check_pi05_lerobot.py gives LeRobot the tiny sizes to build).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import save_file

from learner.policies.pi05 import LoRA, Pi05Policy
from learner.policies.pi05_checkpoint import (
    ACTION_NAMES,
    MAPPING_FILE,
    MODEL_SIZES_KEY,
    PREPROCESSOR_FILE,
    SIZE_FIELDS,
    TIED_LM_HEAD_KEY,
    WEIGHTS_FILE,
    Pi05CheckpointError,
)
from learner.policies.pi05_model import Pi05Config

POSTPROCESSOR_FILE = "policy_postprocessor.json"
# LeRobot's state files: "<pipeline>_step_<index>_<registry name>.safetensors".
NORMALIZER_FILE = "policy_preprocessor_step_3_normalizer_processor.safetensors"
UNNORMALIZER_FILE = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
PALIGEMMA_TOKENIZER = "google/paligemma-3b-pt-224"  # hard-coded in LeRobot's processor_pi05.py
EXPERT_LM_HEAD_KEY = "paligemma_with_expert.gemma_expert.lm_head.weight"
DEVICES = ("cuda", "cpu")


def model_sizes(cfg: Pi05Config) -> dict[str, Any]:
    """Our size fields that differ from what LeRobot fixes (pde_pi05.json ``model_sizes``)."""
    raw = cfg.to_json_dict()
    return {name: raw[name] for name, lerobot_value in SIZE_FIELDS.items() if raw[name] != lerobot_value}


def lerobot_config(policy: Pi05Policy, device: str = "cuda") -> dict[str, Any]:
    """config.json: LeRobot's PI05Config fields for this policy (``device``: where it runs)."""
    cfg: Pi05Config = policy.config
    raw = {k: v for k, v in cfg.to_json_dict().items() if k not in SIZE_FIELDS}
    stats = policy.stats
    names = ACTION_NAMES[policy.action_space]
    excluded = [n for n, rel in zip(names, policy.relative, strict=False) if not rel]
    size = [3, cfg.image_resolution_px, cfg.image_resolution_px]
    return raw | {
        "n_obs_steps": 1,
        "n_action_steps": cfg.n_action_steps or cfg.chunk_size,
        "input_features": {
            **{k: {"type": "VISUAL", "shape": size} for k in policy.image_keys},
            "observation.state": {"type": "STATE", "shape": [stats["state"].dim]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [policy.action_dim]}},
        "normalization_mapping": {
            "VISUAL": "IDENTITY",
            "STATE": stats["state"].mode,
            "ACTION": stats["action"].mode,
        },
        "use_relative_actions": any(policy.relative),
        "relative_exclude_joints": excluded if any(policy.relative) else ["gripper"],
        "action_feature_names": list(names),
        "device": device,
    }


def lerobot_weights(policy: Pi05Policy) -> dict[str, torch.Tensor]:
    """model.safetensors: LeRobot's PI05Policy keys, LoRA merged (W + alpha/r B A)."""
    weights = {k: v.detach().float().cpu().clone() for k, v in policy.model.state_dict().items()}
    for name, adapter in policy.lora.items():
        assert isinstance(adapter, LoRA)
        weights[f"{name.replace('__', '.')}.weight"] += adapter.delta_weight().detach().float().cpu()
    embed = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
    weights[TIED_LM_HEAD_KEY] = weights[embed].clone()
    expert_width = policy.config.expert_dims.width
    weights[EXPERT_LM_HEAD_KEY] = torch.zeros(policy.config.vocab_size, expert_width)
    return {f"model.{k}": v.contiguous() for k, v in weights.items()}


def _normalizer_config(features: dict[str, Any], norm_map: dict[str, str]) -> dict[str, Any]:
    return {"eps": 1e-8, "features": features, "norm_map": norm_map}


def lerobot_processors(policy: Pi05Policy, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """policy_preprocessor.json and policy_postprocessor.json as LeRobot 0.6.1's
    ``make_pi05_pre_post_processors`` builds and ``save_pretrained`` writes them."""
    relative = {
        "enabled": config["use_relative_actions"],
        "exclude_joints": config["relative_exclude_joints"],
        "action_names": config["action_feature_names"],
    }
    norm_map = config["normalization_mapping"]
    features = {**config["input_features"], **config["output_features"]}
    pre = [
        {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
        {"registry_name": "to_batch_processor", "config": {}},
        {"registry_name": "relative_actions_processor", "config": relative},
        {
            "registry_name": "normalizer_processor",
            "config": _normalizer_config(features, norm_map),
            "state_file": NORMALIZER_FILE,
        },
        {"registry_name": "pi05_prepare_state_tokenizer_processor_step", "config": {}},
        {
            "registry_name": "tokenizer_processor",
            "config": {
                "max_length": policy.config.tokenizer_max_length,
                "task_key": "task",
                "padding_side": "right",
                "padding": "max_length",
                "truncation": True,
                "tokenizer_name": PALIGEMMA_TOKENIZER,
            },
        },
        {"registry_name": "device_processor", "config": {"device": config["device"], "float_dtype": None}},
    ]
    post = [
        {
            "registry_name": "unnormalizer_processor",
            "config": _normalizer_config(config["output_features"], norm_map),
            "state_file": UNNORMALIZER_FILE,
        },
        {"registry_name": "absolute_actions_processor", "config": {"enabled": relative["enabled"]}},
        {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
    ]
    return {"name": "policy_preprocessor", "steps": pre}, {"name": "policy_postprocessor", "steps": post}


def default_lerobot_device() -> str:
    """cuda when this machine has it, else cpu: LeRobot refuses a cuda config on a CPU machine."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def export_lerobot(policy: Pi05Policy, directory: str | Path, device: str | None = None) -> Path:
    """Write ``policy`` as a LeRobot 0.6.1 π0.5 directory (module docstring) whose preprocessor
    puts the batch on ``device`` (None: ``default_lerobot_device``); Pi05CheckpointError for what
    LeRobot's π0.5 cannot express."""
    device = device or default_lerobot_device()
    if device not in DEVICES:
        raise Pi05CheckpointError(f"device {device!r}: LeRobot's pipeline runs π0.5 on one of {DEVICES}")
    if not policy.statistics_known:
        raise Pi05CheckpointError(
            "the policy has no normalisation statistics: export a policy after SFT (which computes them)"
        )
    if not policy.state_in_prompt:
        raise Pi05CheckpointError(
            "the policy prompts without the state (openpi's discrete_state_input=False); LeRobot's π0.5 "
            "always writes the state into the prompt, so it would not run this policy as it was trained"
        )
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = lerobot_config(policy, device)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    save_file(lerobot_weights(policy), str(path / WEIGHTS_FILE))
    pre, post = lerobot_processors(policy, config)
    (path / PREPROCESSOR_FILE).write_text(json.dumps(pre, indent=2))
    (path / POSTPROCESSOR_FILE).write_text(json.dumps(post, indent=2))
    state = {f"observation.state.{k}": v for k, v in policy.stats["state"].to_stats().items()}
    action = {f"action.{k}": v for k, v in policy.stats["action"].to_stats().items()}
    as32 = {k: np.asarray(v, np.float32) for k, v in (state | action).items()}
    save_numpy(as32, str(path / NORMALIZER_FILE))
    save_numpy({k: v for k, v in as32.items() if k.startswith("action.")}, str(path / UNNORMALIZER_FILE))
    (path / "tokenizer.json").write_text(policy.tokenizer_json)
    mapping = policy.mapping.to_file_dict(policy.image_keys)
    sizes = model_sizes(policy.config)
    mapping |= {MODEL_SIZES_KEY: sizes} if sizes else {}
    (path / MAPPING_FILE).write_text(json.dumps(mapping, indent=1))
    return path
