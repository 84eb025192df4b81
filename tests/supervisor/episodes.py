"""Small synthetic episodes for the supervisor's tests and benchmark (JPEG frames, real format)."""

from __future__ import annotations

import cv2
import numpy as np

from pde_contract.episodes import ChunkRecord, EpisodeFile
from pde_contract.messages import ActionSpace, CameraFrame, Observation, RobotState


def jpeg_frame(
    i: int, width: int = 224, height: int = 224, quality: int = 90, texture: bool = False
) -> bytes:
    """A frame whose content changes with ``i`` (a moving square), so frames differ. ``texture``
    adds noise so the JPEG is about as large as a camera frame (for benchmarks)."""
    img = np.full((height, width, 3), 40, np.uint8)
    if texture:
        img = np.random.default_rng(i).integers(0, 90, (height, width, 3), dtype=np.uint8)
        img = np.asarray(cv2.GaussianBlur(img, (3, 3), 0), np.uint8)
    x = (i * 7) % max(1, width - 20)
    img[height // 2 - 10 : height // 2 + 10, x : x + 20] = (0, 200, 0)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def make_episode(
    episode_id: str = "ep-1",
    task: str = "put_green_container_in_bowl",
    canonical_prompt: str = "put the green container in the bowl",
    rollout_prompt: str | None = None,
    n_chunks: int = 20,
    success: bool | None = None,
    size_px: int = 224,
    height_px: int | None = None,
    texture: bool = False,
    cameras: tuple[str, ...] = ("external", "wrist"),
) -> EpisodeFile:
    chunks = []
    for i in range(n_chunks):
        state = RobotState(
            joint_positions_rad=np.zeros(7),
            joint_velocities_rad_s=np.zeros(7),
            ee_position_m=np.zeros(3),
            ee_quat_xyzw=np.array([0.0, 0.0, 0.0, 1.0]),
            gripper_width_m=0.04,
            robot_time_s=i * 0.1,
        )
        frames = [
            CameraFrame(
                name=c,
                jpeg=jpeg_frame(i, size_px, height_px or size_px, texture=texture),
                width=size_px,
                height=height_px or size_px,
                capture_time_s=i * 0.1,
                frame_index=i,
            )
            for c in cameras
        ]
        obs = Observation(seq=i, publish_time_s=i * 0.1, state=state, cameras=frames, episode_id=episode_id)
        chunks.append(ChunkRecord(observation=obs, actions=np.zeros((10, 7), np.float32)))
    return EpisodeFile(
        episode_id=episode_id,
        task=task,
        canonical_prompt=canonical_prompt,
        rollout_prompt=rollout_prompt or canonical_prompt,
        action_space=ActionSpace.EE_DELTA,
        control_rate_hz=10.0,
        chunks=chunks,
        success=success,
    )
