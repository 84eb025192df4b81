"""LeRobotDataset v3.0 in: the fixture LeRobot 0.6.1 itself recorded
(tests/fixtures/lerobot_v30/make_fixture.py, whose ``episode()`` says what it was given) read as SFT
samples, with and without a mapping file, and the versions we cannot read refused with what to do."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from learner.lerobot_dataset import DatasetError, load_mapping, read_lerobot_dataset
from pde_contract.jpeg import decode_jpeg
from pde_contract.messages import STATE_VECTOR_NAMES, ActionSpace, state_vector
from pde_storage.lerobot_export import ACTION_NAMES

FIXTURE_DIR = Path(__file__).parents[1] / "fixtures" / "lerobot_v30"
# AV1 (LeRobot's crf 30, preset 12) and then our JPEG (quality 95): mean absolute error per frame
# against what LeRobot was given, in levels of 255; measured 1.3 to 7.6 on this fixture. Neighbouring
# frames differ by 15 to 20 levels, and each row's frame must be nearest its own source frame.
MAX_MEAN_ABS_ERROR = 10.0


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURE_DIR / "make_fixture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIX = _script()


def _expected(
    chunk_len: int,
) -> tuple[np.ndarray, np.ndarray, list[str], list[dict[str, tuple[int, np.ndarray]]]]:
    """Every row's state, its next ``chunk_len`` actions (held past the end: zero deltas, the last
    gripper width), its task and its camera frames, as the script gave them to LeRobot."""
    states, windows, tasks, frames = [], [], [], []  # frames: each row's cameras, all of its episode
    for index, task in enumerate(FIX.TASKS):
        ep = FIX.episode(index)
        act = ep["action"].astype(np.float64)
        hold = np.zeros((chunk_len, 7))
        hold[:, 6] = act[-1, 6]
        padded = np.concatenate([act, hold])
        for i in range(FIX.LENGTHS[index]):
            states.append(ep["observation.state"][i])
            windows.append(padded[i : i + chunk_len])
            tasks.append(task)
            frames.append({cam: (i, ep[f"observation.images.{cam}"]) for cam in FIX.CAMERAS})
    return np.stack(states), np.stack(windows), tasks, frames


def test_the_script_names_what_our_export_writes() -> None:
    assert list(STATE_VECTOR_NAMES) == FIX.STATE_NAMES
    assert ACTION_NAMES[ActionSpace.EE_DELTA] == FIX.ACTION_NAMES
    info = json.loads((FIX.DATASET / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert json.loads((FIXTURE_DIR / "versions.json").read_text())["lerobot"] == "0.6.1"


def _check(samples, chunk_len: int) -> None:
    states, windows, tasks, frames = _expected(chunk_len)
    assert len(samples.observations) == sum(FIX.LENGTHS)  # no chunk_row column: every row
    # float32 in the parquet file, float64 here: the same numbers
    np.testing.assert_array_equal([state_vector(o.state) for o in samples.observations], states)
    np.testing.assert_array_equal(samples.actions, windows)
    assert samples.prompts == tasks
    for obs, want in zip(samples.observations, frames, strict=True):
        assert [f.name for f in obs.cameras] == list(FIX.CAMERAS)
        for f in obs.cameras:
            got = decode_jpeg(f.jpeg).astype(np.float64)
            assert (f.height, f.width) == (FIX.HEIGHT, FIX.WIDTH)
            row, episode_frames = want[f.name]
            errors = np.abs(got[None] - episode_frames).mean(axis=(1, 2, 3))
            assert errors[row] < MAX_MEAN_ABS_ERROR and int(np.argmin(errors)) == row


def test_the_dataset_lerobot_wrote_reads_as_what_it_was_given() -> None:
    _check(read_lerobot_dataset(FIX.DATASET, chunk_len=4, action_space=ActionSpace.EE_DELTA), 4)


def test_the_dataset_lerobot_wrote_reads_through_a_mapping(tmp_path: Path) -> None:
    position, quat = json.dumps(list(STATE_VECTOR_NAMES[0:3])), json.dumps(list(STATE_VECTOR_NAMES[3:7]))
    (tmp_path / "map.toml").write_text(f"""
[state]
ee_position_m = {{ feature = "observation.state", names = {position} }}
ee_quat_xyzw = {{ feature = "observation.state", names = {quat} }}
gripper_width_m = {{ feature = "observation.state", names = ["gripper_width_m"] }}
joint_positions_rad = {{ feature = "observation.state", range = [8, 15] }}

[action]
space = "ee_delta"
columns = [{{ feature = "action", range = [0, 6] }}, {{ feature = "action", names = ["gripper_width_m"] }}]

