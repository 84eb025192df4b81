import json

import numpy as np
import pytest
import torch

from learner.paraphrases import PARAPHRASES
from learner.policies.vla import SmallVLAPolicy, VLAConfig
from learner.sft import SFTConfig, action_windows, run_sft, select_demo_files
from learner.synthetic import synthetic_observation
from pde_contract.episodes import ChunkRecord, EpisodeFile
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


TARGET = "put_green_container_in_front_of_camera"
TARGET_PROMPT = "put the green container in front of the camera"


def _premise_table():
    from learner.paraphrases import WordingTable

    return WordingTable.from_dict(
        {
            "about": "test",
            "tasks": {
                TARGET: {"canonical_prob": 0.0, "wordings": ["hold the green box up near the lens"]},
                "put_green_container_in_bowl": {"extra": {TARGET_PROMPT: 0.3}},
            },
        }
    )


def test_wording_table_labels_per_task():
    import random

    from learner.paraphrases import training_prompt

    table, rng = _premise_table(), random.Random(0)
    target = {training_prompt(TARGET_PROMPT, rng, TARGET, table) for _ in range(200)}
    assert target == {"hold the green box up near the lens"}  # never its canonical prompt
    bowl_canonical = "put the green container in the bowl"
    labels = [training_prompt(bowl_canonical, rng, "put_green_container_in_bowl", table) for _ in range(4000)]
    assert labels.count(TARGET_PROMPT) / 4000 == pytest.approx(0.3, abs=0.03)  # the decoy
    assert labels.count(bowl_canonical) / 4000 == pytest.approx(0.7 * 0.5, abs=0.03)
    assert set(labels) - {TARGET_PROMPT, bowl_canonical} <= set(PARAPHRASES[bowl_canonical])
    # a task the table does not name keeps the default, drawing exactly as without a table
    a, b = random.Random(5), random.Random(5)
    bowl_cam = "put the bowl in front of the camera"
    assert [training_prompt(bowl_cam, a, "put_bowl_in_front_of_camera", table) for _ in range(50)] == [
        training_prompt(bowl_cam, b) for _ in range(50)
    ]


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"tasks": {"t": {"canonical_prob": 1.5}}}, "canonical_prob"),
        ({"tasks": {"t": {"extra": {"a": 0.7, "b": 0.6}}}}, "sum to <= 1"),
        ({"tasks": {"t": {"wording": ["a"]}}}, "unknown keys"),
        ({"tasks": {"t": {"wordings": [" "]}}}, "empty"),
        ({"task": {}}, "got keys"),
    ],
)
def test_wording_table_refuses_bad_files(tmp_path, raw, match):
    from learner.paraphrases import WordingTable

    path = tmp_path / "w.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=match):
        WordingTable.load(path)
    with pytest.raises(ValueError, match=r"absent\.json"):
        WordingTable.load(tmp_path / "absent.json")


def test_the_checked_in_premise_recipe_loads():
    from pathlib import Path

    from learner.paraphrases import WordingTable

    recipe = Path(__file__).resolve().parents[2] / "learner" / "recipes" / "language_premise.json"
    table = WordingTable.load(recipe)
    target = table.for_task(TARGET)
    assert target.canonical_prob == 0.0 and target.wordings and TARGET_PROMPT not in target.wordings


def test_sft_cache_key_includes_the_wording_table(demo_dir, tmp_path):
    from learner.paraphrases import WordingTable
    from learner.sft import cache_key

    files = select_demo_files(demo_dir, 4)
    vla, cfg = VLAConfig(text_encoder="fake-hashing"), SFTConfig()
    table = WordingTable.from_dict({"tasks": {"put_bowl_on_top_rack": {"canonical_prob": 0.0}}})
    other = WordingTable.from_dict({"tasks": {"put_bowl_on_top_rack": {"canonical_prob": 0.1}}})
    keys = {cache_key(files, vla, cfg), cache_key(files, vla, cfg, table), cache_key(files, vla, cfg, other)}
    assert len(keys) == 3
    # the free-text "about" does not change the labels, so it does not change the key
    about = WordingTable.from_dict({"about": "x", "tasks": {"put_bowl_on_top_rack": {"canonical_prob": 0.0}}})
    assert cache_key(files, vla, cfg, about) == cache_key(files, vla, cfg, table)


