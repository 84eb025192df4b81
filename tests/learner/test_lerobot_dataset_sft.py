"""SFT from a LeRobotDataset: episode files -> `pde_storage` export (h264) -> read back as SFT
samples (the chunk-start rows, their action windows) -> `pde learner sft --lerobot-dataset`."""

import json

import numpy as np
import pytest

from learner.checkpoints import CheckpointStore
from learner.lerobot_dataset import DatasetError, read_lerobot_dataset
from learner.main import main
from learner.policies.pi05 import Pi05Policy, load_pi05
from learner.sft import action_windows
from learner.synthetic import synthetic_episode
from pde_contract.episodes import write_episode
from pde_contract.messages import ActionSpace, state_vector
from pde_storage.lerobot_export import ExportConfig, export_lerobot
from tests.learner.pi05_tiny import make_tiny_checkpoint

CANON = "put the green container in the bowl"


@pytest.fixture
def dataset(tmp_path):
    init = make_tiny_checkpoint(tmp_path / "pi05")
    policy = load_pi05(init)
    rng = np.random.default_rng(0)
    (tmp_path / "eps").mkdir()
    episodes = []
    for i in range(2):
        ep = synthetic_episode(policy, rng, 3, CANON, CANON, True, 24, f"d{i}")
        write_episode(tmp_path / "eps" / f"d{i}.msgpack", ep)
        episodes.append(ep)
    export_lerobot(tmp_path / "eps", tmp_path / "ds", ExportConfig(vcodec="h264"))
    return init, tmp_path / "ds", episodes


def test_samples_are_the_chunk_starts_with_their_action_windows(dataset):
    _, root, episodes = dataset
    s = read_lerobot_dataset(root, chunk_len=6, action_space=ActionSpace.EE_DELTA)
    assert len(s.observations) == 6 and s.actions.shape == (6, 6, 7)
    windows = [w for ep in episodes for w in action_windows(ep, 6)]
    np.testing.assert_allclose(s.actions, np.stack(windows), atol=1e-6)  # float32 columns
    states = [state_vector(c.observation.state) for ep in episodes for c in ep.chunks]
    np.testing.assert_allclose([state_vector(o.state) for o in s.observations], states, atol=1e-6)
    assert {f.name for f in s.observations[0].cameras} == {"external", "wrist"}
    assert set(s.prompts) == {CANON}
    with pytest.raises(DatasetError, match="the policy acts in joint_abs"):
        read_lerobot_dataset(root, chunk_len=6, action_space=ActionSpace.JOINT_ABS)


def test_sft_trains_pi05_on_the_dataset(dataset, tmp_path, capsys):
    init, root, _ = dataset
    argv = ["sft", "--policy", "pi05", "--init", str(init), "--lerobot-dataset", str(root)]
    argv += ["--checkpoints", str(tmp_path / "ck"), "--steps", "1", "--batch-size", "2", "--device", "cpu"]
    assert main(argv) == 0
    assert '"sft_samples": 6.0' in capsys.readouterr().out
    assert isinstance(CheckpointStore.load(tmp_path / "ck" / "policy-000000.pt").policy, Pi05Policy)


def test_a_dataset_labelled_with_another_version_is_refused_as_inconsistent(dataset):
    _, root, _ = dataset
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["codebase_version"] = "v2.1"  # the files are v3.0's
    info_path.write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"is not a v2\.1 template") as e:
        read_lerobot_dataset(root, chunk_len=6, action_space=ActionSpace.EE_DELTA)
    assert "the files and codebase_version disagree" in str(e.value)


def test_a_dataset_at_another_fps_than_the_robots_control_rate_is_refused_with_what_to_do(
    dataset, tmp_path, capsys
):
    init, root, _ = dataset
    info_path = root / "meta" / "info.json"
    info_path.write_text(json.dumps(json.loads(info_path.read_text()) | {"fps": 15}))
    with pytest.raises(DatasetError, match=r"recorded at 15 fps.*robot acts at 10 Hz") as e:
        read_lerobot_dataset(root, chunk_len=6, action_space=ActionSpace.EE_DELTA)
    assert "PDE_ROBOT_CONTROL_RATE_HZ=15" in str(e.value) and "--control-rate-hz 15" in str(e.value)
    assert len(read_lerobot_dataset(root, 6, ActionSpace.EE_DELTA, control_rate_hz=15).observations) == 6
    argv = ["sft", "--policy", "pi05", "--init", str(init), "--lerobot-dataset", str(root)]
    argv += ["--checkpoints", str(tmp_path / "ck"), "--steps", "1", "--batch-size", "2", "--device", "cpu"]
    assert main(argv) == 2
    assert "recorded at 15 fps" in capsys.readouterr().err
    assert not (tmp_path / "ck" / "policy-000000.pt").exists()
    assert main([*argv, "--control-rate-hz", "15"]) == 0  # a robot server run at 15 Hz
    assert (tmp_path / "ck" / "policy-000000.pt").exists()
