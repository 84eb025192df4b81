"""Export a directory of episode files (``pde_contract.episodes.EpisodeFile``: the expert demos of
``pde sim record``, the learner's stored episodes) to a LeRobotDataset, so LeRobot's
``LeRobotDataset(repo_id, root=OUT)`` can train ACT, Diffusion, π0 or π0.5 on them.

Two layouts: **v3.0** (default; LeRobot 0.4 and later, 0.6.1 included, read nothing else; written by
``pde_storage/lerobot_v30.py``: several episodes per data and video file, ``meta/episodes/``,
``meta/tasks.parquet``, ``meta/stats.json`` with q01..q99) and **v2.1** (``version="v2.1"``; LeRobot
0.3.x; format facts from LeRobot v0.3.x, ``CODEBASE_VERSION = "v2.1"``; no quantiles)::

    OUT/meta/info.json                 codebase_version, fps, features, path templates, totals
    OUT/meta/episodes.jsonl            {"episode_index", "tasks": [prompt], "length"}
    OUT/meta/tasks.jsonl               {"task_index", "task": prompt}
    OUT/meta/episodes_stats.jsonl      {"episode_index", "stats": {feature: {min,max,mean,std,count}}}
    OUT/meta/pde_episodes.jsonl        ours (both layouts): source file, episode id, task, seed, success
    OUT/data/chunk-000/episode_000000.parquet
    OUT/videos/chunk-000/observation.images.<camera>/episode_000000.mp4

How an action chunk becomes rows. LeRobot stores one row per control step at ``fps`` and builds
action chunks itself from ``delta_timestamps`` (ACT: ``{"action": [i / fps for i in range(chunk_size)]}``).
So each executed action row is one dataset row, ``fps`` = the control rate, ``action`` = that row,
and ``observation.state`` and the camera frames are the ones read at that row's tick
(``ChunkRecord.row_observations``, episode format 3: the expert recorder reads one before every row,
the teleop recorder records one row per chunk). Where an episode did not record a row's own
observation (format-2 files; the learner's policy rollouts, which see the stream only at chunk
boundaries) the row takes its chunk start's, as every row did before format 3;
``meta/pde_episodes.jsonl`` counts, per episode, the rows that had their own
(``rows_with_own_observation``). The video holds one frame per row, so video timestamps stay
``frame_index / fps`` as LeRobot's decoder checks. Two extra integer columns say where a row sits:
``chunk_index`` (which chunk of the episode) and ``chunk_row`` (its row in the chunk); LeRobot
ignores them for policy inputs (only ``observation*`` and ``action*`` keys become policy features).
Rows are the chunks as sent; a chunk that a later one preempted (policy rollouts) is exported up to
the rows that ran. Per-chunk policy traces (``PolicyTrace``: log-probabilities, values, denoising
chains) are not exported.

``observation.state`` is 15 floats in the learner's order (``learner.policies.observations``): TCP
position (m), TCP quaternion xyzw, gripper width (m), joint positions (rad). ``action`` is the
episode's action space (``ee_delta``: dx dy dz (m), rotation vector (rad), gripper width (m)).

Videos: PyAV, yuv420p, keyframe every ``gop`` frames (2) and ``crf`` quality, as LeRobot's
``encode_video_frames``; written by the one mp4 writer (``pde_storage/video.py``) with a 1/fps
container time base, so frame i decodes at exactly i / fps.
The default codec is LeRobot's (AV1 by ``libsvtav1``; decoded by PyAV's ``libdav1d``); ``h264``
(``libx264``) is faster to write and what any player shows. Image sides must be even (4:2:0).
Stats follow LeRobot's ``compute_episode_stats`` (``pde_storage/lerobot_stats.py``): vectors and
scalars over all rows; images on up to 100 evenly spaced rows of the source frames (before the lossy
encode), per channel over [0, 1], shape [3, 1, 1]; q01..q99 in v3.0.

The dataset is built in a temporary sibling folder and renamed into place at the end: an error
leaves no half-written dataset and never touches an existing one.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import av
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pde_contract.episodes import (
    EPISODE_SUFFIXES,
    EpisodeFile,
    observation_of_row,
    read_episode,
    rows_that_ran,
)
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import STATE_VECTOR_NAMES, ActionSpace, Observation, state_vector
from pde_storage import lerobot_v30
from pde_storage.lerobot_stats import as_lists, image_sample_indices, image_stats, vector_stats
from pde_storage.video import VideoEncoding, write_video

CODEBASE_VERSION = "v2.1"  # the older layout, written on request
VERSIONS = ("v3.0", "v2.1")  # what version= accepts, the default first
CHUNKS_SIZE = 1000  # episodes per data/chunk-XXX folder (LeRobot's DEFAULT_CHUNK_SIZE)
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
# CLI name -> PyAV encoder, and its default quality: LeRobot's crf 30 for AV1; x264's own default
# 23 for H.264, whose crf 30 is visibly worse (mean error 7 levels of 255 on 48x40 frames).
VIDEO_ENCODERS = {"libsvtav1": "libsvtav1", "h264": "libx264"}
DEFAULT_CRF = {"libsvtav1": 30, "h264": 23}
STATE_NAMES = list(STATE_VECTOR_NAMES)
ACTION_NAMES: dict[ActionSpace, list[str]] = {
    ActionSpace.EE_DELTA: ["dx_m", "dy_m", "dz_m", "drx_rad", "dry_rad", "drz_rad", "gripper_width_m"],
    ActionSpace.JOINT_ABS: [*(f"joint_{i}_rad" for i in range(1, 8)), "gripper_width_m"],
}
# Integer columns after the state/action vectors: ours first, then LeRobot's own (timestamp apart).
INDEX_COLUMNS = ["chunk_index", "chunk_row", "frame_index", "episode_index", "index", "task_index"]


class ExportError(ValueError):
    """The input cannot be exported as asked; the message says what was wrong and what to do."""


@dataclass(frozen=True)
class ExportConfig:
    fps: int | None = None  # None: the episodes' control rate (the only rate rows can have)
    vcodec: str = "libsvtav1"  # a key of VIDEO_ENCODERS
    crf: int | None = None  # quality, lower is better; None: DEFAULT_CRF of the codec
    gop: int = 2  # a keyframe every this many frames: fast random access for training
    task_prompt: Literal["rollout", "canonical"] = "rollout"  # which prompt becomes the task
    only_success: bool = False  # skip episodes whose success label is not True
    robot_type: str = "franka_fr3"
    overwrite: bool = False  # replace an existing non-empty OUT
    version: Literal["v3.0", "v2.1"] = "v3.0"  # the layout: LeRobot >= 0.4's, or LeRobot 0.3.x's
    # v3.0: a data (video) file takes the next episode while it holds less than this (LeRobot's)
    data_file_size_mb: float = lerobot_v30.DATA_FILE_SIZE_MB
    video_file_size_mb: float = lerobot_v30.VIDEO_FILE_SIZE_MB


@dataclass
class ExportReport:
    out_dir: Path
    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    skipped: list[str] = field(default_factory=list)  # "file: why"
    wall_s: float = 0.0


@dataclass
class _Schema:
    """What every episode of one dataset must share."""

    fps: int
    action_space: ActionSpace
    action_dim: int
    cameras: dict[str, tuple[int, int]]  # name -> (height, width)


def _natural_key(path: Path) -> list[Any]:
    # seed2 before seed10
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def find_episode_files(in_dir: str | Path) -> list[Path]:
    """Episode files under ``in_dir`` (recursively), in natural path order."""
    root = Path(in_dir)
    if not root.is_dir():
        raise ExportError(f"{root}: not a directory; pass the folder `pde sim record --out` wrote")
    files = [
        p
        for p in root.rglob("*")
        if p.suffix in EPISODE_SUFFIXES and p.is_file() and not p.name.startswith(".")
    ]
    if not files:
        raise ExportError(
            f"{root}: no episode files ({', '.join('*' + s for s in EPISODE_SUFFIXES)}) in it or below; "
            "record some with `pde sim record --out DIR`"
        )
    return sorted(files, key=lambda p: _natural_key(p.relative_to(root)))


# --- one episode --------------------------------------------------------------------------------


def _decode(path: Path, chunk: int, camera: str, jpeg: bytes) -> np.ndarray:
    try:
        return decode_jpeg(jpeg)
    except ValueError as e:
        raise ExportError(f"{path}: chunk {chunk}, camera {camera!r}: {e}; re-record this episode") from None


@dataclass
class _EpisodeRows:
    state: np.ndarray  # [N, 15] float32
    action: np.ndarray  # [N, D] float32
    chunk_index: np.ndarray  # [N] int64
    chunk_row: np.ndarray  # [N] int64
    images: dict[str, list[np.ndarray]]  # camera -> each observation's RGB HWC uint8 image, in row order
    image_of_row: np.ndarray  # [N] int64: the row's index into each camera's ``images``
    own_observation: int  # rows whose state and images were read at their own tick


def _camera_images(path: Path, c: int, obs: Observation, schema: _Schema) -> dict[str, np.ndarray]:
    frames = {f.name: f for f in obs.cameras}
    if sorted(frames) != sorted(schema.cameras):
        raise ExportError(
            f"{path}: chunk {c} has cameras {sorted(frames)}, the dataset has {sorted(schema.cameras)}"
        )
    out = {}
    for name, (h, w) in schema.cameras.items():
        img = _decode(path, c, name, frames[name].jpeg)
        if img.shape[:2] != (h, w):
            raise ExportError(
                f"{path}: chunk {c}, camera {name!r} is {img.shape[1]}x{img.shape[0]}, the dataset's "
                f"is {w}x{h}; export episodes recorded at one --image-size together"
            )
        out[name] = img
    return out


def _episode_rows(path: Path, ep: EpisodeFile, schema: _Schema) -> _EpisodeRows:
    """One row per executed action row, with the state and images read at that row's tick where
    the episode recorded them (``ChunkRecord.row_observations``), else the chunk start's."""
    states, actions, chunk_idx, chunk_row, image_of_row = [], [], [], [], []
    images: dict[str, list[np.ndarray]] = {name: [] for name in schema.cameras}
    own_rows = n_images = 0
    for c, chunk in enumerate(ep.chunks):
        a = np.asarray(chunk.actions)
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] != schema.action_dim:
            raise ExportError(
                f"{path}: chunk {c} has actions of shape {a.shape}, expected [T >= 1, {schema.action_dim}]"
            )
        if not np.isfinite(a).all():
            raise ExportError(f"{path}: chunk {c} has NaN or infinite actions; re-record this episode")
        first, end = rows_that_ran(chunk)  # overlapped inference: only the rows that ran
        seen: dict[int, int] = {}  # id(observation) -> its index in ``images``: each decoded once
        for r in range(first, end):
            obs, own = observation_of_row(chunk, r)
            own_rows += own
            if id(obs) not in seen:
                seen[id(obs)], n_images = n_images, n_images + 1
                for name, img in _camera_images(path, c, obs, schema).items():
                    images[name].append(img)
            image_of_row.append(seen[id(obs)])
            states.append(state_vector(obs.state))
        actions.append(a[first:end].astype(np.float32))
        chunk_idx.append(np.full(end - first, c, dtype=np.int64))
        chunk_row.append(np.arange(first, end, dtype=np.int64))
    return _EpisodeRows(
        state=np.stack(states).astype(np.float32),
        action=np.concatenate(actions),
        chunk_index=np.concatenate(chunk_idx),
        chunk_row=np.concatenate(chunk_row),
        images=images,
        image_of_row=np.asarray(image_of_row, dtype=np.int64),
        own_observation=own_rows,
    )


