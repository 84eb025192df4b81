"""Rollout video -> the few JPEG frames a VLM request carries.

The episode file holds one camera frame per action chunk (already JPEG). We sample 8-16 of them
uniformly in time, always keeping the last one (where success or failure shows), and re-encode
only those larger than the request's size limit.
"""

from __future__ import annotations

import base64

import cv2
import numpy as np

from pde_contract.episodes import EpisodeFile
from pde_contract.jpeg import decode_jpeg


class FramesError(ValueError):
    """The episode has no usable frames for the requested camera."""


def sample_indices(n_frames: int, k: int) -> list[int]:
    """``min(k, n_frames)`` increasing indices spread over the rollout, first and last included."""
    if n_frames <= 0:
        return []
    if k <= 1:
        return [n_frames - 1]
    if n_frames <= k:
        return list(range(n_frames))
    # linspace hits 0 and n-1 exactly; rounding keeps them distinct because k <= n.
    return [round(x) for x in np.linspace(0, n_frames - 1, k)]


def episode_jpegs(episode: EpisodeFile, camera: str) -> list[bytes]:
    """Every frame of ``camera`` in the episode, in order."""
    frames: list[bytes] = []
    names: set[str] = set()
    for chunk in episode.chunks:
        for cam in chunk.observation.cameras:
            names.add(cam.name)
            if cam.name == camera:
                frames.append(cam.jpeg)
    if not frames:
        raise FramesError(
            f"episode {episode.episode_id}: no frames from camera {camera!r} "
            f"(has {sorted(names) or 'none'}); "
            "set PDE_SUPERVISOR_CAMERA to one of those"
        )
    return frames


def fit_jpeg(jpeg: bytes, max_side_px: int, quality: int) -> bytes:
    """The frame as is when small enough, else downscaled (area filter) and re-encoded."""
    # The size comes from the JPEG header: small frames are never decoded.
    h, w = _jpeg_size(jpeg)
    if max(h, w) <= max_side_px:
        return jpeg
    img = _decode(jpeg)
    scale = max_side_px / max(h, w)
    img = cv2.resize(img, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise FramesError("could not re-encode a frame as JPEG")
    return buf.tobytes()


def _jpeg_size(jpeg: bytes) -> tuple[int, int]:
    """(height, width) from the first SOF marker; decodes the image if the header is unusual."""
    i = 2
    n = len(jpeg)
    if jpeg[:2] == b"\xff\xd8":
        while i + 9 < n:
            if jpeg[i] != 0xFF:
                break
            marker = jpeg[i + 1]
            seg_len = int.from_bytes(jpeg[i + 2 : i + 4], "big")
            # SOF0..SOF15 except DHT (C4), JPG (C8), DAC (CC) carry the frame size.
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h = int.from_bytes(jpeg[i + 5 : i + 7], "big")
                w = int.from_bytes(jpeg[i + 7 : i + 9], "big")
                return h, w
            i += 2 + seg_len
    img = _decode(jpeg)
    return int(img.shape[0]), int(img.shape[1])


def _decode(jpeg: bytes) -> np.ndarray:
    try:
        return decode_jpeg(jpeg)
    except ValueError as e:
        raise FramesError(str(e)) from None


def rollout_frames(episode: EpisodeFile, camera: str, k: int, max_side_px: int, quality: int) -> list[bytes]:
    """The ``k`` frames of one rollout a request carries (JPEG bytes, temporal order)."""
    frames = episode_jpegs(episode, camera)
    return [fit_jpeg(frames[i], max_side_px, quality) for i in sample_indices(len(frames), k)]


def data_url(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
