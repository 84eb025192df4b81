"""A π0.5 checkpoint directory at a tiny size with random weights (tests only): LeRobot's layout,
a word-level tokenizer built with ``tokenizers`` (the PaliGemma one is gated and large), QUANTILES
statistics for a 15-entry state and 7 ee_delta action columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from learner.policies.pi05_checkpoint import Pi05Mapping, write_checkpoint
from learner.policies.pi05_model import TINY_CONFIG, Pi05Model
from pde_contract.messages import STATE_VECTOR_NAMES

TINY = TINY_CONFIG
IMAGE_KEYS = ("observation.images.base_0_rgb", "observation.images.left_wrist_0_rgb")
WORDS = [
    *("Task", "State", "Action", "put", "the", "green", "container", "in", "bowl"),
    *("front", "of", "camera", "carefully", ",", ";", ":"),
]


def tiny_tokenizer_json() -> str:
    vocab = {"<pad>": 0, "<unk>": 1, "<bos>": 2}
    for w in [*WORDS, *(str(i) for i in range(0, 256, 1))]:
        if w not in vocab and len(vocab) < TINY.vocab_size:
            vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return tok.to_str()


def state_stats() -> dict[str, np.ndarray]:
    q01 = np.full(len(STATE_VECTOR_NAMES), -1.0)
    q99 = np.full(len(STATE_VECTOR_NAMES), 1.0)
    q01[:3], q99[:3] = [0.2, -0.3, 0.0], [0.7, 0.3, 0.6]  # ee position box (m)
    q01[7], q99[7] = 0.0, 0.08  # gripper width (m)
    q01[8:], q99[8:] = -2.8, 2.8  # joints (rad)
    return {"q01": q01, "q99": q99}


def action_stats() -> dict[str, np.ndarray]:
    q01 = np.array([-0.02, -0.02, -0.02, -0.1, -0.1, -0.1, 0.0])
    q99 = np.array([0.02, 0.02, 0.02, 0.1, 0.1, 0.1, 0.08])
    return {"q01": q01, "q99": q99}


def _random_model(seed: int) -> Pi05Model:
    torch.manual_seed(seed)
    model = Pi05Model(TINY)
    with torch.no_grad():
        for p in model.parameters():  # LeRobot zero-initialises the adaRMS; random exercises it
            p.normal_(0.0, 0.1)
    return model


def make_tiny_checkpoint(directory: Path, seed: int = 0, mapping: Pi05Mapping | None = None) -> Path:
    return write_checkpoint(
        directory,
        _random_model(seed),
        IMAGE_KEYS,
        state_stats(),
        action_stats(),
        tiny_tokenizer_json(),
        mapping,
    )


# A DROID-like LeRobot dataset's action names: 7 joint positions and the gripper.
JOINT_ACTION_NAMES = [*(f"joint_{i}.pos" for i in range(1, 8)), "gripper.pos"]


def make_joint_checkpoint(directory: Path, config: dict[str, Any] | None = None, seed: int = 0) -> Path:
    """A checkpoint whose state is 7 joints + gripper and whose 8 action columns are joint targets
    and gripper width (the defaults map it to ``joint_abs``); ``config``: fields added to config.json."""
    q01 = np.array([-2.8] * 7 + [0.0])
    q99 = np.array([2.8] * 7 + [0.08])
    act = {"q01": np.array([-0.1] * 7 + [0.0]), "q99": np.array([0.1] * 7 + [0.08])}
    path = write_checkpoint(
        directory, _random_model(seed), IMAGE_KEYS, {"q01": q01, "q99": q99}, act, tiny_tokenizer_json()
    )
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(raw | (config or {})))
    return path
