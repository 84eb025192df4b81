"""The one mp4 writer: RGB frames -> H.264 or AV1 in an mp4 container (PyAV), yuv420p.

Its two users differ only in settings: episode videos for the operator page
(``pde_storage/media.py: EPISODE_VIDEO``: x264 veryfast, main profile, faststart so Chromium's
<video> plays and seeks before the whole file arrives) and the LeRobot export
(``pde_storage/lerobot_export.py``: LeRobot's AV1 or H.264, a keyframe every ``gop`` frames, each
chunk's image repeated over its rows)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


@dataclass(frozen=True)
class VideoEncoding:
    """How frames are encoded (the PyAV encoder and the options it is given)."""

    codec: str = "libx264"  # a PyAV encoder name: "libx264", "libsvtav1"
    crf: int = 23  # quality, lower is better (x264's default 23; LeRobot's AV1 30)
    gop: int | None = None  # a keyframe every this many frames; None: the encoder's default
    preset: str | None = None  # the encoder's speed preset ("veryfast"); None: its default
    profile: str | None = None  # "main": what every browser decodes; None: the encoder's choice
    faststart: bool = False  # the index (moov) before the frames: a browser plays while loading
    # the container's time base is 1/fps, so the n-th frame's timestamp is exactly n / fps (LeRobot's
    # loader checks them); False: the muxer picks its own time base, as the episode videos always had
    frame_rate_time_base: bool = False


def write_video(
    path: Path,
    frames: Sequence[np.ndarray],
    fps: float,
    encoding: VideoEncoding,
    *,
    repeats: Sequence[int] | None = None,
) -> None:
    """Encode RGB uint8 frames [H, W, 3] to the mp4 file ``path`` (written in place: callers
    that need atomicity pass a temporary path). Frame ``i`` is shown ``repeats[i]`` times (once
    each without ``repeats``); the n-th shown frame has pts n in a 1/``fps`` time base. Odd sides
    are padded by one black row or column (4:2:0 needs even sizes)."""
    if not frames:
        raise ValueError(f"{path.name}: no frames to encode")
    if repeats is not None and len(repeats) != len(frames):
        raise ValueError(f"{path.name}: {len(repeats)} repeat counts for {len(frames)} frames")
    h, w = frames[0].shape[:2]
    ph, pw = h + h % 2, w + w % 2
    rate = Fraction(fps).limit_denominator(1000)
    options = {"crf": str(encoding.crf)}
    for key, value in (("g", encoding.gop), ("preset", encoding.preset), ("profile", encoding.profile)):
        if value is not None:
            options[key] = str(value)
    if encoding.codec == "libsvtav1":
        # SVT-AV1 prints a banner to stderr for every video unless told to log errors only
        os.environ.setdefault("SVT_LOG", "1")
    container_options = {"movflags": "+faststart"} if encoding.faststart else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w", format="mp4", options=container_options) as out:
        stream = out.add_stream(encoding.codec, rate=rate, options=options)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = pw, ph, "yuv420p"
        if encoding.frame_rate_time_base:
            stream.time_base = 1 / rate
        pts = 0
        for i, img in enumerate(frames):
            if img.shape[:2] != (h, w):
                raise ValueError(
                    f"{path.name}: frame size changed from {w}x{h} to {img.shape[1]}x{img.shape[0]}"
                )
            if (ph, pw) != (h, w):
                img = np.pad(img, ((0, ph - h), (0, pw - w), (0, 0)))
            # converted once, however often it is shown
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24").reformat(
                format="yuv420p"
            )
            for _ in range(1 if repeats is None else int(repeats[i])):
                frame.pts, frame.time_base = pts, 1 / rate
                for packet in stream.encode(frame):
                    out.mux(packet)
                pts += 1
        for packet in stream.encode(None):
            out.mux(packet)
