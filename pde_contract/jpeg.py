"""Camera frames travel as JPEG (``CameraFrame.jpeg``); this is the one way they are decoded, on
every side: the policy's inputs, the VLM's frames, episode videos and the LeRobot export.

OpenCV (libjpeg-turbo) decodes them: it is what the policy has always seen, and on a 224x224 frame
it takes ~0.23 ms where PyAV's MJPEG decoder took ~3.1 ms. OpenCV is imported on first use, not at
import time, so a process that never decodes a frame (the operator page, which sends the server's
JPEG bytes to the browser as they are) needs no OpenCV; the robot, learner and supervisor extras
install it.
"""

from __future__ import annotations

import numpy as np


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> RGB uint8 [H, W, 3], C-contiguous. Raises ``ValueError`` when ``data`` is not
    a decodable image (empty, truncated header, garbage). Other formats OpenCV reads are decoded
    too: tests send lossless PNG frames where exact pixels matter."""
    import cv2

    try:
        bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as e:
        raise ValueError(f"camera frame is not a decodable JPEG ({len(data)} bytes)") from e
    if bgr is None:
        raise ValueError(f"camera frame is not a decodable JPEG ({len(data)} bytes)")
    rgb: np.ndarray = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return rgb
