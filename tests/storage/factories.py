"""Small, real episode files for storage tests (JPEG frames encoded with OpenCV)."""

from __future__ import annotations

import cv2
import msgspec
import numpy as np

from pde_contract.episodes import ChunkRecord, EpisodeFile, Intervention, PolicyTrace
from pde_contract.messages import ActionSpace, CameraFrame, Observation, RobotState
from pde_storage import EpisodeRow
from pde_storage.protocols import EpisodeRecorder


def jpeg(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return buf.tobytes()


def make_observation(i: int, width: int = 64, height: int = 48, t0: float = 1000.0) -> Observation:
    cams = []
    for k, name in enumerate(("external", "wrist")):
        img = np.zeros((height, width, 3), np.uint8)
        img[:, : (i * 7 + k * 13) % width] = (200, 40 + 10 * k, 40)  # a moving bar: frames differ
        cams.append(
            CameraFrame(
                name=name, jpeg=jpeg(img), width=width, height=height, capture_time_s=t0 + i, frame_index=i
            )
        )
    state = RobotState(
        joint_positions_rad=np.zeros(7),
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=np.zeros(3),
        ee_quat_xyzw=np.array([0.0, 0.0, 0.0, 1.0]),
        gripper_width_m=0.08,
        robot_time_s=float(i),
    )
    return Observation(seq=i, publish_time_s=t0 + i, state=state, cameras=cams)


def make_episode_file(
    episode_id: int, task: str, n_chunks: int = 6, rows: int = 10, success: bool | None = None
) -> EpisodeFile:
    chunks = [
        ChunkRecord(
            observation=make_observation(i),
            actions=np.full((rows, 7), 0.001 * i, np.float32),
            trace=PolicyTrace(log_prob=-1.5 * i, value=0.0, chain=np.zeros((2, rows, 7), np.float32)),
            inference_s=0.02 + i * 1e-3,
        )
        for i in range(n_chunks)
    ]
    return EpisodeFile(
        episode_id=str(episode_id),
        task=task,
        canonical_prompt="canon",
        rollout_prompt="roll",
        action_space=ActionSpace.EE_DELTA,
        control_rate_hz=10.0,
        chunks=chunks,
        success=success,
    )


def with_takeovers(episode: EpisodeFile, takes: list[tuple[int, int]]) -> EpisodeFile:
    """``episode`` with a person's takes: for each (first_chunk, n_rows), chunks
    ``[first_chunk, first_chunk + n_rows)`` become one-row person chunks, as the actor records them."""
    chunks = list(episode.chunks)
    for first, n in takes:
        for i in range(first, first + n):
            c = chunks[i]
            chunks[i] = msgspec.structs.replace(c, actions=c.actions[:1], trace=None, commanded_by="person")
    interventions = [Intervention(first_chunk=f, n_rows=n, trigger="request") for f, n in takes]
    return msgspec.structs.replace(episode, chunks=chunks, interventions=interventions)


def finish_with_videos(store: EpisodeRecorder, episode_id: int, episode_file: EpisodeFile) -> EpisodeRow:
    """End a running episode as the loop does: encode its videos, then record it with them."""
    videos = store.encode_episode_videos(episode_id, episode_file)
    return store.finish_episode(episode_id, episode_file, videos=videos)
