"""Observation -> tensors: decode the JPEG camera frames, downscale, and build the state vector."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import torch

from learner.policies.base import ObsBatch
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import STATE_VECTOR_NAMES, Observation, state_vector

STATE_DIM = len(STATE_VECTOR_NAMES)


def letterbox(image: np.ndarray, size_px: int) -> np.ndarray:
    """``image`` (H, W, C) scaled to fit a size_px square with its aspect ratio kept, centred on
    black bars: a 640x480 RealSense frame is not squashed into the square (objects keep their
    shape, as in the square sim frames the policy was trained on)."""
    h, w = image.shape[:2]
    if h == size_px and w == size_px:
        return image
    scale = size_px / max(h, w)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_AREA)
    out = np.zeros((size_px, size_px, *image.shape[2:]), dtype=image.dtype)
    top, left = (size_px - new_h) // 2, (size_px - new_w) // 2
    out[top : top + new_h, left : left + new_w] = resized
    return out


def decode_frame(jpeg: bytes, size_px: int) -> np.ndarray:
    """JPEG -> RGB uint8 [3, size_px, size_px], letterboxed (``letterbox``)."""
    rgb = letterbox(decode_jpeg(jpeg), size_px)
    return np.ascontiguousarray(rgb.transpose(2, 0, 1))


def preprocess(observations: Sequence[Observation], cameras: Sequence[str], size_px: int) -> ObsBatch:
    images = np.zeros((len(observations), len(cameras), 3, size_px, size_px), dtype=np.uint8)
    states = np.zeros((len(observations), STATE_DIM), dtype=np.float32)
    for i, obs in enumerate(observations):
        frames = {f.name: f for f in obs.cameras}
        for j, cam in enumerate(cameras):
            if cam not in frames:
                raise ValueError(
                    f"observation {obs.seq} has cameras {sorted(frames)}, the policy needs {list(cameras)}"
                )
            images[i, j] = decode_frame(frames[cam].jpeg, size_px)
        states[i] = state_vector(obs.state)
    return ObsBatch(images=torch.from_numpy(images), state=torch.from_numpy(states))
