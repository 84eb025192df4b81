"""Episode videos: one H.264 mp4 per camera, one frame per action chunk (the frame the chunk was
computed from), yuv420p + faststart so Chromium's <video> plays and seeks it (encoded by the one
mp4 writer, ``pde_storage/video.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pde_contract.episodes import EpisodeFile, rows_that_ran
from pde_contract.files import atomic_path
from pde_contract.jpeg import decode_jpeg
from pde_storage.video import VideoEncoding, write_video

# x264 at its default quality, fast; main profile and the index first, for Chromium's <video>
EPISODE_VIDEO = VideoEncoding("libx264", crf=23, preset="veryfast", profile="main", faststart=True)
MAX_FPS = 30.0


def frame_rate_hz(episode: EpisodeFile) -> float:
    """Frames are one per chunk, so the video's rate is the chunk rate (control rate / the rows a
    chunk ran on average: overlapped inference runs fewer than a chunk holds)."""
    if not episode.chunks:
        return 1.0
    rows = max(1.0, float(np.mean([end - first for first, end in map(rows_that_ran, episode.chunks)])))
    return float(min(MAX_FPS, max(0.5, episode.control_rate_hz / rows)))


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
        with atomic_path(paths[name]) as tmp:
            write_video(tmp, frames, fps, EPISODE_VIDEO)
    return paths
