"""SFT that streams: a dataset larger than ``SFTConfig.memory_budget_mb`` is decoded episode by episode
in DataLoader worker processes through a bounded shuffle buffer; image-only LeRobot datasets
(``use_videos=False``) read as their video twins do; ``stride`` thins the rows; ``sft_episodes``
counts episodes."""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from learner.lerobot_dataset import LeRobotSource, read_lerobot_dataset
from learner.policies.vla import SmallVLAPolicy, VLAConfig
from learner.sft import SFTConfig, lerobot_source, run_sft
from learner.sft_stream import open_stream
from learner.synthetic import synthetic_episode
from pde_contract.episodes import write_episode
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import ActionSpace
from pde_storage.lerobot_export import ExportConfig, export_lerobot
from tests.storage.factories import make_episode_file, make_observation

CANON = "put the green container in the bowl"
VLA = VLAConfig(text_encoder="fake-hashing", hidden_dim=16, image_size_px=16, chunk_len=4)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """Four exported episodes of 3 chunks x 10 rows whose rows 1.. were observed on their own
    (episode format 3): every row is a sample."""
    for e in range(4):
        ep = make_episode_file(e, "put_green_container_in_bowl", n_chunks=3, success=True)
        ep.rollout_prompt = ep.canonical_prompt = CANON
        for c, chunk in enumerate(ep.chunks):
            chunk.row_observations = {r: make_observation(100 * e + 10 * c + r) for r in range(1, 10)}
        write_episode(tmp_path / "eps" / f"{e}.episode", ep)
    export_lerobot(tmp_path / "eps", tmp_path / "ds", ExportConfig(vcodec="h264", crf=0))
    return tmp_path / "ds"


def _live_children() -> list[multiprocessing.process.BaseProcess]:
    return multiprocessing.active_children()


def test_a_dataset_over_the_budget_streams_through_workers_and_they_end(
    dataset: Path, tmp_path: Path
) -> None:
    threads_before = set(threading.enumerate())
    policy = SmallVLAPolicy(VLA)
    source = lerobot_source(policy, dataset)
    assert len(source) == 4
    # 120 rows, each its own observation; a budget of ~10 samples forces the stream
    stream = open_stream(source, policy.preprocess, memory_budget_mb=0.02, workers=2)
    assert len(stream) == 120 and 1 <= stream.buffer_samples < 120
    seen: list[tuple[float, ...]] = []
    batches = stream.batches(batch_size=6, seed=3)
    try:
        for _ in range(60):  # three passes' worth of draws
            obs, actions, prompts, tasks = next(batches)
            assert obs.images.shape == (6, 2, 3, 16, 16) and actions.shape == (6, 4, 7)
            assert set(prompts) == set(tasks) == {CANON}  # a LeRobotDataset's task is its text
            seen += [tuple(s) for s in obs.state.numpy().round(6)]
    finally:
        batches.close()
    assert _live_children() == []  # the worker processes ended with the generator
    assert set(threading.enumerate()) <= threads_before | {threading.main_thread()}
    # every sample came out (each row's own state), none invented
    states = {tuple(s) for s in stream.states.astype(np.float32).round(6)}
    assert set(seen) == states


def test_the_stream_is_the_same_for_a_seed(dataset: Path) -> None:
    policy = SmallVLAPolicy(VLA)
    stream = open_stream(lerobot_source(policy, dataset), policy.preprocess, 0.02, workers=2)
    runs = []
    for _ in range(2):
        batches = stream.batches(5, seed=1)
        try:
            runs.append([next(batches)[0].state.numpy().copy() for _ in range(10)])
        finally:
            batches.close()
    np.testing.assert_array_equal(np.stack(runs[0]), np.stack(runs[1]))