[cameras]
external = "observation.images.external"
wrist = "observation.images.wrist"
""")
    mapping = load_mapping(tmp_path / "map.toml")
    samples = read_lerobot_dataset(
        FIX.DATASET, 5, ActionSpace.EE_DELTA, mapping=mapping, cameras=("external", "wrist")
    )
    _check(samples, 5)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(FIX.DATASET, root)
    return root


def _refusal(root: Path) -> str:
    with pytest.raises(DatasetError) as e:
        read_lerobot_dataset(root, chunk_len=4, action_space=ActionSpace.EE_DELTA)
    return str(e.value)


def _set_version(root: Path, version: str | None) -> None:
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    if version is None:
        del info["codebase_version"]
    else:
        info["codebase_version"] = version
    path.write_text(json.dumps(info))


def test_versions_we_cannot_read_are_refused_with_what_to_do(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _set_version(root, "v4.0")
    msg = _refusal(root)
    assert "LeRobotDataset v4.0" in msg and "v2.0, v2.1, v3.0" in msg
    assert "newer than 0.6.1" in msg and "--revision v3.0" in msg
    _set_version(root, "v1.6")
    msg = _refusal(root)
    assert "convert_dataset_v21_to_v30" in msg and "pde data export-lerobot" in msg
    _set_version(root, None)
    assert "with no codebase_version" in _refusal(root)
    shutil.rmtree(root / "meta")
    assert "no meta/info.json" in _refusal(root)


def test_an_incomplete_or_inconsistent_v30_dataset_is_refused_by_name(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    video = root / "videos" / "observation.images.wrist" / "chunk-000" / "file-000.mp4"
    video.rename(video.with_suffix(".bak"))
    assert "the video" in (msg := _refusal(root)) and "file-000.mp4 is missing" in msg
    video.with_suffix(".bak").rename(video)
    # an episode whose frames are said to start between two video frames
    path = root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    col = "videos/observation.images.wrist/from_timestamp"
    shifted = table.set_column(table.column_names.index(col), col, pa.array([0.0, 0.65], type=pa.float64()))
    pq.write_table(shifted, path)
    msg = _refusal(root)
    assert "observation.images.wrist" in msg and "shows no frame at 0.6500 s" in msg
    pq.write_table(table.drop_columns(["dataset_from_index"]), path)
    assert "lacks the columns ['dataset_from_index']" in _refusal(root)


def test_our_v30_export_reads_back_as_its_episodes(tmp_path: Path) -> None:
    """Episode files -> `pde data export-lerobot` (v3.0) -> our reader: the states and action windows
    are the episodes' own numbers, bit for bit, and the same as from the v2.1 export of the same
    episodes (frames: the same source through the codec)."""
    from learner.sft import action_windows
    from pde_contract.episodes import write_episode
    from pde_storage.lerobot_export import ExportConfig, export_lerobot
    from tests.learner.test_sft import _demo

    episodes = [_demo("bowl", "put the bowl away", seed) for seed in range(2)]
    for seed, ep in enumerate(episodes):
        write_episode(tmp_path / "eps" / f"d{seed}.msgpack", ep)
    export_lerobot(tmp_path / "eps", tmp_path / "v30", ExportConfig(vcodec="h264"))
    export_lerobot(tmp_path / "eps", tmp_path / "v21", ExportConfig(vcodec="h264", version="v2.1"))
    new = read_lerobot_dataset(tmp_path / "v30", 4, ActionSpace.EE_DELTA)
    old = read_lerobot_dataset(tmp_path / "v21", 4, ActionSpace.EE_DELTA)
    states = [state_vector(c.observation.state) for ep in episodes for c in ep.chunks]
    windows = [w for ep in episodes for w in action_windows(ep, 4)]
    np.testing.assert_array_equal([state_vector(o.state) for o in new.observations], states)
    np.testing.assert_array_equal(new.actions, np.stack(windows).astype(np.float32))
    np.testing.assert_array_equal(new.actions, old.actions)
    assert new.prompts == old.prompts == ["put the bowl away"] * len(states)
    # each row's frame is its chunk's image through the codec: nearer to it than to any other chunk's
    # image of the episode (20x20 detailed frames: H.264 + JPEG error measured 12.3, both layouts)
    for a, b in zip(new.observations, old.observations, strict=True):
        assert (a.seq, a.publish_time_s) == (b.seq, b.publish_time_s)
    k = 0
    for ep in episodes:
        for c, _chunk in enumerate(ep.chunks):
            for cam in new.observations[k].cameras:
                got = decode_jpeg(cam.jpeg).astype(float)
                sources = [
                    decode_jpeg(next(f for f in other.observation.cameras if f.name == cam.name).jpeg)
                    for other in ep.chunks
                ]
                errors = [np.abs(got - src).mean() for src in sources]
                assert int(np.argmin(errors)) == c and errors[c] < 16.0
            k += 1
