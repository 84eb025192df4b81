"""The episode file: one msgpack file per episode, written by whoever recorded it (the scripted
expert's recorder, the learner's actor) and read by SFT, PPO and the supervisor.

One ``ChunkRecord`` per action chunk: the observation the chunk was computed from, the chunk that
was sent, and, for a policy's rollout, a ``PolicyTrace`` (what PPO needs of the policy's sample:
log-probability, value, the stored denoising chain) and the chunk's timing. Metadata (labels,
prompts, policy versions) lives in the database; this file holds the bulky arrays and is enough on
its own to train from.

Format 3 (``EPISODE_FORMAT_VERSION``) adds each row's own observation (``ChunkRecord.row_observations``:
the state and camera frames read at the tick the row ran), so an exported dataset row pairs its
action with what the robot saw at that instant, not with the chunk start's observation. Format 2
recorded the trace as ``PolicyTrace`` only and one observation per chunk; its files read as format 3
with no row observations. Format-1 files still read: ``read_episode`` upgrades them as it reads them
(``_upgrade_v1``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np

from pde_contract.codec import CodecError, packb, unpackb
from pde_contract.files import atomic_write_bytes
from pde_contract.messages import ActionSpace, Observation

EPISODE_FORMAT_VERSION = 3
# The one home of the episode file's names: what every writer gives a file, and every suffix a
# reader (SFT, the demo, the LeRobot export) takes as an episode file (older tools wrote the others).
EPISODE_SUFFIX = ".episode"
EPISODE_SUFFIXES = (EPISODE_SUFFIX, ".msgpack", ".ep", ".mpk")


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
    # Who commanded these rows: the policy, or a person who took over during an RL episode (a
    # teleop row, sent through the same safety path; no trace: the policy did not choose it).
    # Recordings without a policy (demonstrations) keep the default; EpisodeFile.source says who
    # recorded them. Files from before the field read as all "policy".
    commanded_by: Literal["policy", "person"] = "policy"
    # Row r -> the observation read at the tick row r ran (before it was applied): its state and
    # camera frames. Row 0's is ``observation`` itself when the chunk ran from its first row, and is
    # not repeated here. Rows without an entry were not observed on their own (format-2 files, a
    # recorder that saw only chunk starts): ``observation_of_row`` falls back to ``observation``.
    row_observations: dict[int, Observation] = {}


def observation_of_row(chunk: ChunkRecord, row: int) -> tuple[Observation, bool]:
    """The observation to pair with row ``row`` of the chunk, and whether it was read at that row's
    tick (False: the chunk start's, older than the row)."""
    own = chunk.row_observations.get(row)
    if own is not None:
        return own, True
    return chunk.observation, row == 0


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


def policy_rows_mask(chunk: ChunkRecord, n_rows: int) -> np.ndarray:
    """bool[n_rows]: the rows of the chunk that ran as the policy's actions (``rows_ran_mask``);
    none of a person's chunk (a takeover): PPO's ratio is over the policy's own actions only."""
    if chunk.commanded_by == "person":
        return np.zeros(n_rows, dtype=bool)
    return rows_ran_mask(chunk, n_rows)


def rows_commanded_by(episode: EpisodeFile, who: Literal["policy", "person"]) -> int:
    """Rows of the episode that ran as ``who``'s commands."""
    total = 0
    for chunk in episode.chunks:
        if chunk.commanded_by == who:
            first, end = rows_that_ran(chunk)
            total += end - first
    return total


def trajectory_sha256(episode: EpisodeFile) -> str:
    """A fingerprint of what the episode did: per chunk, the state it was inferred from (the
    robot's own clock included) and its actions, and the outcome. Equal on two runs: the same
    episode, bit for bit, as far as the policy could see."""
    h = hashlib.sha256()
    for c in episode.chunks:
        s = c.observation.state
        for a in (
            s.joint_positions_rad,
            s.joint_velocities_rad_s,
            s.ee_position_m,
            s.ee_quat_xyzw,
            (s.gripper_width_m, s.robot_time_s),
            c.actions,
        ):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    h.update(repr(episode.success).encode())
    return h.hexdigest()


class Intervention(msgspec.Struct, kw_only=True):
    """A person took over from the policy during the episode (HIL-SERL style): chunks
    ``[first_chunk, first_chunk + n_rows)`` of the episode are theirs, one row each."""

    first_chunk: int  # index into EpisodeFile.chunks of the person's first row
    n_rows: int  # rows the person commanded before handing back
    trigger: Literal["device", "request"]  # the device moved past its deadband; or asked for (page)
    start_tick: int = -1  # server tick of the person's first row (the policy's chunk ran until it)


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
    interventions: list[Intervention] = []  # takeovers by a person, in order (none before the field)


def write_episode(path: str | Path, episode: EpisodeFile) -> None:
    """Write atomically (temp file + rename): a crash never leaves a half-written episode."""
    atomic_write_bytes(path, packb(episode))


class _FormatVersion(msgspec.Struct):
    """An episode file's version alone: decoding skips the rest (microseconds for a whole file)."""

    format_version: int


class _ChunkExtrasV1(msgspec.Struct):
    extras: dict[str, np.ndarray] = {}


class _EpisodeExtrasV1(msgspec.Struct):
    """What format 1 had beyond format 2: ``ChunkRecord.extras``, named per-chunk arrays."""

    chunks: list[_ChunkExtrasV1]


def _upgrade_v1(data: bytes) -> EpisodeFile:
    """A format-1 file as the current format. Format 1 is format 2 plus ``ChunkRecord.extras``; episodes
    recorded before ``PolicyTrace`` carry their trace there ("log_prob" and "value" as one-element
    arrays, "chain", and, from when it was recorded, "log_prob_elements"), which becomes the chunk's
    ``trace`` as the format-1 trainer read it. Other extras (none was ever written) are dropped, and
    a chunk whose extras lack the trace keeps none: PPO refuses it, as it did then."""
    episode: EpisodeFile = unpackb(data, EpisodeFile)  # skips the extras
    old: _EpisodeExtrasV1 = unpackb(data, _EpisodeExtrasV1)
    for chunk, extras in zip(episode.chunks, (c.extras for c in old.chunks), strict=True):
        if chunk.trace is None and all(key in extras for key in ("log_prob", "value", "chain")):
            chunk.trace = PolicyTrace(
                log_prob=float(np.asarray(extras["log_prob"]).reshape(-1)[0]),
                log_prob_elements=extras.get("log_prob_elements"),
                value=float(np.asarray(extras["value"]).reshape(-1)[0]),
                chain=np.asarray(extras["chain"]),
            )
    episode.format_version = EPISODE_FORMAT_VERSION
    return episode


def read_episode(path: str | Path) -> EpisodeFile:
    """Read an episode file of this format or of formats 1 and 2 (upgraded as they are read)."""
    data = Path(path).read_bytes()
    try:
        version = unpackb(data, _FormatVersion).format_version
    except CodecError as e:
        raise ValueError(f"{path}: not an episode file ({e})") from e
    if version == EPISODE_FORMAT_VERSION:
        return unpackb(data, EpisodeFile)
    if version == 2:  # format 3 less the row observations: it decodes with their default
        episode: EpisodeFile = unpackb(data, EpisodeFile)
        episode.format_version = EPISODE_FORMAT_VERSION
        return episode
    if version == 1:
        return _upgrade_v1(data)
    what_to_do = (
        "it was written by newer code: update this checkout to read it"
        if version > EPISODE_FORMAT_VERSION
        else "no such format was ever written: the file is not one of this project's episodes"
    )
    raise ValueError(
        f"{path}: episode format {version}; this code reads formats 1 to {EPISODE_FORMAT_VERSION} "
        f"({what_to_do})"
    )