def _schema_of(path: Path, ep: EpisodeFile, config: ExportConfig) -> _Schema:
    rate = float(ep.control_rate_hz)
    if rate <= 0 or abs(rate - round(rate)) > 1e-6:
        raise ExportError(f"{path}: control rate {rate} Hz; LeRobot datasets need a whole number of fps")
    fps = round(rate)
    if config.fps is not None and config.fps != fps:
        raise ExportError(
            f"--fps {config.fps}: the episodes run at {fps} Hz and each dataset row is one executed "
            f"action row, so fps must be {fps} (or leave --fps out)"
        )
    first = ep.chunks[0]
    cameras: dict[str, tuple[int, int]] = {}
    for frame in first.observation.cameras:
        img = _decode(path, 0, frame.name, frame.jpeg)
        h, w = img.shape[:2]
        if h % 2 or w % 2:
            raise ExportError(
                f"{path}: camera {frame.name!r} is {w}x{h}; yuv420p video needs even sides, "
                "record with an even --image-size"
            )
        cameras[frame.name] = (h, w)
    if not cameras:
        raise ExportError(f"{path}: the observations carry no camera frames; nothing to put in videos")
    space = ActionSpace(ep.action_space)
    return _Schema(fps=fps, action_space=space, action_dim=len(ACTION_NAMES[space]), cameras=cameras)


