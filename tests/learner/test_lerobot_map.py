"""A lab's LeRobotDataset in another layout, read through a mapping file: our v2.1 export (one file
per episode: easy to rewrite; v3.0 through a mapping: test_lerobot_v30.py) rewritten by hand into
foreign feature names (8-entry joint state with the gripper in mm, TCP position alone,
reordered action columns, renamed videos), then read back as SFT samples and trained on."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from learner.lerobot_dataset import DatasetError, load_mapping, read_lerobot_dataset
from learner.main import main
from pde_contract.episodes import write_episode
from pde_contract.messages import ActionSpace, state_vector
from pde_storage.lerobot_export import ExportConfig, export_lerobot
from tests.learner.test_sft import _demo

JOINTS = [f"j{i}" for i in range(1, 8)]
ACTION = ["gripper_mm", "dx", "dy", "dz", "drx", "dry", "drz", "unused"]
QUAT = [0.0, 0.0, 0.0, 1.0]
VIDEOS = {"external": "observation.images.front", "wrist": "observation.images.hand"}

MAPPING = f"""
[state]
ee_position_m = {{ feature = "observation.tcp_position" }}
ee_quat_xyzw = {{ constant = {QUAT} }}
gripper_width_m = {{ feature = "observation.state", names = ["gripper_mm"], scale = 0.001 }}
joint_positions_rad = {{ feature = "observation.state", range = [0, 7] }}

[action]
space = "ee_delta"
columns = [
  {{ feature = "action", range = [1, 7] }},
  {{ feature = "action", index = [0], scale = 0.001 }},
]

