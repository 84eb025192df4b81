"""Checkpoint fidelity against LeRobot 0.6.1 / openpi, with small hand-written directories in their
layouts and random weights at the tiny size: relative actions, action spaces, cameras by name, the
prompt without state, constant statistics, the checkpoint's sampling steps."""

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy

from learner.checkpoints import CheckpointStore
from learner.policies.pi05 import Pi05CheckpointError, Pi05Options, load_pi05, state_prompt, task_prompt
from learner.policies.pi05_checkpoint import ACTION_NAMES, PREPROCESSOR_FILE, STATS_FILE, Pi05Mapping
from learner.synthetic import synthetic_observation
from pde_contract.messages import STATE_VECTOR_NAMES, ActionSpace
from tests.learner.pi05_tiny import (
    IMAGE_KEYS,
    JOINT_ACTION_NAMES,
    make_joint_checkpoint,
    make_tiny_checkpoint,
)

PROMPT = "put the green container in the bowl"
RELATIVE = {
    "use_relative_actions": True,
    "relative_exclude_joints": ["gripper"],
    "action_feature_names": JOINT_ACTION_NAMES,
}


def _obs(n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [synthetic_observation(rng, size_px=24, seq=i) for i in range(n)]


def _joints_and_gripper(obs_state: torch.Tensor) -> np.ndarray:
    return obs_state.numpy()[:, [8, 9, 10, 11, 12, 13, 14, 7]]  # STATE_VECTOR_NAMES indices


def test_a_relative_checkpoint_sends_state_plus_offset_for_all_but_the_excluded_gripper(tmp_path):
    absolute = load_pi05(make_joint_checkpoint(tmp_path / "abs"))
    relative = load_pi05(make_joint_checkpoint(tmp_path / "rel", RELATIVE))
    assert absolute.action_space == relative.action_space == ActionSpace.JOINT_ABS
    assert relative.relative == (True,) * 7 + (False,)
    obs = relative.preprocess(_obs())
    torch.manual_seed(1)
    offsets = absolute.sample(obs, [PROMPT] * 2)
    torch.manual_seed(1)
    targets = relative.sample(obs, [PROMPT] * 2)
    np.testing.assert_array_equal(offsets.chain, targets.chain)  # same weights, same noise
    state = _joints_and_gripper(obs.state)
    np.testing.assert_allclose(
        targets.actions[..., :7], offsets.actions[..., :7] + state[:, None, :7], atol=1e-6
    )
    np.testing.assert_allclose(targets.actions[..., 7], offsets.actions[..., 7], atol=1e-7)
    assert np.abs(state[:, :7]).max() > 0.1  # the error the offsets alone would have made
    # SFT's targets are the same offsets: absolute demo actions -> the chain's normalised columns.
    back = relative.normalize_actions(torch.from_numpy(targets.actions).float(), obs.state)
    np.testing.assert_allclose(back[..., :8].numpy(), targets.chain[:, -1, :, :8], atol=1e-4)


def test_relative_columns_follow_lerobots_mask_and_its_preprocessor_json(tmp_path):
    # No action names: LeRobot's mask makes every column relative, the gripper too.
    no_names = {"use_relative_actions": True, "action_feature_names": None}
    d = make_joint_checkpoint(tmp_path / "a", no_names)
    (d / "pde_pi05.json").write_text(json.dumps({"action_space": "joint_abs"}))  # unnamed: declared
    assert load_pi05(d).relative == (True,) * 8
    # What LeRobot runs is the pipeline's step config: it overrides config.json.
    d = make_joint_checkpoint(tmp_path / "b")
    step = {"enabled": True, "exclude_joints": ["JOINT_7", "grip"], "action_names": JOINT_ACTION_NAMES}
    pipeline = {
        "name": "policy_preprocessor",
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {}},
            {"registry_name": "relative_actions_processor", "config": step},
        ],
    }
    (d / PREPROCESSOR_FILE).write_text(json.dumps(pipeline))
    assert load_pi05(d).relative == (True,) * 6 + (False, False)


def test_relative_actions_that_cannot_become_targets_are_refused(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "ee")
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(
        json.dumps(raw | RELATIVE | {"action_feature_names": list(ACTION_NAMES[ActionSpace.EE_DELTA])})
    )
    with pytest.raises(Pi05CheckpointError, match=r"ee_delta.*use_relative_actions false"):
        load_pi05(d)
    d = make_joint_checkpoint(tmp_path / "order", RELATIVE)
    names = ["gripper_width_m", *(f"joint_{i}_rad" for i in range(1, 8))]
    mapping = Pi05Mapping(tuple(names), ("external", "wrist"), ActionSpace.JOINT_ABS)
    (d / "pde_pi05.json").write_text(json.dumps(mapping.to_file_dict(IMAGE_KEYS)))
    with pytest.raises(
        Pi05CheckpointError, match=r"column 0 \(joint_1_rad\) \+ state entry 0 \(gripper_width_m\)"
    ):
        load_pi05(d)