def test_run_sft_streams_over_budget_and_counts_episodes(dataset: Path, tmp_path: Path) -> None:
    cfg = SFTConfig(steps=3, batch_size=4, memory_budget_mb=0.02, loader_workers=1)
    _, metrics, cached = run_sft("", tmp_path / "ck", VLA, cfg, lerobot_dataset=dataset)
    assert not cached and metrics["sft_streamed"] == 1.0
    # episodes, not the dataset's files (4 episodes are 8+ files: data, meta, 2 videos, ...)
    assert metrics["sft_episodes"] == 4.0 and metrics["sft_samples"] == 120.0
    assert np.isfinite(metrics["sft_loss_last"])
    _, small, _ = run_sft(
        "", tmp_path / "ck2", VLA, SFTConfig(steps=1, batch_size=4), lerobot_dataset=dataset
    )
    assert small["sft_streamed"] == 0.0 and small["sft_samples"] == 120.0  # fits: held in memory
    assert _live_children() == []


def test_stride_takes_every_nth_row(dataset: Path) -> None:
    every = LeRobotSource(dataset, 4, ActionSpace.EE_DELTA)
    third = LeRobotSource(dataset, 4, ActionSpace.EE_DELTA, stride=3)
    assert len(every.vectors(0).states) == 30 and len(third.vectors(0).states) == 10
    np.testing.assert_array_equal(third.vectors(0).states, every.vectors(0).states[::3])


def _as_image_dataset(video_root: Path, out: Path) -> None:
    """``video_root`` (v3.0) rewritten as LeRobot writes use_videos=False: each camera a
    ``dtype: image`` feature, its frames PNG bytes in the parquet rows (datasets' Image struct)."""
    import shutil

    shutil.copytree(video_root, out)
    info = json.loads((out / "meta/info.json").read_text())
    keys = [k for k, v in info["features"].items() if v["dtype"] == "video"]
    frames: dict[str, list[bytes]] = {k: [] for k in keys}
    source = LeRobotSource(video_root, 1, ActionSpace.EE_DELTA)
    for i in range(len(source)):
        for obs in source.samples(i).observations:
            for f in obs.cameras:
                ok, png = cv2.imencode(".png", decode_jpeg(f.jpeg)[:, :, ::-1])
                assert ok
                frames[f"observation.images.{f.name}"].append(png.tobytes())
    for path in sorted((out / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        n = table.num_rows
        for k in keys:
            cells = [{"bytes": b, "path": None} for b in frames[k][:n]]
            frames[k] = frames[k][n:]
            table = table.append_column(
                k, pa.array(cells, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
            )
        pq.write_table(table, path)
    for k in keys:
        info["features"][k]["dtype"] = "image"
        info["features"][k].pop("info", None)
    info["total_videos"] = 0
    (out / "meta/info.json").write_text(json.dumps(info))
    shutil.rmtree(out / "videos")


def test_an_image_only_dataset_reads_as_its_video_twin(dataset: Path, tmp_path: Path) -> None:
    _as_image_dataset(dataset, tmp_path / "images")
    videos = read_lerobot_dataset(dataset, 4, ActionSpace.EE_DELTA)
    images = read_lerobot_dataset(tmp_path / "images", 4, ActionSpace.EE_DELTA)
    assert len(images.observations) == len(videos.observations) == 120
    np.testing.assert_array_equal(images.actions, videos.actions)
    for a, b in zip(images.observations, videos.observations, strict=True):
        assert [f.name for f in a.cameras] == [f.name for f in b.cameras]
        for fa, fb in zip(a.cameras, b.cameras, strict=True):
            # the same frames: the PNGs hold the video rows' frames after one JPEG round trip
            # (quality 95), which the image rows then take a second time
            diff = np.abs(decode_jpeg(fa.jpeg).astype(int) - decode_jpeg(fb.jpeg).astype(int))
            assert diff.mean() < 1.0 and diff.max() <= 12


def test_synthetic_episodes_without_row_observations_train_on_chunk_starts(tmp_path: Path) -> None:
    policy = SmallVLAPolicy(VLA)
    rng = np.random.default_rng(0)
    for i in range(2):
        write_episode(
            tmp_path / "eps" / f"d{i}.msgpack",
            synthetic_episode(policy, rng, 3, CANON, CANON, True, 24, f"d{i}"),
        )
    export_lerobot(tmp_path / "eps", tmp_path / "ds", ExportConfig(vcodec="h264"))
    assert len(read_lerobot_dataset(tmp_path / "ds", 4, ActionSpace.EE_DELTA).observations) == 6
