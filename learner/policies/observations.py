"""Observation -> tensors: decode the JPEG camera frames, downscale, and build the state vector."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import torch

from learner.policies.base import ObsBatch
from pde_contract.messages import STATE_VECTOR_NAMES, Observation, state_vector

STATE_DIM = len(STATE_VECTOR_NAMES)


def decode_frame(jpeg: bytes, size_px: int) -> np.ndarray:
    """JPEG -> RGB uint8 [3, size_px, size_px]."""
    bgr = cv2.imdecode(np.frombuffer(jpeg, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError("a camera frame is not a decodable JPEG")
    if bgr.shape[0] != size_px or bgr.shape[1] != size_px:
        bgr = cv2.resize(bgr, (size_px, size_px), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(bgr[:, :, ::-1].transpose(2, 0, 1))


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