def test_a_relative_policy_keeps_its_columns_through_a_policy_checkpoint(tmp_path):
    policy = load_pi05(make_joint_checkpoint(tmp_path / "rel", RELATIVE))
    store = CheckpointStore(tmp_path / "ckpts")
    store.save(policy, 0)
    assert store.load(store.path_for(0)).policy.relative == policy.relative


def test_statistics_from_demos_are_of_the_offsets_for_relative_columns(tmp_path):
    policy = load_pi05(make_joint_checkpoint(tmp_path / "rel", RELATIVE))
    obs = policy.preprocess(_obs(3))
    states = obs.state.numpy()
    offsets = np.linspace(-0.05, 0.05, 3 * 4 * 8).reshape(3, 4, 8)
    actions = offsets + np.concatenate([_joints_and_gripper(obs.state)[:, None, :7], np.zeros((3, 1, 1))], -1)
    policy.set_statistics_from(states, actions)
    expected = offsets.reshape(-1, 8)
    stats = policy.stats["action"]
    np.testing.assert_allclose(stats.denormalize(-1.0), np.quantile(expected, 0.01, 0), atol=1e-6)
    np.testing.assert_allclose(stats.denormalize(1.0), np.quantile(expected, 0.99, 0), atol=1e-6)


def _edit_config(d, **fields):
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(raw | fields))


def test_velocity_actions_are_refused_with_what_to_do(tmp_path):
    d = make_joint_checkpoint(tmp_path / "droid")
    _edit_config(d, action_feature_names=[*(f"joint_{i}_velocity" for i in range(7)), "gripper_position"])
    with pytest.raises(Pi05CheckpointError, match=r"velocities.*pde learner sft --policy pi05 --init COPY"):
        load_pi05(d)


def test_cameras_are_matched_by_the_image_inputs_names(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "named")
    raw = json.loads((d / "config.json").read_text())
    visual = {"type": "VISUAL", "shape": [3, 16, 16]}
    features = {"observation.images.wrist_cam": visual, "observation.images.front": visual}
    _edit_config(
        d, input_features=features | {"observation.state": raw["input_features"]["observation.state"]}
    )
    policy = load_pi05(d)  # no mapping file: by name, the wrist input first
    assert policy.cameras == ("wrist", "external")
    obs = _obs(1)
    wrist_only = load_pi05(d).preprocess(obs).images[0, 0]
    (d / "pde_pi05.json").write_text(
        json.dumps(
            {"state_names": list(STATE_VECTOR_NAMES), "cameras": {"wrist_cam": "wrist", "front": None}}
        )
    )
    mapped = load_pi05(d)
    assert mapped.mapping.cameras == ("wrist", None) and mapped.cameras == ("wrist",)
    assert torch.equal(mapped.preprocess(obs).images[0, 0], wrist_only)
    (d / "pde_pi05.json").write_text(json.dumps({"state_names": [], "cameras": ["wrist", "external"]}))
    with pytest.raises(
        Pi05CheckpointError, match=r'by name, not by order.*"wrist_cam": "wrist", "front": "external"'
    ):
        load_pi05(d)
    (d / "pde_pi05.json").write_text(json.dumps({"state_names": [], "cameras": {"top": "external"}}))
    with pytest.raises(Pi05CheckpointError, match=r"\['top'\], which are not image inputs"):
        load_pi05(d)


def test_the_prompt_without_state_comes_from_the_config_or_the_mapping_file(tmp_path):
    with_state = load_pi05(make_tiny_checkpoint(tmp_path / "s"))
    d = make_tiny_checkpoint(tmp_path / "libero")
    _edit_config(d, discrete_state_input=False)
    policy = load_pi05(d)
    assert not policy.state_in_prompt and with_state.state_in_prompt
    obs = policy.preprocess(_obs(2))
    obs.state[1] = obs.state[0] + 0.5  # another state: the prompt (and so the chunk) must not change
    ids, _ = policy.tokenize([PROMPT] * 2, policy.normalize_state(obs.state).numpy())
    assert torch.equal(ids[0], ids[1])
    assert ids[0].tolist() == policy._tokenizer.encode(task_prompt(PROMPT)).ids
    ids_s, _ = with_state.tokenize([PROMPT] * 2, with_state.normalize_state(obs.state).numpy())
    assert not torch.equal(ids_s[0], ids_s[1])
    _edit_config(d, discrete_state_input=None)
    (d / "pde_pi05.json").write_text(
        json.dumps(
            {
                "state_in_prompt": False,
                "state_names": list(STATE_VECTOR_NAMES),
                "cameras": {"base_0_rgb": "external"},
            }
        )
    )
    assert not load_pi05(d).state_in_prompt
    _edit_config(d, discrete_state_input=True)
    with pytest.raises(Pi05CheckpointError, match="disagree"):
        load_pi05(d)


def _lerobot_quantiles(x, q01, q99, inverse=False):
    """LeRobot 0.6.1's NormalizerProcessorStep for QUANTILES, float32 (eps 1e-8 for a zero range)."""
    q01, q99 = torch.tensor(q01, dtype=torch.float32), torch.tensor(q99, dtype=torch.float32)
    denom = q99 - q01
    denom = torch.where(denom == 0, torch.tensor(1e-8, dtype=torch.float32), denom)
    return (x + 1.0) * denom / 2.0 + q01 if inverse else 2.0 * (x - q01) / denom - 1.0


