"""Synthetic observations and episodes (random images and states) for tests and the PPO benchmark,
so they run without a robot server or demonstrations."""

from __future__ import annotations

import time

import cv2
import numpy as np

from learner.actor import policy_trace
from learner.policies.base import Policy
from pde_contract.episodes import ChunkRecord, EpisodeFile
from pde_contract.messages import CameraFrame, Observation, RobotState


def synthetic_observation(rng: np.random.Generator, size_px: int = 32, seq: int = 0) -> Observation:
    frames = []
    for name in ("external", "wrist"):
        img = rng.integers(0, 255, size=(size_px, size_px, 3), dtype=np.uint8)
        ok, jpeg = cv2.imencode(".jpg", img)
        assert ok
        frames.append(
            CameraFrame(
                name=name,
                jpeg=jpeg.tobytes(),
                width=size_px,
                height=size_px,
                capture_time_s=time.time(),
                frame_index=seq,
            )
        )
    state = RobotState(
        joint_positions_rad=rng.normal(size=7),
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=np.array([0.4, 0.0, 0.3]) + 0.05 * rng.normal(size=3),
        ee_quat_xyzw=np.array([1.0, 0.0, 0.0, 0.0]),
        gripper_width_m=float(rng.uniform(0.0, 0.08)),
        robot_time_s=float(seq),
    )
    return Observation(seq=seq, publish_time_s=time.time(), state=state, cameras=frames)


def synthetic_episode(
    policy: Policy,
    rng: np.random.Generator,
    n_chunks: int,
    rollout_prompt: str,
    canonical_prompt: str,
    success: bool,
    size_px: int = 32,
    episode_id: str = "synthetic",
) -> EpisodeFile:
    """An episode whose chunks were sampled by ``policy`` under ``rollout_prompt`` on random
    observations, recorded exactly as the actor records them."""
    chunks = []
    for i in range(n_chunks):
        obs = synthetic_observation(rng, size_px, seq=i)
        s = policy.sample(policy.preprocess([obs]), [rollout_prompt])
        chunks.append(
            ChunkRecord(
                observation=obs,
                actions=s.actions[0],
                trace=policy_trace(s, 0),
            )
        )
    return EpisodeFile(
        episode_id=episode_id,
        task="synthetic",
        canonical_prompt=canonical_prompt,
        rollout_prompt=rollout_prompt,
        action_space=policy.action_space,
        control_rate_hz=10.0,
        chunks=chunks,
        success=success,
        source="synthetic",
    )