def _check_same_schema(path: Path, ep: EpisodeFile, schema: _Schema, config: ExportConfig) -> None:
    other = _schema_of(path, ep, config)
    for what, mine, theirs in (
        ("control rate (Hz)", schema.fps, other.fps),
        ("action space", schema.action_space, other.action_space),
        ("cameras (name: height, width)", schema.cameras, other.cameras),
    ):
        if mine != theirs:
            raise ExportError(
                f"{path}: {what} {theirs} differs from the first episode's {mine}; "
                "export such episodes into separate datasets"
            )


def _video_key(camera: str) -> str:
    return f"observation.images.{camera}"


def _encoding(config: ExportConfig) -> VideoEncoding:
    crf = DEFAULT_CRF[config.vcodec] if config.crf is None else config.crf
    return VideoEncoding(VIDEO_ENCODERS[config.vcodec], crf=crf, gop=config.gop, frame_rate_time_base=True)


def video_info(path: Path, encoding: VideoEncoding | None = None) -> dict[str, Any]:
    """The ``info`` block LeRobot keeps per video feature, read back from an encoded file: v2.1's
    (``encoding`` None) or LeRobot 0.6.1's, which adds the encoder's settings and says
    ``is_depth_map`` without the ``video.`` prefix."""
    with av.open(str(path)) as f:
        s = f.streams.video[0]
        fps = s.base_rate or s.average_rate
        info: dict[str, Any] = {
            "video.height": s.height,
            "video.width": s.width,
            "video.codec": s.codec_context.codec.canonical_name,
            "video.pix_fmt": s.codec_context.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(fps) if fps else None,
            "video.channels": 3,
            "has_audio": bool(f.streams.audio),
        }
    if encoding is not None:
        del info["video.is_depth_map"]
        info.update({"video.g": encoding.gop, "video.crf": encoding.crf, "is_depth_map": False})
    return info


