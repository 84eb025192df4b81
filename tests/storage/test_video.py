"""The one mp4 writer (pde_storage/video.py), with the settings of both of its users."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from pde_storage.media import EPISODE_VIDEO
from pde_storage.video import VideoEncoding, write_video


def _frames(n: int, h: int = 31, w: int = 45) -> list[np.ndarray]:
    out = []
    for i in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        img[:, : 5 * (i + 1)] = (220, 60, 30)
        out.append(img)
    return out


def _decoded(path: Path) -> tuple[list[np.ndarray], list[float], str]:
    with av.open(str(path)) as f:
        s = f.streams.video[0]
        frames = list(f.decode(s))
        return (
            [fr.to_ndarray(format="rgb24") for fr in frames],
            [float(fr.time) for fr in frames],
            s.codec_context.name,
        )


def test_repeats_and_exact_timestamps(tmp_path: Path) -> None:
    lerobot_like = VideoEncoding("libx264", crf=23, gop=2, frame_rate_time_base=True)
    write_video(tmp_path / "r.mp4", _frames(3, 32, 48), 10, lerobot_like, repeats=[2, 1, 3])
    frames, times, codec = _decoded(tmp_path / "r.mp4")
    assert codec == "h264" and len(frames) == 6
    assert times == pytest.approx([i / 10 for i in range(6)], abs=1e-9)
    # the repeated frames are the same picture; the next chunk's picture differs
    assert np.abs(frames[0].astype(int) - frames[1]).mean() < 1.0
    assert np.abs(frames[1].astype(int) - frames[2]).mean() > 5.0


def test_episode_settings_pad_odd_sizes_and_refuse_bad_input(tmp_path: Path) -> None:
    write_video(tmp_path / "e.mp4", _frames(4), 2.0, EPISODE_VIDEO)
    frames, _, codec = _decoded(tmp_path / "e.mp4")
    assert codec == "h264" and len(frames) == 4 and frames[0].shape == (32, 46, 3)
    assert tmp_path.joinpath("e.mp4").read_bytes()[4:8] == b"ftyp"
    with pytest.raises(ValueError, match="frame size changed from 45x31 to 44x31"):
        write_video(tmp_path / "bad.mp4", [*_frames(2), _frames(1, 31, 44)[0]], 2.0, EPISODE_VIDEO)
    with pytest.raises(ValueError, match="2 repeat counts for 3 frames"):
        write_video(tmp_path / "bad.mp4", _frames(3), 2.0, EPISODE_VIDEO, repeats=[1, 1])
    with pytest.raises(ValueError, match="no frames"):
        write_video(tmp_path / "bad.mp4", [], 2.0, EPISODE_VIDEO)


def test_an_episode_video_runs_at_the_rate_its_chunks_ran() -> None:
    """One frame per chunk: 10 Hz over 10-row chunks is 1 fps; chunks that ran 5 rows each
    (overlapped inference) are 2 fps, or the video would play at half speed."""
    from pde_storage.media import frame_rate_hz
    from tests.storage.factories import make_episode_file

    ep = make_episode_file(0, "t", n_chunks=4, rows=10)
    assert frame_rate_hz(ep) == pytest.approx(1.0)
    for chunk in ep.chunks:
        chunk.rows_run = (3, 8)
    assert frame_rate_hz(ep) == pytest.approx(2.0)
