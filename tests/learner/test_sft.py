import numpy as np
import pytest
import torch

from learner.paraphrases import PARAPHRASES
from learner.policies.vla import VLAConfig
from learner.sft import SFTConfig, action_windows, run_sft, select_demo_files
from learner.synthetic import synthetic_observation
from pde_contract.episodes import ChunkRecord, EpisodeFile, write_episode
from pde_contract.messages import ActionSpace

TASKS = {
    "put_bowl_on_top_rack": "put the bowl on the top rack",
    "put_tape_on_top_rack": "put the tape on the top rack",
}


def _demo(task, prompt, seed, n_chunks=3, rows=3):
    rng = np.random.default_rng(seed)
    sign = 1.0 if "bowl" in prompt else -1.0
    chunks = []
    for i in range(n_chunks):
        obs = synthetic_observation(rng, 20, seq=i)
        actions = np.zeros((rows, 7))
        actions[:, 0] = sign * 0.01 + 0.001 * rng.normal(size=rows)  # the task decides the direction
        actions[:, 6] = 0.04
        chunks.append(ChunkRecord(observation=obs, actions=actions))
    return EpisodeFile(
        episode_id=f"{task}-{seed}",
        task=task,
        canonical_prompt=prompt,
        rollout_prompt=prompt,
        action_space=ActionSpace.EE_DELTA,
        control_rate_hz=10.0,
        chunks=chunks,
        success=True,
        source="expert",
    )


@pytest.fixture
def demo_dir(tmp_path):
    for task, prompt in TASKS.items():
        for seed in range(4):
            write_episode(tmp_path / "demos" / f"{task}-{seed:03d}.msgpack", _demo(task, prompt, seed))
    return tmp_path / "demos"


def test_every_task_prompt_has_paraphrases():
    assert len(PARAPHRASES) == 10
    assert all(len(v) >= 4 and len(set(v)) == len(v) for v in PARAPHRASES.values())


def test_action_windows_pad_with_hold():
    ep = _demo("t", "put the bowl on the top rack", 0, n_chunks=2, rows=3)
    w = action_windows(ep, 4)
    assert len(w) == 2 and w[0].shape == (4, 7)
    assert np.allclose(w[0][:3], ep.chunks[0].actions) and np.allclose(w[0][3], ep.chunks[1].actions[0])
    assert np.allclose(w[1][3, :6], 0) and w[1][3, 6] == pytest.approx(0.04)


def test_select_limits_episodes_per_task(demo_dir):
    files = select_demo_files(demo_dir, 2)
    assert len(files) == 4
    with pytest.raises(FileNotFoundError, match="pde sim record"):
        select_demo_files(demo_dir / "empty", 2)


@pytest.mark.parametrize("head", ["flow", "gaussian"])
def test_sft_learns_task_dependent_actions_and_caches(demo_dir, tmp_path, head):
    # the flow head needs a wider network and more steps than the Gaussian head to pick up the prompt
    hidden, steps = (64, 400) if head == "flow" else (32, 150)
    vla = VLAConfig(image_size_px=16, hidden_dim=hidden, chunk_len=4, text_encoder="fake-hashing", head=head)
    cfg = SFTConfig(episodes_per_task=4, steps=steps, batch_size=16, learning_rate=3e-3)
    path, metrics, cached = run_sft(demo_dir, tmp_path / "ckpt", vla, cfg)
    assert not cached and path.is_file()
    assert metrics["sft_loss_last"] < metrics["sft_loss_first"]
    _, _, cached = run_sft(demo_dir, tmp_path / "ckpt", vla, cfg)
    assert cached

    from learner.checkpoints import CheckpointStore

    policy = CheckpointStore.load(path).policy
    obs = policy.preprocess([synthetic_observation(np.random.default_rng(9), 20)] * 2)
    torch.manual_seed(0)
    s = policy.sample(
        obs, ["put the bowl on the top rack", "put the tape on the top rack"], deterministic=True
    )
    assert s.actions[0, :, 0].mean() > 0.003 and s.actions[1, :, 0].mean() < -0.003
