"""The LeRobotDataset v3.0 on-disk layout (LeRobot 0.6.1's ``CODEBASE_VERSION = "v3.0"``), written
from the rows ``pde_storage.lerobot_export`` makes of our episodes::

    OUT/meta/info.json                              codebase_version, fps, features, path templates
    OUT/meta/stats.json                             the dataset's stats, q01..q99 included
    OUT/meta/tasks.parquet                          task_index, indexed by the task text (pandas)
    OUT/meta/episodes/chunk-000/file-000.parquet    per episode: tasks, length, where its rows and
                                                    frames are, its stats (stats/<feature>/<stat>)
    OUT/meta/pde_episodes.jsonl                     ours: source file, episode id, seed, success
    OUT/data/chunk-000/file-000.parquet             the rows of many episodes, in order
    OUT/videos/<video_key>/chunk-000/file-000.mp4   the frames of many episodes, one after another

Episodes follow each other in a data file until it holds about ``DATA_FILE_SIZE_MB`` of rows (arrow
size), and in a video file until ``VIDEO_FILE_SIZE_MB`` of packets are written; then the next file
starts (file-001, ...; after ``CHUNKS_SIZE`` files the next chunk). An episode's frames in a video
file start at ``from_timestamp`` = the frames before it / fps, and its row at ``timestamp`` t shows
the frame at ``from_timestamp + t``: the one video writer keeps pts = frame number in a 1/fps time
base across episodes, where LeRobot concatenates per-episode files (the same times).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pde_storage.lerobot_stats import Stats, aggregate_stats, as_lists
from pde_storage.video import VideoEncoding, VideoWriter

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk-XXX folder (LeRobot's DEFAULT_CHUNK_SIZE)
DATA_FILE_SIZE_MB = 100  # LeRobot's DEFAULT_DATA_FILE_SIZE_IN_MB
VIDEO_FILE_SIZE_MB = 200  # LeRobot's DEFAULT_VIDEO_FILE_SIZE_IN_MB
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
MB = 1024**2


def next_file(chunk: int, file: int) -> tuple[int, int]:
    """The (chunk, file) after this one (LeRobot's ``update_chunk_file_indices``)."""
    return (chunk + 1, 0) if file + 1 == CHUNKS_SIZE else (chunk, file + 1)


@dataclass(frozen=True)
class EpisodeOut:
    """One episode as either layout writes it."""

    index: int
    task: str
    table: pa.Table  # its rows
    images: dict[str, list[np.ndarray]]  # video key -> its images in row order
    repeats: list[int]  # how many rows (video frames) each image is shown
    stats: dict[str, Stats]


@dataclass
class _Video:
    writer: VideoWriter
    chunk: int
    file: int


@dataclass
class V30Writer:
    """Episodes in, a v3.0 dataset out: ``add_episode`` per episode in order, then ``finish``."""

    root: Path
    fps: int
    encoding: VideoEncoding
    data_file_size_mb: float = DATA_FILE_SIZE_MB
    video_file_size_mb: float = VIDEO_FILE_SIZE_MB
    episodes: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Stats]] = field(default_factory=list)
    _data: pq.ParquetWriter | None = None
    _data_at: tuple[int, int] = (0, 0)
    _data_bytes: int = 0
    _videos: dict[str, _Video] = field(default_factory=dict)
    _frames: int = 0

    def add_episode(self, ep: EpisodeOut) -> None:
        table = ep.table
        if self._data is not None and self._data_bytes >= self.data_file_size_mb * MB:
            self._data.close()
            self._data, self._data_at, self._data_bytes = None, next_file(*self._data_at), 0
        if self._data is None:
            path = self.root / DATA_PATH.format(chunk_index=self._data_at[0], file_index=self._data_at[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self._data = pq.ParquetWriter(path, table.schema, compression="snappy")
        self._data.write_table(table)
        self._data_bytes += table.nbytes
        n = table.num_rows
        row: dict[str, Any] = {
            "episode_index": ep.index,
            "tasks": [ep.task],
            "length": n,
            "data/chunk_index": self._data_at[0],
            "data/file_index": self._data_at[1],
            "dataset_from_index": self._frames,
            "dataset_to_index": self._frames + n,
        }
        for key, chunk_images in ep.images.items():
            video = self._video(key)
            start = video.writer.frames_written
            video.writer.add(chunk_images, ep.repeats)
            row[f"videos/{key}/chunk_index"] = video.chunk
            row[f"videos/{key}/file_index"] = video.file
            row[f"videos/{key}/from_timestamp"] = start / self.fps
            row[f"videos/{key}/to_timestamp"] = video.writer.frames_written / self.fps
        for key, s in as_lists(ep.stats).items():
            row.update({f"stats/{key}/{name}": v for name, v in s.items()})
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
        self.episodes.append(row)
        self.stats.append(ep.stats)
        self._frames += n

    def _video(self, key: str) -> _Video:
        """The open video file of ``key``, a new one when the open one is full."""
        video = self._videos.get(key)
        if video is not None and video.writer.bytes_written < self.video_file_size_mb * MB:
            return video
        if video is None:
            chunk, file = 0, 0
        else:
            video.writer.close()
            chunk, file = next_file(video.chunk, video.file)
        path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
        video = self._videos[key] = _Video(VideoWriter(path, self.fps, self.encoding), chunk, file)
        return video

    def first_video(self, key: str) -> Path:
        """The first video file of ``key`` (LeRobot reads a feature's video info from it)."""
        return self.root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)

    def close(self) -> None:
        """Finish the open data and video files."""
        self._shut(finish=True)

    def abort(self) -> None:
        """Close the open files as they are (after an error; the caller deletes the folder)."""
        self._shut(finish=False)

    def _shut(self, finish: bool) -> None:
        if self._data is not None:
            self._data.close()
            self._data = None
        for video in self._videos.values():
            if finish:
                video.writer.close()
            else:
                video.writer.abort()
        self._videos.clear()

    def write_meta(self, info: dict[str, Any], tasks: dict[str, int]) -> None:
        """meta/ after ``close``: ``info`` is what both layouts share (fps, features with their video
        info, totals, robot type); ``tasks``: text -> task_index."""
        meta = self.root / "meta"
        episodes = self.root / EPISODES_PATH.format(chunk_index=0, file_index=0)
        episodes.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.episodes), episodes)
        write_tasks(self.root / TASKS_PATH, tasks)
        (meta / "stats.json").write_text(json.dumps(as_lists(aggregate_stats(self.stats)), indent=4))
        full = {
            "codebase_version": CODEBASE_VERSION,
            **info,
            "data_files_size_in_mb": self.data_file_size_mb,
            "video_files_size_in_mb": self.video_file_size_mb,
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH,
        }
        (meta / "info.json").write_text(json.dumps(full, indent=4, ensure_ascii=False))


def write_tasks(path: Path, tasks: dict[str, int]) -> None:
    """meta/tasks.parquet as LeRobot's pandas frame: a ``task_index`` column indexed by the task
    text (stored as the column ``task``, named as the index in the pandas metadata)."""
    order = sorted(tasks, key=tasks.__getitem__)
    table = pa.table({"task_index": pa.array([tasks[t] for t in order], pa.int64()), "task": order})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}), path)
