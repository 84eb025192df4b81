"""Frame sampling and fitting for VLM requests."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.frames import FramesError, data_url, episode_jpegs, fit_jpeg, rollout_frames, sample_indices
from tests.supervisor.episodes import jpeg_frame, make_episode


@given(st.integers(1, 2000), st.integers(1, 16))
def test_sample_indices_spread_and_keep_the_last(n: int, k: int) -> None:
    idx = sample_indices(n, k)
    assert len(idx) == min(n, k)
    assert idx == sorted(set(idx)) and idx[-1] == n - 1
    assert k == 1 or idx[0] == 0


def test_no_frames() -> None:
    assert sample_indices(0, 8) == []


def test_rollout_frames_end_on_the_last_frame() -> None:
    ep = make_episode(n_chunks=37)
    frames = rollout_frames(ep, "external", 8, 448, 85)
    assert len(frames) == 8
    assert frames[-1] == episode_jpegs(ep, "external")[-1]  # small frames are passed through untouched
    assert frames[0] == episode_jpegs(ep, "external")[0]


def test_large_frames_are_downscaled() -> None:
    big = jpeg_frame(3, 1280, 720)
    small = fit_jpeg(big, 448, 85)
    img = cv2.imdecode(np.frombuffer(small, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape[:2] == (252, 448)
    assert fit_jpeg(jpeg_frame(3, 320, 240), 448, 85) == jpeg_frame(3, 320, 240)


def test_missing_camera_says_which_exist() -> None:
    with pytest.raises(FramesError, match=r"no frames from camera 'top'.*\['external', 'wrist'\]"):
        rollout_frames(make_episode(n_chunks=3), "top", 8, 448, 85)


def test_data_url() -> None:
    assert data_url(b"\xff\xd8abc").startswith("data:image/jpeg;base64,/9hh")
