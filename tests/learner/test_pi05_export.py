"""``pde learner export-policy --format lerobot``: a π0.5 policy as LeRobot 0.6.1's checkpoint
directory (files, keys and step configs as LeRobot's sources write and read them, and equal to the
files LeRobot 0.6.1 itself saved for the same policy: tests/fixtures/pi05_lerobot/, recorded by
bench/check_pi05_lerobot.py), which this project's reader loads back to the same actions; LoRA
merged; what LeRobot cannot express refused."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file, save_file

from learner.checkpoints import CheckpointStore
from learner.main import main
from learner.policies.pi05 import Pi05CheckpointError, Pi05Options, load_pi05
from learner.policies.pi05_checkpoint import WEIGHTS_FILE
from learner.policies.pi05_export import NORMALIZER_FILE, UNNORMALIZER_FILE, export_lerobot
from learner.policies.pi05_model import TINY_CONFIG, Pi05Config, Pi05Model
from learner.policies.vla import make_test_policy
from learner.synthetic import synthetic_observation
from tests.learner.pi05_tiny import (
    IMAGE_KEYS,
    JOINT_ACTION_NAMES,
    make_joint_checkpoint,
    make_tiny_checkpoint,
    tiny_tokenizer_json,
)

PROMPT = "put the green container in the bowl"
# LeRobot 0.6.1's PreTrainedConfig and PI05Config fields (configs/policies.py, configuration_pi05.py).
LEROBOT_PI05_FIELDS = {
    *("type", "n_obs_steps", "input_features", "output_features", "device", "use_amp", "use_peft"),
    *("push_to_hub", "repo_id", "private", "tags", "license", "pretrained_path", "pretrained_revision"),
    *("paligemma_variant", "action_expert_variant", "dtype", "chunk_size", "n_action_steps"),
    *("max_state_dim", "max_action_dim", "num_inference_steps", "time_sampling_beta_alpha"),
    *("time_sampling_beta_beta", "time_sampling_scale", "time_sampling_offset", "min_period"),
    *("max_period", "use_relative_actions", "relative_exclude_joints", "action_feature_names"),
    *("rtc_config", "image_resolution", "empty_cameras", "tokenizer_max_length"),
    *("normalization_mapping", "gradient_checkpointing", "compile_model", "compile_mode"),
    *("freeze_vision_encoder", "train_expert_only", "optimizer_lr", "optimizer_betas", "optimizer_eps"),
    *("optimizer_weight_decay", "optimizer_grad_clip_norm", "scheduler_warmup_steps"),
    *("scheduler_decay_steps", "scheduler_decay_lr"),
}


def _obs(n=2):
    rng = np.random.default_rng(0)
    return [synthetic_observation(rng, size_px=24, seq=i) for i in range(n)]


def _same_samples(a, b, obs):
    torch.manual_seed(7)
    x = a.sample(obs, [PROMPT] * len(obs))
    torch.manual_seed(7)
    y = b.sample(obs, [PROMPT] * len(obs))
    np.testing.assert_allclose(y.actions, x.actions, rtol=1e-5, atol=1e-5)


def test_the_export_has_lerobots_files_keys_and_steps_and_loads_back_to_the_same_actions(tmp_path):
    relative = {"use_relative_actions": True, "action_feature_names": JOINT_ACTION_NAMES}
    policy = load_pi05(make_joint_checkpoint(tmp_path / "src", relative))
    out = export_lerobot(policy, tmp_path / "lerobot")
    config = json.loads((out / "config.json").read_text())
    # Only PI05Config's fields (LeRobot refuses others), also at a size LeRobot does not build: the
    # sizes it has no field for are ours, in pde_pi05.json.
    assert set(config) <= LEROBOT_PI05_FIELDS
    sizes = json.loads((out / "pde_pi05.json").read_text())["model_sizes"]
    assert sizes == {"vision_variant": "dummy", "vocab_size": 512}
    assert config["type"] == "pi05" and config["n_action_steps"] == config["chunk_size"]
    assert config["device"] == ("cuda" if torch.cuda.is_available() else "cpu")  # what exists here
    assert list(config["input_features"]) == [*IMAGE_KEYS, "observation.state"]
    assert config["output_features"] == {"action": {"type": "ACTION", "shape": [8]}}
    assert config["use_relative_actions"] and config["relative_exclude_joints"] == ["gripper_width_m"]
    weights = load_file(out / "model.safetensors")
    ours = {f"model.{k}" for k in policy.model.state_dict()}
    lm_heads = {f"model.paligemma_with_expert.{m}.lm_head.weight" for m in ("paligemma", "gemma_expert")}
    assert set(weights) == ours | lm_heads  # LeRobot loads strictly
    pre = json.loads((out / "policy_preprocessor.json").read_text())
    post = json.loads((out / "policy_postprocessor.json").read_text())
    assert [s["registry_name"] for s in pre["steps"]] == [
        *("rename_observations_processor", "to_batch_processor", "relative_actions_processor"),
        *("normalizer_processor", "pi05_prepare_state_tokenizer_processor_step", "tokenizer_processor"),
        "device_processor",
    ]
    assert [s["registry_name"] for s in post["steps"]] == [
        *("unnormalizer_processor", "absolute_actions_processor", "device_processor")
    ]
    assert pre["steps"][3]["state_file"] == NORMALIZER_FILE
    assert post["steps"][0]["state_file"] == UNNORMALIZER_FILE
    stats = load_numpy(str(out / NORMALIZER_FILE))
    assert set(stats) == {"observation.state.q01", "observation.state.q99", "action.q01", "action.q99"}
    assert set(load_numpy(str(out / UNNORMALIZER_FILE))) == {"action.q01", "action.q99"}
    # This project's reader takes the directory as --init DIR: same actions, relative columns kept.
    back = load_pi05(out)
    assert back.relative == policy.relative == (True,) * 7 + (False,)
    assert back.mapping == policy.mapping
    _same_samples(policy, back, policy.preprocess(_obs()))


def test_n_action_steps_is_kept_as_the_checkpoint_said_and_device_defaults_to_what_exists(tmp_path, capsys):
    # A LeRobot π0.5 that runs 2 of its 4 rows per inference exports as such, not forced to 4.
    src = make_tiny_checkpoint(tmp_path / "src")
    raw = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(raw | {"n_action_steps": 2}))
    policy = load_pi05(src)
    assert policy.config.n_action_steps == 2 and policy.config.chunk_size == 4
    store = CheckpointStore(tmp_path / "ck")
    store.save(policy, 1)  # and through our own checkpoint file
    argv = ["export-policy", "--format", "lerobot", "--checkpoints", str(tmp_path / "ck")]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["n_action_steps"], config["chunk_size"]) == (2, 4)
    assert config["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    (src / "config.json").write_text(json.dumps(raw | {"n_action_steps": 5}))
    with pytest.raises(Pi05CheckpointError, match=r"n_action_steps 5 must be in 1\.\.chunk_size"):
        load_pi05(src)


def test_lora_is_merged_into_the_exported_layers(tmp_path):
    policy = load_pi05(make_tiny_checkpoint(tmp_path / "src"), Pi05Options(trainable="lora", lora_rank=2))
    with torch.no_grad():
        for name, p in policy.lora.named_parameters():
            if name.endswith(".B"):
                p.normal_(0.0, 0.5)
    back = load_pi05(export_lerobot(policy, tmp_path / "lerobot"))
    assert not back.lora
    _same_samples(policy, back, policy.preprocess(_obs()))


def test_constant_statistics_are_exported_as_q01_equal_q99(tmp_path):
    from safetensors.numpy import save_file

    from learner.policies.pi05_checkpoint import STATS_FILE

    d = make_tiny_checkpoint(tmp_path / "src")
    stats = load_numpy(str(d / STATS_FILE))
    stats["observation.state.q99"][7] = stats["observation.state.q01"][7] = 0.04
    save_file(stats, str(d / STATS_FILE))
    out = export_lerobot(load_pi05(d), tmp_path / "lerobot")
    exported = load_numpy(str(out / NORMALIZER_FILE))
    assert exported["observation.state.q01"][7] == exported["observation.state.q99"][7] == np.float32(0.04)
    np.testing.assert_allclose(exported["action.q99"], stats["action.q99"], rtol=1e-6)


def test_the_cli_exports_a_policy_checkpoint_and_refuses_what_lerobot_cannot_take(tmp_path, capsys):
    store = CheckpointStore(tmp_path / "ck")
    store.save(load_pi05(make_tiny_checkpoint(tmp_path / "src")), 3)
    argv = ["export-policy", "--format", "lerobot", "--checkpoints", str(tmp_path / "ck")]
    assert main([*argv, "--out", str(tmp_path / "out"), "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 3
    # LeRobot's pipeline puts the batch where config.device says; a cuda one does not load without CUDA.
    pre = json.loads((tmp_path / "out" / "policy_preprocessor.json").read_text())
    assert pre["steps"][-1]["config"]["device"] == "cpu"
    assert json.loads((tmp_path / "out" / "config.json").read_text())["device"] == "cpu"
    small = CheckpointStore(tmp_path / "small")
    small.save(make_test_policy(), 0)
    argv = ["export-policy", "--format", "lerobot", "--checkpoints", str(tmp_path / "small")]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert "only π0.5 policies" in capsys.readouterr().err
    d = make_tiny_checkpoint(tmp_path / "libero")
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(raw | {"discrete_state_input": False}))
    with pytest.raises(Pi05CheckpointError, match="always writes the state"):
        export_lerobot(load_pi05(d), tmp_path / "y")


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pi05_lerobot"
# Ours for LeRobot's: the FR3's action names where a LeRobot dataset's stood (the mask is the same).
RENAMED = {"action_feature_names", "relative_exclude_joints", "action_names", "exclude_joints"}


def _lerobot_saved(directory: Path) -> Path:
    """The π0.5 LeRobot 0.6.1 saved (bench/check_pi05_lerobot.py) with random weights of its shapes
    and what a lab adds: the tokenizer, and pde_pi05.json with the two tiny sizes."""
    shutil.copytree(FIXTURE, directory)
    raw = json.loads((directory / "config.json").read_text())
    sizes = {"vision_variant": "dummy", "vocab_size": TINY_CONFIG.vocab_size}
    model = Pi05Model(Pi05Config.from_json_dict(raw | sizes))
    save_file(
        {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}, str(directory / WEIGHTS_FILE)
    )
    (directory / "tokenizer.json").write_text(tiny_tokenizer_json())
    (directory / "pde_pi05.json").write_text(json.dumps({"model_sizes": sizes}))
    return directory


def _without_names(x):
    if isinstance(x, dict):
        return {k: _without_names(v) for k, v in x.items() if k not in RENAMED}
    return [_without_names(v) for v in x] if isinstance(x, list) else x


def test_lerobots_own_save_loads_and_exports_back_to_the_files_lerobot_wrote(tmp_path):
    saved = _lerobot_saved(tmp_path / "saved")
    policy = load_pi05(saved)
    # pde_pi05.json without a mapping (only model_sizes): the defaults, cameras by name.
    assert policy.mapping.cameras == ("external", "wrist")
    assert policy.relative == (True,) * 7 + (False,)  # LeRobot's exclude "gripper" in "gripper.pos"
    assert policy.stats["action"].mode == "MEAN_STD"
    out = export_lerobot(policy, tmp_path / "out", device="cpu")
    for name in ("config.json", "policy_preprocessor.json", "policy_postprocessor.json"):
        ours, theirs = (json.loads((d / name).read_text()) for d in (out, saved))
        if name == "config.json":  # LeRobot writes all of PI05Config; ours the same where ours has it
            theirs = {k: v for k, v in theirs.items() if k in ours}
        assert _without_names(ours) == _without_names(theirs), name
    for name in (NORMALIZER_FILE, UNNORMALIZER_FILE):
        ours, theirs = load_numpy(str(out / name)), load_numpy(str(saved / name))
        assert set(ours) <= set(theirs)
        for key, value in ours.items():
            np.testing.assert_allclose(value, theirs[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_model_sizes_that_contradict_config_json_are_refused(tmp_path):
    d = make_tiny_checkpoint(tmp_path / "src")
    (d / "pde_pi05.json").write_text(json.dumps({"model_sizes": {"vocab_size": 256}}))
    with pytest.raises(Pi05CheckpointError, match="disagree"):
        load_pi05(d)
    (d / "pde_pi05.json").write_text(json.dumps({"model_sizes": {"depth": 1}}))
    with pytest.raises(Pi05CheckpointError, match="model_sizes must be"):
        load_pi05(d)