def _features(schema: _Schema) -> dict[str, dict[str, Any]]:
    names = ACTION_NAMES[schema.action_space]
    features: dict[str, dict[str, Any]] = {
        "observation.state": {"dtype": "float32", "shape": [len(STATE_NAMES)], "names": STATE_NAMES},
        "action": {"dtype": "float32", "shape": [len(names)], "names": names},
    }
    for cam, (h, w) in schema.cameras.items():
        features[_video_key(cam)] = {
            "dtype": "video",
            "shape": [h, w, 3],
            "names": ["height", "width", "channels"],
        }
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for col in INDEX_COLUMNS:
        features[col] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _parquet_schema(features: dict[str, dict[str, Any]], version: str) -> pa.Schema:
    """Arrow types as Hugging Face ``datasets`` writes LeRobot's features (fixed-size lists for
    vectors), with its ``huggingface`` schema metadata so ``load_dataset`` restores them: in the
    spelling of ``datasets`` 4 (``List`` with a length) for v3.0, as LeRobot 0.6.1 writes it, and of
    ``datasets`` 3 (``Sequence``, ``id``) for v2.1."""
    fields, hf = [], {}
    v2 = version == "v2.1"
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        scalar = pa.float32() if ft["dtype"] == "float32" else pa.int64()
        value = {"dtype": ft["dtype"], **({"id": None} if v2 else {}), "_type": "Value"}
        if ft["shape"] == [1]:
            fields.append(pa.field(key, scalar))
            hf[key] = value
        else:
            fields.append(pa.field(key, pa.list_(scalar, ft["shape"][0])))
            hf[key] = {"feature": value, "length": ft["shape"][0]}
            hf[key].update({"id": None, "_type": "Sequence"} if v2 else {"_type": "List"})
    return pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": hf}})})