[cameras]
external = "{VIDEOS["external"]}"
wrist = "{VIDEOS["wrist"]}"
"""


def _vector(n, names=None):
    return {"dtype": "float32", "shape": [n], "names": names}


def foreignize(ours: Path, out: Path) -> None:
    """Rewrite our export at ``ours`` into a foreign layout at ``out`` (no chunk_row column: every
    row is a sample)."""
    shutil.copytree(ours, out)
    info = json.loads((out / "meta" / "info.json").read_text())
    ft = info["features"]
    del ft["observation.state"], ft["action"], ft["chunk_row"]
    ft["observation.state"] = _vector(8, [*JOINTS, "gripper_mm"])
    ft["observation.tcp_position"] = _vector(3, ["x", "y", "z"])
    ft["action"] = _vector(8, {"motors": ACTION})  # the dict form older v2.0 datasets have
    for ours_cam, key in VIDEOS.items():
        ft[key] = ft.pop(f"observation.images.{ours_cam}")
        for d in (out / "videos").glob(f"chunk-*/observation.images.{ours_cam}"):
            d.rename(d.parent / key)
    (out / "meta" / "info.json").write_text(json.dumps(info))
    for path in (out / "data").glob("chunk-*/*.parquet"):
        t = pq.read_table(path).to_pydict()
        s, a = np.asarray(t.pop("observation.state")), np.asarray(t.pop("action"))
        del t["chunk_row"]
        t["observation.state"] = np.concatenate([s[:, 8:15], s[:, 7:8] * 1000], axis=1).tolist()
        t["observation.tcp_position"] = s[:, 0:3].tolist()
        t["action"] = np.concatenate([a[:, 6:7] * 1000, a[:, 0:6], np.full((len(a), 1), 9.0)], 1).tolist()
        pq.write_table(pa.table(t), path)


@pytest.fixture
def datasets(tmp_path):
    for seed in range(2):
        write_episode(tmp_path / "eps" / f"d{seed}.msgpack", _demo("bowl", "put the bowl away", seed))
    export_lerobot(tmp_path / "eps", tmp_path / "ours", ExportConfig(vcodec="h264", version="v2.1"))
    foreignize(tmp_path / "ours", tmp_path / "lab")
    (tmp_path / "map.toml").write_text(MAPPING)
    return tmp_path / "ours", tmp_path / "lab", tmp_path / "map.toml"


def test_the_mapping_prescribes_the_samples(datasets):
    ours, lab, map_file = datasets
    mapping = load_mapping(map_file)
    s = read_lerobot_dataset(lab, 4, ActionSpace.EE_DELTA, mapping=mapping, cameras=("external", "wrist"))
    # Every row of both episodes (no chunk_row), each with the next 4 action rows, held past the end.
    states, windows = [], []
    for path in sorted((ours / "data").glob("chunk-*/*.parquet")):
        t = pq.read_table(path).to_pydict()
        st, act = np.asarray(t["observation.state"], np.float64), np.asarray(t["action"], np.float64)
        st[:, 3:7] = QUAT
        states.append(st)
        hold = np.zeros((4, 7))
        hold[:, 6] = act[-1, 6]
        padded = np.concatenate([act, hold])
        windows += [padded[i : i + 4] for i in range(len(act))]
    np.testing.assert_allclose(
        [state_vector(o.state) for o in s.observations], np.concatenate(states), atol=1e-6
    )
    np.testing.assert_allclose(s.actions, np.stack(windows), atol=1e-6)
    # The same video frames reach the same cameras as from our own layout.
    own = read_lerobot_dataset(ours, 4, ActionSpace.EE_DELTA)
    by_seq = {o.seq: o for o in s.observations[: len(states[0])]}
    for o in own.observations[:3]:
        assert {f.name: f.jpeg for f in by_seq[o.seq].cameras} == {f.name: f.jpeg for f in o.cameras}


def _expect_error(lab, text: str, space=ActionSpace.EE_DELTA, cameras=("external", "wrist")):
    path = lab.parent / "bad.toml"
    path.write_text(text)
    with pytest.raises(DatasetError) as e:
        read_lerobot_dataset(lab, 4, space, mapping=load_mapping(path), cameras=cameras)
    return str(e.value)


def test_a_wrong_mapping_fails_at_start_saying_what_exists(datasets):
    _, lab, _ = datasets
    msg = _expect_error(lab, MAPPING.replace('"observation.tcp_position"', '"observation.ee_pos"'))
    assert "state.ee_position_m" in msg and "no feature 'observation.ee_pos'" in msg
    assert "observation.tcp_position [3]" in msg and "observation.state [8]" in msg
    msg = _expect_error(lab, MAPPING.replace("range = [0, 7]", "range = [0, 8]"))
    assert "state.joint_positions_rad: takes 8 entries of observation.state" in msg and "has 7" in msg
    msg = _expect_error(lab, MAPPING.replace('["gripper_mm"]', '["gripper"]'))
    assert "no entries ['gripper']" in msg and "gripper_mm" in msg
    msg = _expect_error(lab, MAPPING.replace("index = [0]", "index = [8]"))
    assert "action has 8 entries" in msg and "picks [8]" in msg
    msg = _expect_error(lab, MAPPING.replace("range = [1, 7]", "range = [1, 8]"))
    assert "give 8 columns; ee_delta has 7" in msg
    msg = _expect_error(lab, MAPPING.replace('"observation.images.hand"', '"observation.images.top"'))
    assert "cameras.wrist" in msg and "observation.images.hand" in msg
    msg = _expect_error(lab, MAPPING, cameras=("external", "wrist", "top"))
    assert "Add ['top'] under [cameras]" in msg
    msg = _expect_error(lab, MAPPING, space=ActionSpace.JOINT_ABS)
    assert "mapping action.space is ee_delta; the policy acts in joint_abs" in msg
    info_path = lab / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.top"] = {"dtype": "image", "shape": [16, 16, 3], "names": None}
    info["features"]["observation.tcp_position"]["shape"] = [4]  # the parquet rows have 3
    info_path.write_text(json.dumps(info))
    ranged = MAPPING.replace('"observation.tcp_position" }', '"observation.tcp_position", range = [0, 3] }')
    msg = _expect_error(lab, ranged)
    assert "observation.tcp_position rows have 3 entries, meta/info.json says 4" in msg
    msg = _expect_error(lab, ranged.replace('"observation.images.hand"', '"observation.images.top"'))
    # An image feature (use_videos=False) is read from the parquet rows, which here lack it.
    assert "lists ['observation.images.top'] but the parquet file has no such column" in msg


def test_a_mapping_outside_the_schema_is_refused_by_name(tmp_path):
    def refused(text: str, suffix=".toml") -> str:
        path = tmp_path / f"m{suffix}"
        path.write_text(text)
        with pytest.raises(DatasetError) as e:
            load_mapping(path)
        return str(e.value)

    msg = refused(MAPPING.replace('space = "ee_delta"', 'space = "ee_velocity"'))
    assert "action.space" in msg and "no action space 'ee_velocity'" in msg and "joint_abs" in msg
    msg = refused(MAPPING.replace("ee_quat_xyzw = ", "ee_quat_wxyz = "))
    assert "state.ee_quat_xyzw: Field required" in msg and "state.ee_quat_wxyz" in msg
    msg = refused(MAPPING.replace("range = [1, 7]", "range = [1, 7], index = [1]"))
    assert "one of names, index, range" in msg
    assert "not valid json" in refused("{", ".json")


def test_the_cli_trains_the_small_policy_on_a_mapped_dataset(datasets, tmp_path, capsys):
    _, lab, map_file = datasets
    argv = ["sft", "--lerobot-dataset", str(lab), "--lerobot-map", str(map_file)]
    argv += ["--checkpoints", str(tmp_path / "ck"), "--steps", "2", "--batch-size", "4"]
    argv += ["--image-size", "16", "--chunk-len", "4", "--device", "cpu"]
    assert main(argv) == 0
    assert '"sft_samples": 18.0' in capsys.readouterr().out
    assert (tmp_path / "ck" / "policy-000000.pt").is_file()
    # Without the mapping the same dataset is refused, pointing at --lerobot-map.
    assert main([*argv[:3], *argv[5:], "--force"]) == 2
    assert "--lerobot-map" in capsys.readouterr().err


def test_the_documented_example_is_a_valid_mapping():
    mapping = load_mapping(Path(__file__).parents[2] / "docs" / "lerobot_map.example.toml")
    assert mapping.action.space == "ee_delta" and set(mapping.cameras) == {"external", "wrist"}
