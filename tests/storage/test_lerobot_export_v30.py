"""The LeRobotDataset v3.0 export (the default): learner-style episode files with random states and
actions, exported and read back with pyarrow and PyAV against LeRobot 0.6.1's layout (the fixture
LeRobot itself wrote, tests/fixtures/lerobot_v30/, says what its files look like). LeRobot loading
and training on it: bench/check_lerobot_roundtrip.py (its own venv)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from pde_contract.episodes import EpisodeFile, write_episode
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import state_vector
from pde_storage.lerobot_export import ExportConfig, ExportError, export_lerobot
from pde_storage.lerobot_stats import HISTOGRAM_BINS, QUANTILE_KEYS, QUANTILES
from tests.helpers import pde_command, subprocess_env
from tests.storage.factories import make_episode_file

FIXTURE = Path(__file__).parents[1] / "fixtures" / "lerobot_v30" / "dataset"
KEYS = ("observation.images.external", "observation.images.wrist")
CHUNKS = (3, 4, 2)  # per episode; the last chunk of each has 4 rows, the others 10
# AV1 at crf 30 on the factories' 64x48 frames: mean absolute error per frame in levels of 255
MAX_MEAN_ABS_ERROR = 6.0


def _episodes(root: Path) -> list[EpisodeFile]:
    rng = np.random.default_rng(7)
    out = []
    for e, n_chunks in enumerate(CHUNKS):
        ep = make_episode_file(e, "put_green_container_in_bowl", n_chunks=n_chunks)
        ep.rollout_prompt = f"prompt {e % 2}"
        for chunk in ep.chunks:
            chunk.actions = rng.normal(0.0, 0.01, size=(10, 7)).astype(np.float32)
            chunk.observation.state.joint_positions_rad = rng.uniform(-2.0, 2.0, 7)
            chunk.observation.state.ee_position_m = rng.uniform(0.2, 0.6, 3)
            chunk.observation.state.gripper_width_m = float(rng.uniform(0.0, 0.08))
        ep.chunks[-1].actions = ep.chunks[-1].actions[:4]
        write_episode(root / f"{e}.episode", ep)
        out.append(ep)
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[EpisodeFile]]:
    tmp = tmp_path_factory.mktemp("v30")
    sources = _episodes(tmp / "eps")
    report = export_lerobot(tmp / "eps", tmp / "ds")
    assert (report.episodes, report.frames, report.tasks) == (3, 3 * 4 + 20 + 30 + 10, 2)
    return tmp / "ds", sources


def _lengths(sources: list[EpisodeFile]) -> list[int]:
    return [sum(len(c.actions) for c in ep.chunks) for ep in sources]


def _episode_index(root: Path) -> list[dict[str, Any]]:
    return pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()


def test_layout_and_info_are_lerobot_0_6_1s(exported: tuple[Path, list[EpisodeFile]]) -> None:
    root, sources = exported
    info = json.loads((root / "meta/info.json").read_text())
    theirs = json.loads((FIXTURE / "meta/info.json").read_text())
    for key in ("codebase_version", "data_path", "video_path", "chunks_size"):
        assert info[key] == theirs[key], key
    assert info["data_files_size_in_mb"] == 100 and info["video_files_size_in_mb"] == 200
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (
        3,
        sum(_lengths(sources)),
        2,
    )
    assert info["fps"] == 10 and info["splits"] == {"train": "0:3"}
    assert "total_videos" not in info and "total_chunks" not in info  # v2.1's; LeRobot 0.6.1 warns
    video_info = info["features"][KEYS[0]]["info"]
    assert set(video_info) <= set(theirs["features"][KEYS[0]]["info"])
    assert video_info["video.codec"] == "av1" and video_info["is_depth_map"] is False
    assert (video_info["video.g"], video_info["video.crf"]) == (2, 30)
    for path in ("data/chunk-000/file-000.parquet", "meta/tasks.parquet", "meta/stats.json"):
        assert (root / path).is_file(), path
    assert sorted(p.name for p in (root / "videos").iterdir()) == list(KEYS)
    # tasks: a pandas frame indexed by the task text, as LeRobot's (read with pandas there)
    tasks, their_tasks = (
        pq.read_table(root / "meta/tasks.parquet"),
        pq.read_table(FIXTURE / "meta/tasks.parquet"),
    )
    assert tasks.schema.equals(their_tasks.schema, check_metadata=False)
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]
    assert tasks.to_pydict() == {"task_index": [0, 1], "task": ["prompt 0", "prompt 1"]}
    # the data file's Hugging Face features in LeRobot 0.6.1's spelling
    hf = json.loads(pq.read_schema(root / "data/chunk-000/file-000.parquet").metadata[b"huggingface"])
    their_hf = json.loads(
        pq.read_schema(FIXTURE / "data/chunk-000/file-000.parquet").metadata[b"huggingface"]
    )
    for key in ("action", "timestamp", "index"):
        assert hf["info"]["features"][key] == their_hf["info"]["features"][key]


def test_the_episode_index_says_where_rows_and_frames_are(exported: tuple[Path, list[EpisodeFile]]) -> None:
    root, sources = exported
    episodes = _episode_index(root)
    their_columns = pq.read_schema(FIXTURE / "meta/episodes/chunk-000/file-000.parquet").names
    # every column LeRobot writes, in its order (our extra index columns have stats of their own)
    ours = [c for c in pq.read_schema(root / "meta/episodes/chunk-000/file-000.parquet").names]
    assert [c for c in ours if c in their_columns] == [c for c in their_columns if c in ours]
    assert set(their_columns) <= set(ours)
    start = 0
    for e, (ep, n) in enumerate(zip(episodes, _lengths(sources), strict=True)):
        assert (ep["episode_index"], ep["length"], ep["tasks"]) == (e, n, [f"prompt {e % 2}"])
        assert (ep["dataset_from_index"], ep["dataset_to_index"]) == (start, start + n)
        for key in KEYS:
            assert ep[f"videos/{key}/from_timestamp"] == pytest.approx(start / 10, abs=1e-12)
            assert ep[f"videos/{key}/to_timestamp"] == pytest.approx((start + n) / 10, abs=1e-12)
            assert (ep[f"videos/{key}/chunk_index"], ep[f"videos/{key}/file_index"]) == (0, 0)
        start += n


def test_rows_are_the_sources_bit_for_bit(exported: tuple[Path, list[EpisodeFile]]) -> None:
    root, sources = exported
    rows = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pydict()
    action = np.concatenate([c.actions for ep in sources for c in ep.chunks])
    state = np.concatenate(
        [
            np.repeat(state_vector(c.observation.state)[None], len(c.actions), 0)
            for ep in sources
            for c in ep.chunks
        ]
    )
    np.testing.assert_array_equal(np.asarray(rows["action"], np.float32), action)
    np.testing.assert_array_equal(np.asarray(rows["observation.state"], np.float32), state)
    lengths = _lengths(sources)
    assert rows["index"] == list(range(sum(lengths)))
    assert rows["episode_index"] == [e for e, n in enumerate(lengths) for _ in range(n)]
    assert rows["frame_index"] == [i for n in lengths for i in range(n)]
    np.testing.assert_allclose(rows["timestamp"], [i / 10 for n in lengths for i in range(n)], atol=1e-6)


def test_each_row_shows_its_frame_at_from_timestamp_plus_timestamp(
    exported: tuple[Path, list[EpisodeFile]],
) -> None:
    root, sources = exported
    rows = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pydict()
    episodes = _episode_index(root)
    for key in KEYS:
        with av.open(str(root / f"videos/{key}/chunk-000/file-000.mp4")) as f:
            decoded = [(float(fr.time or 0.0), fr.to_ndarray(format="rgb24")) for fr in f.decode(video=0)]
        assert len(decoded) == len(rows["index"])
        source = [
            decode_jpeg(
                next(c for c in chunk.observation.cameras if f"observation.images.{c.name}" == key).jpeg
            )
            for ep in sources
            for chunk in ep.chunks
            for _ in chunk.actions
        ]
        for i, (ep, t) in enumerate(zip(rows["episode_index"], rows["timestamp"], strict=True)):
            from_s = episodes[ep][f"videos/{key}/from_timestamp"]
            shown_s, frame = decoded[i]
            assert abs(shown_s - (from_s + t)) < 1e-4  # LeRobot's tolerance_s
            assert np.abs(frame.astype(float) - source[i]).mean() < MAX_MEAN_ABS_ERROR


def test_stats_carry_lerobots_quantiles(exported: tuple[Path, list[EpisodeFile]]) -> None:
    root, _ = exported
    rows = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pydict()
    episodes = _episode_index(root)
    dataset = json.loads((root / "meta/stats.json").read_text())
    their = json.loads((FIXTURE / "meta/stats.json").read_text())
    assert set(dataset["action"]) == set(their["action"])  # min max mean std count q01 q10 q50 q90 q99
    for key in ("observation.state", "action", "timestamp"):
        counts = np.array([ep[f"stats/{key}/count"][0] for ep in episodes], dtype=float)
        for q_key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
            per_episode = np.array([ep[f"stats/{key}/{q_key}"] for ep in episodes])
            # LeRobot's dataset quantile: the episodes', weighted by their row counts
            np.testing.assert_allclose(dataset[key][q_key], counts @ per_episode / counts.sum(), rtol=1e-12)
            for e, ep in enumerate(episodes):
                values = np.asarray(rows[key], dtype=np.float64)[np.asarray(rows["episode_index"]) == e]
                values = values.reshape(len(values), -1)
                span = values.max(axis=0) - values.min(axis=0)
                # the histogram estimate is within one of its 5000 bins of the order statistic
                exact = np.quantile(values, q, axis=0, method="inverted_cdf")
                assert np.all(
                    np.abs(np.asarray(ep[f"stats/{key}/{q_key}"]) - exact) <= span / HISTOGRAM_BINS + 1e-9
                )
    for key in KEYS:
        assert np.asarray(dataset[key]["q99"]).shape == (3, 1, 1)
        assert np.all(np.asarray(dataset[key]["q01"]) <= np.asarray(dataset[key]["q99"]))


def test_files_roll_over_at_their_size_and_read_back_the_same(tmp_path: Path) -> None:
    from learner.lerobot_dataset import read_lerobot_dataset
    from pde_contract.messages import ActionSpace

    _episodes(tmp_path / "eps")
    export_lerobot(tmp_path / "eps", tmp_path / "one", ExportConfig(vcodec="h264"))
    small = ExportConfig(vcodec="h264", data_file_size_mb=1e-6, video_file_size_mb=1e-6)
    export_lerobot(tmp_path / "eps", tmp_path / "many", small)
    episodes = _episode_index(tmp_path / "many")
    assert [ep["data/file_index"] for ep in episodes] == [0, 1, 2]
    assert [ep[f"videos/{KEYS[1]}/file_index"] for ep in episodes] == [0, 1, 2]
    assert [ep[f"videos/{KEYS[1]}/from_timestamp"] for ep in episodes] == [0.0, 0.0, 0.0]
    assert (tmp_path / f"many/videos/{KEYS[0]}/chunk-000/file-002.mp4").is_file()
    one = read_lerobot_dataset(tmp_path / "one", 10, ActionSpace.EE_DELTA)
    many = read_lerobot_dataset(tmp_path / "many", 10, ActionSpace.EE_DELTA)
    np.testing.assert_array_equal(one.actions, many.actions)
    np.testing.assert_array_equal(
        [state_vector(o.state) for o in one.observations], [state_vector(o.state) for o in many.observations]
    )
    assert one.prompts == many.prompts


def test_a_version_we_cannot_write_is_refused(tmp_path: Path) -> None:
    _episodes(tmp_path / "eps")
    with pytest.raises(ExportError, match=r"version 'v2\.0': choose one of v3\.0, v2\.1"):
        export_lerobot(tmp_path / "eps", tmp_path / "ds", ExportConfig(version="v2.0"))  # type: ignore[arg-type]


def test_cli_writes_v30_by_default_and_v21_on_request(tmp_path: Path) -> None:
    import subprocess

    _episodes(tmp_path / "eps")
    for extra, version in (([], "v3.0"), (["--version", "v2.1"], "v2.1")):
        out = tmp_path / version
        cmd = pde_command(
            "data", "export-lerobot", "--in", str(tmp_path / "eps"), "--out", str(out), "--vcodec", "h264"
        )
        done = subprocess.run(
            [*cmd, *extra], env=subprocess_env(), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert json.loads((out / "meta/info.json").read_text())["codebase_version"] == version