def _fixed_list(values: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


# --- the whole export ---------------------------------------------------------------------------


def _episodes(
    files: list[Path],
    config: ExportConfig,
    skipped: list[str],
    progress: Callable[[Path], None] | None,
) -> Iterator[tuple[Path, EpisodeFile]]:
    for path in files:
        try:
            ep = read_episode(path)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
            raise ExportError(
                f"{path}: not a readable episode file ({e}); move it out of the input folder"
            ) from None
        why = "no chunks" if not ep.chunks else ""
        if not why and config.only_success and ep.success is not True:
            why = f"success={ep.success}"
        if why:
            skipped.append(f"{path}: {why}")
            if progress is not None:
                progress(path)
            continue
        yield path, ep


def _prepare_out(out_dir: Path, config: ExportConfig) -> Path:
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"{out_dir}: exists and is not a directory; choose another --out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not config.overwrite:
        raise ExportError(f"{out_dir}: exists and is not empty; choose another --out or pass --overwrite")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.partial-"))


def _publish(tmp: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def export_lerobot(
    in_dir: str | Path,
    out_dir: str | Path,
    config: ExportConfig | None = None,
    progress: Callable[[Path], None] | None = None,
) -> ExportReport:
    """Convert every episode file under ``in_dir`` into a LeRobotDataset (``config.version``) at
    ``out_dir``; ``progress(path)`` is called after each episode file."""
    config = config or ExportConfig()
    if config.version not in VERSIONS:
        raise ExportError(f"LeRobotDataset version {config.version!r}: choose one of {', '.join(VERSIONS)}")
    if config.vcodec not in VIDEO_ENCODERS:
        raise ExportError(f"video codec {config.vcodec!r}: choose one of {', '.join(VIDEO_ENCODERS)}")
    if config.gop < 1 or (config.crf is not None and not 0 <= config.crf <= 51):
        raise ExportError(f"gop {config.gop} / crf {config.crf}: gop must be >= 1 and crf in 0..51")
    t0 = time.perf_counter()
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    files = find_episode_files(in_dir)
    if out_dir.resolve().is_relative_to(in_dir.resolve()):
        raise ExportError(f"--out {out_dir} is inside --in {in_dir}; write the dataset elsewhere")
    report = ExportReport(out_dir=out_dir)
    tmp = _prepare_out(out_dir, config)
    try:
        _export_into(tmp, in_dir, files, config, report, progress)
        _publish(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report.wall_s = time.perf_counter() - t0
    return report


@dataclass
class _V21Writer:
    """The v2.1 layout: one parquet file and one video per episode and camera, jsonl metadata."""

    root: Path
    fps: int
    encoding: VideoEncoding
    episodes: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)

    def add_episode(self, ep: lerobot_v30.EpisodeOut) -> None:
        chunk = ep.index // CHUNKS_SIZE
        data_path = self.root / DATA_PATH.format(episode_chunk=chunk, episode_index=ep.index)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(ep.table, data_path)
        for key, chunk_images in ep.images.items():
            path = VIDEO_PATH.format(episode_chunk=chunk, video_key=key, episode_index=ep.index)
            write_video(self.root / path, chunk_images, self.fps, self.encoding, repeats=ep.repeats)
        self.episodes.append({"episode_index": ep.index, "tasks": [ep.task], "length": ep.table.num_rows})
        self.stats.append({"episode_index": ep.index, "stats": as_lists(ep.stats)})

    def first_video(self, key: str) -> Path:
        return self.root / VIDEO_PATH.format(episode_chunk=0, video_key=key, episode_index=0)

    def close(self) -> None:
        """Nothing stays open between episodes."""

    def abort(self) -> None:
        """Nothing stays open between episodes."""

    def write_meta(self, info: dict[str, Any], tasks: dict[str, int]) -> None:
        n = len(self.episodes)
        n_videos = sum(ft["dtype"] == "video" for ft in info["features"].values())
        full = {
            "codebase_version": CODEBASE_VERSION,
            **info,
            "total_videos": n * n_videos,
            "total_chunks": math.ceil(n / CHUNKS_SIZE),
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH,
        }
        meta = self.root / "meta"
        (meta / "info.json").write_text(json.dumps(full, indent=4, ensure_ascii=False))
        _write_jsonl(meta / "episodes.jsonl", self.episodes)
        _write_jsonl(meta / "tasks.jsonl", [{"task_index": i, "task": t} for t, i in tasks.items()])
        _write_jsonl(meta / "episodes_stats.jsonl", self.stats)


def _export_into(
    root: Path,
    in_dir: Path,
    files: list[Path],
    config: ExportConfig,
    report: ExportReport,
    progress: Callable[[Path], None] | None,
) -> None:
    schema: _Schema | None = None
    features: dict[str, dict[str, Any]] = {}
    arrow_schema: pa.Schema | None = None
    writer: _V21Writer | lerobot_v30.V30Writer | None = None
    v3 = config.version == lerobot_v30.CODEBASE_VERSION
    tasks: dict[str, int] = {}
    provenance = []
    try:
        for path, ep in _episodes(files, config, report.skipped, progress):
            if schema is None:
                schema = _schema_of(path, ep, config)
                features = _features(schema)
                arrow_schema = _parquet_schema(features, config.version)
                writer = (
                    lerobot_v30.V30Writer(
                        root,
                        schema.fps,
                        _encoding(config),
                        config.data_file_size_mb,
                        config.video_file_size_mb,
                    )
                    if v3
                    else _V21Writer(root, schema.fps, _encoding(config))
                )
            else:
                _check_same_schema(path, ep, schema, config)
            assert arrow_schema is not None and writer is not None
            rows = _episode_rows(path, ep, schema)
            ep_index = report.episodes
            n = len(rows.action)
            task = ep.rollout_prompt if config.task_prompt == "rollout" else ep.canonical_prompt
            task_index = tasks.setdefault(task, len(tasks))
            columns: dict[str, np.ndarray] = {
                "observation.state": rows.state,
                "action": rows.action,
                "timestamp": (np.arange(n, dtype=np.float64) / schema.fps).astype(np.float32),
                "chunk_index": rows.chunk_index,
                "chunk_row": rows.chunk_row,
                "frame_index": np.arange(n, dtype=np.int64),
                "episode_index": np.full(n, ep_index, dtype=np.int64),
                "index": np.arange(report.frames, report.frames + n, dtype=np.int64),
                "task_index": np.full(n, task_index, dtype=np.int64),
            }
            table = pa.Table.from_arrays(
                [
                    _fixed_list(columns[f.name])
                    if pa.types.is_fixed_size_list(f.type)
                    else pa.array(columns[f.name])
                    for f in arrow_schema
                ],
                schema=arrow_schema,
            )
            stats = {key: vector_stats(v, quantiles=v3) for key, v in columns.items()}
            # a row's image may serve several rows (a chunk start's, in an episode that did not
            # record each row's): count how often each is sampled
            sampled = rows.image_of_row[image_sample_indices(n)]
            for cam, cam_images in rows.images.items():
                counts = np.bincount(sampled, minlength=len(cam_images))
                stats[_video_key(cam)] = image_stats(cam_images, counts, quantiles=v3)
            stats = {key: stats[key] for key in features}  # in the features' order, as LeRobot
            # one video frame per dataset row: each image repeated over the rows it serves
            images = {_video_key(cam): cam_images for cam, cam_images in rows.images.items()}
            repeats = np.bincount(rows.image_of_row).tolist()  # rows are in image order
            writer.add_episode(lerobot_v30.EpisodeOut(ep_index, task, table, images, repeats, stats))
            provenance.append(
                {
                    "episode_index": ep_index,
                    "file": str(path.relative_to(in_dir)),
                    "episode_id": ep.episode_id,
                    "task": ep.task,
                    "canonical_prompt": ep.canonical_prompt,
                    "rollout_prompt": ep.rollout_prompt,
                    "seed": ep.seed,
                    "success": ep.success,
                    "source": ep.source,
                    "action_space": str(ep.action_space),
                    "chunks": len(ep.chunks),
                    "rows": n,
                    "rows_with_own_observation": rows.own_observation,
                }
            )
            report.episodes += 1
            report.frames += n
            if progress is not None:
                progress(path)
        if schema is None or writer is None:
            raise ExportError(
                f"{in_dir}: every episode file was skipped ({'; '.join(report.skipped[:3])}...); "
                "nothing to export (drop --only-success to include unlabelled or failed episodes)"
            )
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    for cam in schema.cameras:
        key = _video_key(cam)
        features[key]["info"] = video_info(writer.first_video(key), _encoding(config) if v3 else None)
    report.tasks = len(tasks)
    info = {
        "robot_type": config.robot_type,
        "total_episodes": report.episodes,
        "total_frames": report.frames,
        "total_tasks": len(tasks),
        "chunks_size": CHUNKS_SIZE,
        "fps": schema.fps,
        "splits": {"train": f"0:{report.episodes}"},
        "features": features,
    }
    (root / "meta").mkdir(parents=True, exist_ok=True)
    writer.write_meta(info, tasks)
    _write_jsonl(root / "meta" / "pde_episodes.jsonl", provenance)