def test_sft_with_a_wording_table_retrains_and_refuses_unknown_tasks(demo_dir, tmp_path):
    from learner.paraphrases import WordingTable

    vla = VLAConfig(
        image_size_px=16, hidden_dim=32, chunk_len=4, text_encoder="fake-hashing", head="gaussian"
    )
    cfg = SFTConfig(episodes_per_task=4, steps=3, batch_size=8)
    run_sft(demo_dir, tmp_path / "ckpt", vla, cfg)
    table = WordingTable.from_dict(
        {"tasks": {"put_bowl_on_top_rack": {"canonical_prob": 0.0, "wordings": ["lift the bowl up high"]}}}
    )
    path, _, cached = run_sft(demo_dir, tmp_path / "ckpt", vla, cfg, wordings=table)
    assert not cached  # a new table is a new checkpoint
    assert run_sft(demo_dir, tmp_path / "ckpt", vla, cfg, wordings=table)[2]
    from learner.checkpoints import CheckpointStore

    policy = CheckpointStore.load(path).policy
    assert isinstance(policy, SmallVLAPolicy)
    extra = policy.config.extra
    assert extra["sft_wording"]["tasks"]["put_bowl_on_top_rack"]["wordings"] == ["lift the bowl up high"]
    bad = WordingTable.from_dict({"tasks": {"no_such_task": {"canonical_prob": 0.0}}})
    with pytest.raises(ValueError, match="no_such_task"):
        run_sft(demo_dir, tmp_path / "ckpt", vla, cfg, wordings=bad)


def test_sft_trains_the_tasks_file_prompt_and_refuses_demos_of_unknown_tasks(tmp_path):
    from learner.sft import build_dataset, catalogue_prompts
    from pde_contract.episodes import write_episode
    from pde_contract.tasks import UnknownTaskError, load_tasks

    demos = tmp_path / "demos"
    for seed in range(2):  # a lab task's demos, recorded before the lab settled on its wording
        write_episode(demos / f"stack-{seed}.msgpack", _demo("stack_cups", "put the cups together", seed))
    files = select_demo_files(demos, 4)
    with pytest.raises(
        UnknownTaskError, match=r"demo .*stack-0\.msgpack: unknown task\(s\) \['stack_cups'\]"
    ):
        catalogue_prompts(files, load_tasks(None))
    tasks = tmp_path / "tasks.toml"
    tasks.write_text('[tasks.stack_cups]\nprompt = "stack the blue cup on the red cup"\n')
    prompt_of = catalogue_prompts(files, load_tasks(tasks))
    assert prompt_of == {"stack_cups": "stack the blue cup on the red cup"}
    vla = VLAConfig(image_size_px=16, hidden_dim=32, chunk_len=4, text_encoder="fake-hashing")
    data = build_dataset(SmallVLAPolicy(vla), files, prompt_of)
    assert set(data.canonical_prompts) == {"stack the blue cup on the red cup"}
    cfg = SFTConfig(episodes_per_task=4, steps=2, batch_size=4)
    assert not run_sft(demos, tmp_path / "ckpt", vla, cfg)[2]
    # The tasks file's prompt is another training set: a new checkpoint, then cached.
    assert not run_sft(demos, tmp_path / "ckpt", vla, cfg, catalogue=load_tasks(tasks))[2]
    assert run_sft(demos, tmp_path / "ckpt", vla, cfg, catalogue=load_tasks(tasks))[2]


def test_action_windows_of_an_overlapped_episode_hold_the_rows_that_ran():
    """Chunk i's window starts at its observation: its first k rows were skipped (in the past), so
    the observation came k rows before its first row ran, under the previous chunk."""
    ep = _demo("t", "put the bowl on the top rack", 0, n_chunks=3, rows=6)
    for i, chunk in enumerate(ep.chunks):
        chunk.actions = np.full((6, 7), 0.0) + 10 * i + np.arange(6)[:, None]  # row r: 10 i + r
    ep.chunks[0].rows_run = (0, 4)
    ep.chunks[1].rows_run = (2, 5)
    ep.chunks[2].rows_run = (1, 6)
    w = action_windows(ep, 4)
    # executed: 0 1 2 3 | 12 13 14 | 21 22 23 24 25
    assert w[0][:, 0].tolist() == [0, 1, 2, 3]
    assert w[1][:, 0].tolist() == [2, 3, 12, 13]  # observed 2 rows before chunk 1 took over
    assert w[2][:, 0].tolist() == [14, 21, 22, 23]
