"""Episode videos: one H.264 mp4 per camera, one frame per action chunk (the frame the chunk was
computed from), yuv420p + faststart so Chromium's <video> plays and seeks it."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from pde_contract.episodes import EpisodeFile
from pde_contract.files import atomic_path

VIDEO_CODEC = "libx264"
MAX_FPS = 30.0


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> RGB uint8 [H, W, 3], decoded by PyAV's own MJPEG decoder (no OpenCV here)."""
    ctx = av.CodecContext.create("mjpeg", "r")
    frames = ctx.decode(av.Packet(data))
    if not frames:
        frames = ctx.decode(None)
    if not frames:
        raise ValueError("camera frame is not a decodable JPEG")
    rgb: np.ndarray = frames[0].to_ndarray(format="rgb24")
    return rgb


def frame_rate_hz(episode: EpisodeFile) -> float:
    """Frames are one per chunk, so the video's rate is the chunk rate (control rate / rows)."""
    if not episode.chunks:
        return 1.0
    rows = max(1, int(episode.chunks[0].actions.shape[0]))
    return float(min(MAX_FPS, max(0.5, episode.control_rate_hz / rows)))


def write_video(path: Path, frames: Sequence[np.ndarray], fps: float) -> None:
    """Encode RGB frames to ``path`` atomically (temp file + rename)."""
    if not frames:
        raise ValueError(f"{path.name}: no frames to encode")
    h, w = frames[0].shape[:2]
    # yuv420p needs even sizes; pad by one black row/column rather than rescale.
    ph, pw = h + h % 2, w + w % 2
    rate = Fraction(fps).limit_denominator(1000)
    with (
        atomic_path(path) as tmp,
        av.open(str(tmp), mode="w", format="mp4", options={"movflags": "+faststart"}) as out,
    ):
        stream = out.add_stream(VIDEO_CODEC, rate=rate)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = pw, ph, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23", "profile": "main"}
        for img in frames:
            if img.shape[:2] != (h, w):
                raise ValueError(
                    f"{path.name}: frame size changed from {w}x{h} to {img.shape[1]}x{img.shape[0]}"
                )
            if (ph, pw) != (h, w):
                img = np.pad(img, ((0, ph - h), (0, pw - w), (0, 0)))
            for packet in stream.encode(
                av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            ):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def write_episode_videos(episode: EpisodeFile, out_dir: Path, stem: str) -> dict[str, Path]:
    """One mp4 per camera name found in the episode's observations -> {camera: path}."""
    per_camera: dict[str, list[np.ndarray]] = {}
    for chunk in episode.chunks:
        for cam in chunk.observation.cameras:
            per_camera.setdefault(cam.name, []).append(decode_jpeg(cam.jpeg))
    fps = frame_rate_hz(episode)
    paths: dict[str, Path] = {}
    for name, frames in sorted(per_camera.items()):
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        paths[name] = out_dir / f"{stem}_{safe}.mp4"
        write_video(paths[name], frames, fps)
    return paths