def test_constant_entries_normalise_as_lerobot_does(tmp_path):
    d = make_joint_checkpoint(tmp_path / "const")
    q01, q99 = np.array([-2.8] * 7 + [0.04]), np.array([2.8] * 7 + [0.04])  # a gripper never moved
    act01, act99 = np.array([-0.1] * 7 + [0.0]), np.array([0.1] * 6 + [-0.1, 0.0])
    stats = {
        "observation.state.q01": q01,
        "observation.state.q99": q99,
        "action.q01": act01,
        "action.q99": act99,
    }
    save_numpy({k: v.astype(np.float32) for k, v in stats.items()}, str(d / STATS_FILE))
    policy = load_pi05(d)
    obs = policy.preprocess(_obs(3))
    obs.state[0, 7], obs.state[1, 7], obs.state[2, 7] = 0.04, 0.05, 0.03  # at, above, below q01
    raw = obs.state[:, [8, 9, 10, 11, 12, 13, 14, 7]]
    norm = policy.normalize_state(obs.state)
    torch.testing.assert_close(norm, _lerobot_quantiles(raw, q01, q99), rtol=0, atol=0)
    assert float(norm[0, 7]) == -1.0  # the old centring gave 0 (bin 128)
    bins = [state_prompt(PROMPT, n).split("State: ")[1].split(";")[0].split()[7] for n in norm.numpy()]
    assert bins == ["0", "255", "-1"]
    chunk = torch.rand(3, 4, 8) * 2 - 1
    out = policy.denormalize_actions(chunk, obs.state)
    torch.testing.assert_close(out, _lerobot_quantiles(chunk, act01, act99, inverse=True), rtol=0, atol=0)


def test_deterministic_sampling_takes_the_checkpoints_inference_steps(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "steps")
    _edit_config(d, num_inference_steps=7)
    policy = load_pi05(d, Pi05Options(flow_steps=3))
    obs = policy.preprocess(_obs(1))
    torch.manual_seed(4)
    s = policy.sample(obs, [PROMPT], deterministic=True)
    assert s.chain.shape[1] == 8 and np.isnan(s.log_prob).all()
    # LeRobot's Euler: dt = -1/7 from t = 1, x += dt * v(x, t), from the same noise.
    torch.manual_seed(4)
    x = torch.randn(1, policy.chunk_len, policy.config.max_action_dim)
    velocity = policy.velocity_fn(policy.condition(policy.encode_observations(obs), [PROMPT]))
    with torch.no_grad():
        for i in range(7):
            x = x - velocity(x[:, None], torch.tensor([1.0 - i / 7]))[:, 0] / 7
    np.testing.assert_allclose(s.chain[:, -1], x.numpy(), atol=1e-5)
    assert policy.sample(obs, [PROMPT]).chain.shape[1] == 4  # the flow-SDE chain keeps flow_steps


def test_min_max_normalisation_maps_min_and_max_to_minus_one_and_one_and_exports_as_such(tmp_path):
    # LeRobot's MIN_MAX: 2 (x - min) / (max - min) - 1, statistics keys <feature>.min / .max.
    from learner.policies.pi05_export import NORMALIZER_FILE, export_lerobot
    from tests.learner.pi05_tiny import action_stats, state_stats

    d = make_tiny_checkpoint(tmp_path / "src")
    raw = json.loads((d / "config.json").read_text())
    raw["normalization_mapping"] = {"VISUAL": "IDENTITY", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"}
    (d / "config.json").write_text(json.dumps(raw))
    s, a = state_stats(), action_stats()
    stats = {f"observation.state.{k}": s[q].astype(np.float32) for k, q in (("min", "q01"), ("max", "q99"))}
    stats |= {f"action.{k}": a[q].astype(np.float32) for k, q in (("min", "q01"), ("max", "q99"))}
    save_numpy(stats, str(d / STATS_FILE))
    policy = load_pi05(d)
    st = policy.stats["state"]
    assert st.mode == "MIN_MAX"
    np.testing.assert_allclose(st.normalize(s["q01"].astype(np.float32)), -1.0, atol=1e-6)
    np.testing.assert_allclose(st.normalize(s["q99"].astype(np.float32)), 1.0, atol=1e-6)
    out = export_lerobot(policy, tmp_path / "out", device="cpu")
    assert json.loads((out / "config.json").read_text())["normalization_mapping"]["ACTION"] == "MIN_MAX"
    exported = load_numpy(str(out / NORMALIZER_FILE))
    np.testing.assert_allclose(exported["action.min"], a["q01"], rtol=1e-6)
    np.testing.assert_allclose(exported["action.max"], a["q99"], rtol=1e-6)
    # A MIN_MAX checkpoint without min/max says which statistics it needs.
    save_numpy(
        {k.replace(".min", ".q01").replace(".max", ".q99"): v for k, v in stats.items()}, str(d / STATS_FILE)
    )
    with pytest.raises(Pi05CheckpointError, match=r"MIN_MAX normalisation needs \['min', 'max'\]"):
        load_pi05(d)
