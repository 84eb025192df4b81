"""Camera frames into the policy: letterboxed to a square, the aspect ratio kept."""

from __future__ import annotations

import cv2
import numpy as np

from learner.policies.observations import decode_frame, letterbox


def test_a_4_by_3_frame_is_letterboxed_not_squashed() -> None:
    bgr = np.zeros((480, 640, 3), np.uint8)
    cv2.circle(bgr, (320, 240), 120, (255, 255, 255), -1)  # a round object in the middle
    ok, jpeg = cv2.imencode(".png", bgr)  # lossless: the bars must be exactly black
    assert ok
    rgb = decode_frame(jpeg.tobytes(), 64)
    assert rgb.shape == (3, 64, 64)
    # 640x480 -> 64x48, centred: 8 black rows above and below.
    assert rgb[:, :8].max() == 0 and rgb[:, 56:].max() == 0 and rgb[:, 8:56].max() > 0
    # The circle stays round: as wide as it is tall.
    mask = rgb[0] > 127
    rows, cols = np.nonzero(mask)
    assert abs((rows.max() - rows.min()) - (cols.max() - cols.min())) <= 1


def test_square_and_portrait_frames() -> None:
    square = np.full((224, 224, 3), 7, np.uint8)
    assert letterbox(square, 224) is square
    assert letterbox(square, 32).shape == (32, 32, 3) and letterbox(square, 32).min() == 7
    portrait = np.full((100, 50, 3), 9, np.uint8)
    out = letterbox(portrait, 20)
    assert out.shape == (20, 20, 3)
    assert out[:, :5].max() == 0 and out[:, 15:].max() == 0 and out[:, 5:15].min() == 9
