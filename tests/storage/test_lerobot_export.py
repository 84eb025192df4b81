"""The LeRobotDataset v2.1 export (``--version v2.1``; v3.0, the default, in
test_lerobot_export_v30.py): expert demos recorded by the real recorder, and learner-style episode
files, exported and read back with pyarrow, PyAV and numpy (LeRobot itself is not in our venv: its
releases pin torch and need Python >= 3.12; bench/check_lerobot_roundtrip.py runs it on v3.0)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from pde_contract.episodes import EpisodeFile, observation_of_row, read_episode, write_episode
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import STATE_VECTOR_NAMES, Observation, RobotState, state_vector
from pde_storage.lerobot_export import ExportConfig, ExportError, export_lerobot, find_episode_files
from pde_storage.lerobot_stats import image_sample_indices, image_stats
from robot_server.sim.recorder import RecordConfig, record_demos
from tests.helpers import pde_command, subprocess_env
from tests.storage.factories import make_episode_file, make_observation

TASKS = ["put_green_container_in_bowl", "put_tape_on_top_rack"]
WIDTH, HEIGHT = 48, 40
# Lossy video (4:2:0 chroma, RGB->YUV rounding, then the codec): mean absolute error per decoded
# frame, in levels of 255, against the source frame (the JPEG decode). Measured on two expert
# episodes at 48x40 when a chunk's frame was repeated over its rows: AV1 crf 30 at most 3.8, H.264
# crf 23 at most 4.8 (at 224x224: 1.9 and 2.3). With each row's own frame (every frame moves) AV1
# reached 6.7 on the wrist camera: the codec spends fewer bits per changing frame at one crf.
MAX_MEAN_ABS_ERROR = 8.0
# LeRobot's decoder refuses frames further than this from the asked timestamp (tolerance_s).
LEROBOT_TOLERANCE_S = 1e-4
V21 = ExportConfig(version="v2.1")


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demos")
    record_demos(out, RecordConfig(tasks=TASKS, episodes_per_task=1, image_width=WIDTH, image_height=HEIGHT))
    return out


@pytest.fixture(scope="module")
def dataset(demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "lerobot"
    report = export_lerobot(demos, out, V21)
    assert report.episodes == 2 and not report.skipped
    return out


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _sources(demos: Path) -> list[EpisodeFile]:
    return [read_episode(p) for p in find_episode_files(demos)]


def _decode_video(path: Path) -> tuple[list[np.ndarray], list[float]]:
    with av.open(str(path)) as f:
        frames = list(f.decode(video=0))
    return [fr.to_ndarray(format="rgb24") for fr in frames], [float(fr.time or 0.0) for fr in frames]


def _row_observations(ep: EpisodeFile) -> list[Observation]:
    """The observation of every dataset row: the one read at its own tick."""
    return [observation_of_row(c, r)[0] for c in ep.chunks for r in range(len(c.actions))]


def _source_frames(ep: EpisodeFile, camera: str) -> list[np.ndarray]:
    """The image of every dataset row: the frame read at its own tick."""
    return [
        decode_jpeg(next(f for f in obs.cameras if f.name == camera).jpeg) for obs in _row_observations(ep)
    ]


def test_layout_and_info_totals(dataset: Path, demos: Path) -> None:
    info = json.loads((dataset / "meta/info.json").read_text())
    sources = _sources(demos)
    lengths = [sum(len(c.actions) for c in ep.chunks) for ep in sources]
    cameras = sorted(f.name for f in sources[0].chunks[0].observation.cameras)
    assert info["codebase_version"] == "v2.1"
    assert info["fps"] == 10
    assert info["total_episodes"] == 2
    assert info["total_frames"] == sum(lengths)
    assert info["total_tasks"] == 2
    assert info["total_videos"] == 2 * len(cameras)
    assert info["total_chunks"] == 1 and info["chunks_size"] == 1000
    assert info["splits"] == {"train": "0:2"}
    for ep_index in range(2):
        assert (dataset / info["data_path"].format(episode_chunk=0, episode_index=ep_index)).is_file()
        for cam in cameras:
            video = info["video_path"].format(
                episode_chunk=0, video_key=f"observation.images.{cam}", episode_index=ep_index
            )
            assert (dataset / video).is_file()
    assert (dataset / "data/chunk-000/episode_000001.parquet").is_file()
    assert (dataset / f"videos/chunk-000/observation.images.{cameras[0]}/episode_000000.mp4").is_file()
    for cam in cameras:
        ft = info["features"][f"observation.images.{cam}"]
        assert ft["dtype"] == "video"
        assert ft["shape"] == [HEIGHT, WIDTH, 3]
        assert ft["names"] == ["height", "width", "channels"]
        assert ft["info"]["video.codec"] == "av1" and ft["info"]["video.fps"] == 10
        assert (ft["info"]["video.height"], ft["info"]["video.width"]) == (HEIGHT, WIDTH)
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert info["features"][key]["shape"] == [1]
    assert info["features"]["action"]["shape"] == [7]
    assert len(info["features"]["action"]["names"]) == 7
    assert info["features"]["observation.state"]["shape"] == [15]

    episodes = _jsonl(dataset / "meta/episodes.jsonl")
    tasks = _jsonl(dataset / "meta/tasks.jsonl")
    assert [e["episode_index"] for e in episodes] == [0, 1]
    assert [e["length"] for e in episodes] == lengths
    assert [e["tasks"] for e in episodes] == [[ep.rollout_prompt] for ep in sources]
    assert tasks == [{"task_index": i, "task": ep.rollout_prompt} for i, ep in enumerate(sources)]
    provenance = _jsonl(dataset / "meta/pde_episodes.jsonl")
    assert [p["episode_id"] for p in provenance] == [ep.episode_id for ep in sources]
    assert [p["seed"] for p in provenance] == [ep.seed for ep in sources]


def test_parquet_columns_match_features_and_sources(dataset: Path, demos: Path) -> None:
    info = json.loads((dataset / "meta/info.json").read_text())
    tasks = {t["task"]: t["task_index"] for t in _jsonl(dataset / "meta/tasks.jsonl")}
    non_video = {k: ft for k, ft in info["features"].items() if ft["dtype"] != "video"}
    next_index = 0
    for ep_index, ep in enumerate(_sources(demos)):
        table = pq.read_table(dataset / f"data/chunk-000/episode_{ep_index:06d}.parquet")
        assert table.column_names == list(non_video)
        n = table.num_rows
        assert n == sum(len(c.actions) for c in ep.chunks)
        cols = {name: table.column(name).to_numpy() for name in non_video if non_video[name]["shape"] == [1]}
        for name, ft in non_video.items():
            arrow_type = table.schema.field(name).type
            if ft["shape"] == [1]:
                assert str(arrow_type) == ("float" if ft["dtype"] == "float32" else ft["dtype"])
            else:
                assert str(arrow_type.value_type) == "float" and arrow_type.list_size == ft["shape"][0]
        # LeRobot's load_dataset("parquet") restores the features from this metadata
        hf = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
        assert hf["action"] == {
            "feature": {"dtype": "float32", "id": None, "_type": "Value"},
            "length": 7,
            "id": None,
            "_type": "Sequence",
        }
        np.testing.assert_array_equal(cols["frame_index"], np.arange(n))
        np.testing.assert_array_equal(cols["index"], np.arange(next_index, next_index + n))
        np.testing.assert_array_equal(cols["episode_index"], np.full(n, ep_index))
        np.testing.assert_array_equal(cols["task_index"], np.full(n, tasks[ep.rollout_prompt]))
        assert cols["timestamp"].dtype == np.float32
        np.testing.assert_allclose(cols["timestamp"], np.arange(n) / 10.0, atol=1e-6)
        next_index += n

        action = np.stack(table.column("action").to_numpy(zero_copy_only=False))
        state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
        np.testing.assert_array_equal(action, np.concatenate([c.actions for c in ep.chunks]))
        rows = [len(c.actions) for c in ep.chunks]
        # Every row its own observation: the recorder read one at each row's tick.
        assert all(observation_of_row(c, r)[1] for c in ep.chunks for r in range(len(c.actions)))
        expected_state = np.stack([state_vector(o.state) for o in _row_observations(ep)])
        np.testing.assert_array_equal(state, expected_state)
        assert len(np.unique(state, axis=0)) > len(rows)  # the arm moved within chunks
        np.testing.assert_array_equal(cols["chunk_index"], np.repeat(np.arange(len(rows)), rows))
        np.testing.assert_array_equal(cols["chunk_row"], np.concatenate([np.arange(t) for t in rows]))


def test_state_columns_are_named_in_the_order_of_the_vector() -> None:
    state = RobotState(
        joint_positions_rad=np.arange(10.0, 17.0),
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=np.array([1.0, 2.0, 3.0]),
        ee_quat_xyzw=np.array([4.0, 5.0, 6.0, 7.0]),
        gripper_width_m=8.0,
        robot_time_s=0.0,
    )
    named = dict(zip(STATE_VECTOR_NAMES, state_vector(state), strict=True))
    assert named["ee_y_m"] == 2.0 and named["ee_qw"] == 7.0 and named["gripper_width_m"] == 8.0
    assert named["joint_1_rad"] == 10.0 and named["joint_7_rad"] == 16.0


def _check_videos(dataset: Path, sources: list[EpisodeFile], codec: str) -> None:
    info = json.loads((dataset / "meta/info.json").read_text())
    lengths = [e["length"] for e in _jsonl(dataset / "meta/episodes.jsonl")]
    for ep_index, ep in enumerate(sources):
        for frame in ep.chunks[0].observation.cameras:
            key = f"observation.images.{frame.name}"
            path = dataset / f"videos/chunk-000/{key}/episode_{ep_index:06d}.mp4"
            with av.open(str(path)) as f:
                assert (
                    f.streams.video[0].codec_context.name
                    in {"av1": ("libdav1d", "av1"), "h264": ("h264",)}[codec]
                )
            images, times = _decode_video(path)
            source = _source_frames(ep, frame.name)
            assert len(images) == len(source) == lengths[ep_index]
            assert all(img.shape == (HEIGHT, WIDTH, 3) for img in images)
            np.testing.assert_allclose(times, np.arange(len(images)) / info["fps"], atol=LEROBOT_TOLERANCE_S)
            errors = [
                np.abs(a.astype(float) - b.astype(float)).mean() for a, b in zip(images, source, strict=True)
            ]
            assert max(errors) <= MAX_MEAN_ABS_ERROR, (codec, frame.name, max(errors))


def test_videos_decode_to_the_source_frames(dataset: Path, demos: Path) -> None:
    _check_videos(dataset, _sources(demos), "av1")


def test_h264_videos(demos: Path, tmp_path: Path) -> None:
    export_lerobot(demos, tmp_path / "h264", ExportConfig(vcodec="h264", version="v2.1"))
    info = json.loads((tmp_path / "h264/meta/info.json").read_text())
    assert {ft["info"]["video.codec"] for ft in info["features"].values() if ft["dtype"] == "video"} == {
        "h264"
    }
    _check_videos(tmp_path / "h264", _sources(demos), "h264")


def _reference_vector_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    v = values.astype(np.float64).reshape(len(values), -1)
    return {"min": v.min(0), "max": v.max(0), "mean": v.mean(0), "std": v.std(0)}


def test_stats_match_numpy(dataset: Path, demos: Path) -> None:
    all_stats = _jsonl(dataset / "meta/episodes_stats.jsonl")
    assert [s["episode_index"] for s in all_stats] == [0, 1]
    for ep_index, ep in enumerate(_sources(demos)):
        stats = all_stats[ep_index]["stats"]
        table = pq.read_table(dataset / f"data/chunk-000/episode_{ep_index:06d}.parquet")
        assert set(stats) == set(table.column_names) | {
            f"observation.images.{f.name}" for f in ep.chunks[0].observation.cameras
        }
        for name in table.column_names:
            values = np.stack(table.column(name).to_numpy(zero_copy_only=False))
            ref = _reference_vector_stats(values)
            for k, v in ref.items():
                np.testing.assert_allclose(stats[name][k], v, rtol=1e-6, atol=1e-9, err_msg=f"{name} {k}")
                assert np.asarray(stats[name][k]).shape == v.shape
            assert stats[name]["count"] == [table.num_rows]
        for frame in ep.chunks[0].observation.cameras:
            key = f"observation.images.{frame.name}"
            rows = _source_frames(ep, frame.name)
            sampled = np.stack([rows[i] for i in image_sample_indices(len(rows))]).astype(np.float64) / 255.0
            assert stats[key]["count"] == [len(sampled)]
            for k, fn in (("min", np.min), ("max", np.max), ("mean", np.mean), ("std", np.std)):
                got = np.asarray(stats[key][k])
                assert got.shape == (3, 1, 1)
                np.testing.assert_allclose(got.ravel(), fn(sampled, axis=(0, 1, 2)), rtol=1e-9, atol=1e-12)


def test_image_sampling_and_downsampling_follow_lerobot() -> None:
    # below ~500 rows LeRobot samples min(100, n) evenly spaced rows; at 1000 rows 177
    assert image_sample_indices(7).tolist() == list(range(7))
    assert len(image_sample_indices(250)) == 100 and image_sample_indices(250)[-1] == 249
    assert len(image_sample_indices(1000)) == 177
    # images of 300 px or more are subsampled by int(side / 150) before the stats
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(320, 310, 3), dtype=np.uint8)
    stats = image_stats([img], np.array([1]))
    sub = img[::2, ::2].astype(np.float64) / 255.0
    np.testing.assert_allclose(np.asarray(stats["mean"]).ravel(), sub.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(stats["std"]).ravel(), sub.std(axis=(0, 1)), rtol=1e-9)


def _learner_dir(root: Path, successes: list[bool | None]) -> Path:
    for i, success in enumerate(successes):
        ep = make_episode_file(i, "put_green_container_in_bowl", n_chunks=4, success=success)
        ep.chunks[-1].actions = ep.chunks[-1].actions[:3]  # a shorter last chunk
        write_episode(root / f"episodes/{i:03d}.episode", ep)
    return root


def test_learner_episodes_prompt_choice_and_only_success(tmp_path: Path) -> None:
    src = _learner_dir(tmp_path / "src", [True, False, None])
    report = export_lerobot(src, tmp_path / "all", ExportConfig(vcodec="h264", version="v2.1"))
    assert (report.episodes, report.frames) == (3, 3 * 33)
    assert _jsonl(tmp_path / "all/meta/tasks.jsonl") == [{"task_index": 0, "task": "roll"}]
    table = pq.read_table(tmp_path / "all/data/chunk-000/episode_000002.parquet")
    assert table.column("chunk_row").to_pylist()[-4:] == [9, 0, 1, 2]
    assert table.column("index").to_pylist()[0] == 66

    report = export_lerobot(
        src,
        tmp_path / "ok",
        ExportConfig(vcodec="h264", only_success=True, task_prompt="canonical", version="v2.1"),
    )
    assert report.episodes == 1 and len(report.skipped) == 2
    assert _jsonl(tmp_path / "ok/meta/tasks.jsonl") == [{"task_index": 0, "task": "canon"}]
    assert [p["success"] for p in _jsonl(tmp_path / "ok/meta/pde_episodes.jsonl")] == [True]


def test_bad_inputs_get_clear_errors_and_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ExportError, match="not a directory"):
        export_lerobot(tmp_path / "missing", out)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="no episode files"):
        export_lerobot(tmp_path / "empty", out)

    src = _learner_dir(tmp_path / "src", [True, True])
    with pytest.raises(ExportError, match="fps must be 10"):
        export_lerobot(src, out, ExportConfig(fps=30))
    with pytest.raises(ExportError, match="nothing to export"):
        export_lerobot(_learner_dir(tmp_path / "failed", [False]), out, ExportConfig(only_success=True))

    # a camera of another size in the second episode: refused, nothing half-written
    mixed = _learner_dir(tmp_path / "mixed", [True])
    bigger = read_episode(mixed / "episodes/000.episode")
    for chunk in bigger.chunks:
        chunk.observation = make_observation(1, width=80, height=48)
    write_episode(mixed / "episodes/001.episode", bigger)
    with pytest.raises(ExportError, match="differs from the first episode"):
        export_lerobot(mixed, out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []

    # odd image sides cannot be 4:2:0 video
    odd_dir = tmp_path / "odd"
    ep = make_episode_file(0, "put_green_container_in_bowl", n_chunks=2)
    for chunk in ep.chunks:
        chunk.observation = make_observation(1, width=63, height=48)
    write_episode(odd_dir / "0.episode", ep)
    with pytest.raises(ExportError, match="even sides"):
        export_lerobot(odd_dir, out)

    # a camera frame that is not a JPEG
    broken = make_episode_file(0, "put_green_container_in_bowl", n_chunks=2)
    broken.chunks[1].observation.cameras[1].jpeg = b"\xff\xd8 truncated"
    write_episode(tmp_path / "broken/0.episode", broken)
    with pytest.raises(ExportError, match="chunk 1, camera 'wrist'"):
        export_lerobot(tmp_path / "broken", out)

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "bad.episode").write_bytes(b"not msgpack at all")
    with pytest.raises(ExportError, match="not a readable episode file"):
        export_lerobot(corrupt, out)

    # an existing dataset is never replaced unless asked
    export_lerobot(src, out, ExportConfig(vcodec="h264"))
    before = (out / "meta/info.json").read_text()
    with pytest.raises(ExportError, match="--overwrite"):
        export_lerobot(src, out)
    assert (out / "meta/info.json").read_text() == before
    report = export_lerobot(_learner_dir(tmp_path / "one", [True]), out, ExportConfig(overwrite=True))
    assert report.episodes == 1
    assert json.loads((out / "meta/info.json").read_text())["total_episodes"] == 1
    with pytest.raises(ExportError, match="inside --in"):
        export_lerobot(src, src / "lerobot")


def _export_cli(*args: str, command: str = "data") -> subprocess.CompletedProcess[str]:
    cmd = pde_command(command, "export-lerobot", *args)
    return subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=120)


def test_cli(tmp_path: Path) -> None:
    src = _learner_dir(tmp_path / "src", [True])
    ok = _export_cli("--in", str(src), "--out", str(tmp_path / "ds"), "--vcodec", "h264")
    assert ok.returncode == 0, ok.stderr
    assert "wrote 1 episodes, 33 frames, 1 tasks" in ok.stdout
    assert (tmp_path / "ds/meta/info.json").is_file()
    bad = _export_cli("--in", str(tmp_path / "nope"), "--out", str(tmp_path / "x"))
    assert bad.returncode == 2
    assert "not a directory" in bad.stderr
    refused = _export_cli("--in", str(src), "--out", str(tmp_path / "y"), "--fps", "30")
    assert refused.returncode == 2
    assert "fps must be 10" in refused.stderr
    assert not (tmp_path / "y").exists()


def test_old_spelling_still_exports_and_says_where_it_moved(tmp_path: Path) -> None:
    src = _learner_dir(tmp_path / "src", [True])
    old = _export_cli("--in", str(src), "--out", str(tmp_path / "ds"), "--vcodec", "h264", command="sim")
    assert old.returncode == 0, old.stderr
    assert "moved to `pde data export-lerobot`" in old.stderr
    assert "wrote 1 episodes, 33 frames, 1 tasks" in old.stdout
    assert (tmp_path / "ds/meta/info.json").is_file()


def test_an_overlapped_episode_exports_only_the_rows_that_ran(tmp_path: Path) -> None:
    ep = make_episode_file(0, "put_green_container_in_bowl", n_chunks=3, success=True)
    for i, chunk in enumerate(ep.chunks):
        chunk.actions = np.arange(10, dtype=np.float32)[:, None].repeat(7, 1) + 100 * i  # row r: r + 100 i
    ep.chunks[0].rows_run = (0, 6)  # preempted after 6 rows
    ep.chunks[1].rows_run = (2, 7)  # 2 rows in the past, preempted after row 6
    ep.chunks[2].rows_run = (3, 10)  # 3 rows in the past, ran to its end
    write_episode(tmp_path / "src/episodes/000.episode", ep)
    report = export_lerobot(tmp_path / "src", tmp_path / "out", ExportConfig(vcodec="h264", version="v2.1"))
    assert report.frames == 6 + 5 + 7
    table = pq.read_table(tmp_path / "out/data/chunk-000/episode_000000.parquet")
    ran = [*range(0, 6), *range(2, 7), *range(3, 10)]
    assert table.column("chunk_row").to_pylist() == ran
    assert table.column("chunk_index").to_pylist() == [0] * 6 + [1] * 5 + [2] * 7
    actions = np.array(table.column("action").to_pylist())[:, 0]
    assert actions.tolist() == [r + 100 * c for c, r in zip([0] * 6 + [1] * 5 + [2] * 7, ran, strict=True)]


EPISODE_V2 = Path(__file__).resolve().parents[1] / "fixtures" / "episode_v2"


def test_rows_of_a_format_2_file_take_the_chunk_start_observation_and_say_so(tmp_path: Path) -> None:
    # tests/fixtures/episode_v2/demo.episode, written by the format-2 code: one observation per
    # chunk. Its rows keep the chunk start's state and frame, and the provenance says how many
    # rows saw their own.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "demo.episode").write_bytes((EPISODE_V2 / "demo.episode").read_bytes())
    report = export_lerobot(tmp_path / "src", tmp_path / "out", ExportConfig(vcodec="h264", version="v2.1"))
    assert report.frames == 12
    ep = read_episode(EPISODE_V2 / "demo.episode")
    table = pq.read_table(tmp_path / "out/data/chunk-000/episode_000000.parquet")
    state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(
        state, np.repeat([state_vector(c.observation.state) for c in ep.chunks], 4, 0)
    )
    (prov,) = _jsonl(tmp_path / "out/meta/pde_episodes.jsonl")
    assert prov["rows_with_own_observation"] == 3  # row 0 of each chunk
    images, _ = _decode_video(tmp_path / "out/videos/chunk-000/observation.images.wrist/episode_000000.mp4")
    assert len(images) == 12


def test_each_row_exports_the_observation_of_its_own_tick(tmp_path: Path) -> None:
    # A chunk whose rows 1.. were observed: each row's state and image are its own, in the parquet
    # and the video alike; a chunk without them falls back to its start for every row.
    ep = make_episode_file(0, "put_green_container_in_bowl", n_chunks=2, rows=4, success=True)
    ep.chunks[0].row_observations = {r: make_observation(10 + r) for r in range(1, 4)}
    for r, obs in ep.chunks[0].row_observations.items():
        obs.state.ee_position_m = np.full(3, float(r))
    write_episode(tmp_path / "src/episodes/000.episode", ep)
    export_lerobot(tmp_path / "src", tmp_path / "out", ExportConfig(vcodec="h264", version="v2.1", crf=0))
    table = pq.read_table(tmp_path / "out/data/chunk-000/episode_000000.parquet")
    state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
    assert state[:4, 0].tolist() == [0.0, 1.0, 2.0, 3.0]  # ee x of rows 0..3 of chunk 0
    want = _source_frames(read_episode(tmp_path / "src/episodes/000.episode"), "external")
    images, _ = _decode_video(
        tmp_path / "out/videos/chunk-000/observation.images.external/episode_000000.mp4"
    )
    errors = [np.abs(a.astype(float) - b.astype(float)).mean() for a, b in zip(images, want, strict=True)]
    assert len(images) == 8 and max(errors) <= MAX_MEAN_ABS_ERROR
    assert not np.array_equal(want[0], want[1]) and np.array_equal(want[4], want[7])
    (prov,) = _jsonl(tmp_path / "out/meta/pde_episodes.jsonl")
    assert prov["rows_with_own_observation"] == 5  # chunk 0's four, chunk 1's row 0
