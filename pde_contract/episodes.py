"""The episode file: one msgpack file per episode, written by whoever recorded it (the scripted
expert's recorder, the learner's actor) and read by SFT, PPO and the supervisor.

One ``ChunkRecord`` per action chunk: the observation the chunk was computed from, the chunk that
was sent, and named per-chunk arrays (``extras``) such as the policy's log-probability, value or the
stored denoising chain. Metadata (labels, prompts, policy versions) lives in the database; this file
holds the bulky arrays and is enough on its own to train from.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from pde_contract.codec import packb, unpackb
from pde_contract.files import atomic_write_bytes
from pde_contract.messages import ActionSpace, Observation

EPISODE_FORMAT_VERSION = 1

# Per-chunk timing in ``ChunkRecord.extras`` (one-element float64 arrays), written by the
# learner's actor and copied into the database's ``chunks`` rows by ``pde_storage``.
INFERENCE_S = "inference_s"  # how long the policy took to compute the chunk
SENT_TIME_S = "sent_time_s"  # wall-clock time the chunk was sent (ActionChunk.sent_time_s)


class ChunkRecord(msgspec.Struct, kw_only=True):
    observation: Observation
    actions: np.ndarray  # [T, D] as sent to the robot server
    extras: dict[str, np.ndarray] = {}  # e.g. "log_prob", "value", "chain"


class EpisodeFile(msgspec.Struct, kw_only=True):
    format_version: int = EPISODE_FORMAT_VERSION
    episode_id: str
    task: str
    canonical_prompt: str
    rollout_prompt: str
    action_space: ActionSpace
    control_rate_hz: float
    chunks: list[ChunkRecord]
    success: bool | None = None  # label at the time of writing; the database has the history
    seed: int | None = None
    source: str = ""  # "expert", "policy:<version>", ...


def write_episode(path: str | Path, episode: EpisodeFile) -> None:
    """Write atomically (temp file + rename): a crash never leaves a half-written episode."""
    atomic_write_bytes(path, packb(episode))


def read_episode(path: str | Path) -> EpisodeFile:
    episode: EpisodeFile = unpackb(Path(path).read_bytes(), EpisodeFile)
    if episode.format_version != EPISODE_FORMAT_VERSION:
        raise ValueError(
            f"{path}: episode format {episode.format_version}, this code reads {EPISODE_FORMAT_VERSION}"
        )
    return episode
