"""The episode file: one msgpack file per episode, written by whoever recorded it (the scripted
expert's recorder, the learner's actor) and read by SFT, PPO and the supervisor.

One ``ChunkRecord`` per action chunk: the observation the chunk was computed from, the chunk that
was sent, and, for a policy's rollout, a ``PolicyTrace`` (what PPO needs of the policy's sample:
log-probability, value, the stored denoising chain) and the chunk's timing. Metadata (labels,
prompts, policy versions) lives in the database; this file holds the bulky arrays and is enough on
its own to train from.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from pde_contract.codec import packb, unpackb
from pde_contract.files import atomic_write_bytes
from pde_contract.messages import ActionSpace, Observation

EPISODE_FORMAT_VERSION = 1


class PolicyTrace(msgspec.Struct, kw_only=True):
    """What the policy computed for one chunk, as PPO needs it: recorded by the learner's actor,
    read by the trainer. Typed fields, so a rename cannot silently break training."""

    log_prob: float  # log-probability of the chain under the rollout prompt
    log_prob_elements: np.ndarray | None = None  # [T, D] per executed element, summing to log_prob
    value: float  # the value head's estimate at the chunk's observation
    chain: np.ndarray  # [K+1, T, D] the stochastic chain, normalised; chain[-1] is the executed chunk


class ChunkRecord(msgspec.Struct, kw_only=True):
    observation: Observation
    actions: np.ndarray  # [T, D] as sent to the robot server
    trace: PolicyTrace | None = None  # a policy's rollout; None for demonstrations
    inference_s: float | None = None  # how long the policy took to compute the chunk
    sent_time_s: float | None = None  # wall-clock time the chunk was sent (ActionChunk.sent_time_s)
    # [first, end) of ``actions`` that the robot server ran: rows before ``first`` were meant for
    # ticks that ran while the chunk was inferred (overlapped inference), rows from ``end`` were
    # preempted by the next chunk. None (episodes from before it was recorded): all of them.
    rows_run: tuple[int, int] | None = None
    # Other named per-chunk arrays. Episodes recorded before PolicyTrace carry theirs here
    # ("log_prob", "log_prob_elements", "value", "chain"); the trainer still reads them.
    extras: dict[str, np.ndarray] = {}


def rows_that_ran(chunk: ChunkRecord) -> tuple[int, int]:
    """``[first, end)`` of the chunk's ``actions`` that the robot server ran (all of them for a
    record without ``rows_run``)."""
    return chunk.rows_run if chunk.rows_run is not None else (0, len(chunk.actions))


def rows_ran_mask(chunk: ChunkRecord, n_rows: int) -> np.ndarray:
    """bool[n_rows]: True where the robot server ran that row of the chunk (``rows_run``)."""
    mask = np.zeros(n_rows, dtype=bool)
    first, end = rows_that_ran(chunk)
    mask[first:end] = True
    return mask


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
