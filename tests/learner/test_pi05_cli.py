"""``--policy pi05 --init DIR`` through ``pde learner sft|eval|run`` with a tiny random-weight π0.5."""

from typing import Any

import numpy as np
import pytest
import torch

from learner.checkpoints import CheckpointStore
from learner.loop.service import parse_args
from learner.loop.settings import LoopSettings
from learner.main import main
from learner.policies.pi05 import Pi05Policy, load_pi05
from learner.policies.pi05_checkpoint import STATS_FILE
from learner.policies.pi05_options import Pi05Options
from learner.policy_args import pi05_options
from learner.synthetic import synthetic_episode
from pde_contract.episodes import read_episode, write_episode
from tests.helpers import free_port
from tests.learner.pi05_tiny import make_tiny_checkpoint

CANON = "put the green container in the bowl"


def _demos(policy, directory, n=2):
    rng = np.random.default_rng(0)
    for i in range(n):
        ep = synthetic_episode(policy, rng, 2, CANON, CANON, True, 24, f"d{i}")
        ep.task = "put_green_container_in_bowl"
        write_episode(directory / f"d{i}.msgpack", ep)


def test_sft_from_a_pi05_directory_trains_what_the_options_say(tmp_path, capsys):
    init = make_tiny_checkpoint(tmp_path / "pi05")
    (tmp_path / "demos").mkdir()
    _demos(load_pi05(init), tmp_path / "demos")
    argv = ["sft", "--policy", "pi05", "--init", str(init), "--demos", str(tmp_path / "demos")]
    argv += ["--checkpoints", str(tmp_path / "ck"), "--steps", "2", "--batch-size", "2", "--device", "cpu"]
    argv += ["--pi05-trainable", "expert", "--pi05-flow-steps", "2"]
    assert main(argv) == 0
    assert '"cached": false' in capsys.readouterr().out
    loaded = CheckpointStore.load(tmp_path / "ck" / "policy-000000.pt")
    assert isinstance(loaded.policy, Pi05Policy)
    assert loaded.policy.options.trainable == "expert" and loaded.policy.options.flow_steps == 2
    base = load_pi05(init)
    vlm_key = "model.paligemma_with_expert.paligemma.model.language_model.layers.0.mlp.up_proj.weight"
    expert_key = "model.paligemma_with_expert.gemma_expert.model.layers.0.mlp.up_proj.weight"
    trained = loaded.policy.state_dict()
    assert torch.equal(trained[vlm_key], base.state_dict()[vlm_key])  # frozen
    assert not torch.equal(trained[expert_key], base.state_dict()[expert_key])  # trained
    assert main(argv) == 0  # same demos and options: the cached checkpoint
    assert '"cached": true' in capsys.readouterr().out


def test_bad_init_directories_stop_at_start_up_with_a_message(tmp_path, capsys):
    assert main(["sft", "--policy", "pi05", "--demos", str(tmp_path)]) == 2
    assert "--policy pi05 needs --init DIR" in capsys.readouterr().err
    init = make_tiny_checkpoint(tmp_path / "pi05")
    (init / "tokenizer.json").unlink()
    assert main(["eval", "--policy", "pi05", "--init", str(init), "--task", "t", "--prompt", "p"]) == 2
    assert "no tokenizer.json" in capsys.readouterr().err


def _settings(**overrides: Any) -> LoopSettings:
    return LoopSettings(**overrides)  # the environment's, with the flags' overrides


def test_the_loop_takes_the_policy_from_its_settings_and_the_flags_override_them(
    tmp_path, monkeypatch, capsys
):
    for name in (
        "POLICY",
        "INIT",
        "PI05_TRAINABLE",
        "PI05_LORA_RANK",
        "PI05_FLOW_STEPS",
        "BF16",
        "GRADIENT_CHECKPOINTING",
    ):
        monkeypatch.delenv(f"PDE_LOOP_{name}", raising=False)
    _, overrides = parse_args([])
    assert _settings(**overrides).policy == "small" and pi05_options(_settings()) == Pi05Options()
    # As compose sets them: the policy, the mounted directory, unset options as empty strings.
    monkeypatch.setenv("PDE_LOOP_POLICY", "pi05")
    monkeypatch.setenv("PDE_LOOP_INIT", "/models/pi05")
    monkeypatch.setenv("PDE_LOOP_PI05_TRAINABLE", "expert")
    monkeypatch.setenv("PDE_LOOP_PI05_LORA_RANK", "")
    monkeypatch.setenv("PDE_LOOP_BF16", "true")
    s = _settings()
    assert (s.policy, s.init, s.pi05_lora_rank) == ("pi05", "/models/pi05", None)
    assert pi05_options(s) == Pi05Options(trainable="expert", bf16=True)
    _, overrides = parse_args(["--init", str(tmp_path), "--pi05-trainable", "lora", "--max-episodes", "3"])
    s = _settings(**overrides)
    assert (s.policy, s.init, s.max_episodes) == ("pi05", str(tmp_path), 3)
    assert pi05_options(s) == Pi05Options(trainable="lora", bf16=True)
    # What does not fit is refused with both ways to set it (pde loop exits 2 with the message).
    _, overrides = parse_args(["--policy", "small"])
    with pytest.raises(
        ValueError, match=r"--init \(PDE_LOOP_INIT\) is for --policy \(PDE_LOOP_POLICY\) pi05"
    ):
        _settings(**overrides)
    monkeypatch.setenv("PDE_LOOP_INIT", "")
    with pytest.raises(ValueError, match=r"pi05 needs --init \(PDE_LOOP_INIT\) DIR"):
        _settings()
    from learner.loop.service import main as loop_main

    assert loop_main(["--database-url", f"sqlite:///{tmp_path}/pde.db", "--data-dir", str(tmp_path)]) == 2
    assert "pde loop: invalid settings" in capsys.readouterr().err
    monkeypatch.setenv("PDE_LOOP_INIT", "/models/pi05")
    monkeypatch.setenv("PDE_LOOP_PI05_LORA_RANK", "0")
    with pytest.raises(ValueError, match="lora_rank must be >= 1"):
        _settings()


def test_the_loop_makes_version_0_from_the_directory_its_environment_names(tmp_path, monkeypatch, capsys):
    from learner.loop.service import main as loop_main

    init = make_tiny_checkpoint(tmp_path / "pi05")
    # As the compose stacks set them; no flags. No robot server answers: version 0 is made first.
    for k, v in {"POLICY": "pi05", "INIT": str(init), "PI05_FLOW_STEPS": "2", "PI05_TRAINABLE": ""}.items():
        monkeypatch.setenv(f"PDE_LOOP_{k}", v)
    argv = ["--database-url", f"sqlite:///{tmp_path}/pde.db", "--data-dir", str(tmp_path / "data")]
    assert loop_main([*argv, "--robot", f"tcp://127.0.0.1:{free_port()}", "--device", "cpu"]) == 2
    assert "cannot reach the robot server" in capsys.readouterr().err
    loaded = CheckpointStore.load(tmp_path / "data" / "checkpoints" / "policy-000000.pt")
    assert isinstance(loaded.policy, Pi05Policy)
    assert loaded.policy.options == Pi05Options(flow_steps=2) and loaded.policy.source_dir == str(init)


def test_a_base_checkpoint_without_statistics_takes_them_from_the_demos(tmp_path, capsys):
    init = make_tiny_checkpoint(tmp_path / "pi05")
    (tmp_path / "demos").mkdir()
    _demos(load_pi05(init), tmp_path / "demos")
    (init / STATS_FILE).unlink()  # as a base checkpoint: no statistics of this robot
    eval_argv = ["eval", "--policy", "pi05", "--init", str(init), "--task", "t", "--prompt", "p"]
    assert main(eval_argv) == 2
    assert "starts with `pde learner sft`" in capsys.readouterr().err
    argv = ["sft", "--policy", "pi05", "--init", str(init), "--demos", str(tmp_path / "demos")]
    argv += ["--checkpoints", str(tmp_path / "ck"), "--steps", "1", "--batch-size", "2", "--device", "cpu"]
    assert main(argv) == 0
    policy = CheckpointStore.load(tmp_path / "ck" / "policy-000000.pt").policy
    assert isinstance(policy, Pi05Policy) and policy.statistics_known
    demos = [read_episode(p) for p in sorted((tmp_path / "demos").iterdir())]
    rows = np.concatenate([np.asarray(c.actions) for ep in demos for c in ep.chunks])
    # q01/q99 of the demos' action rows (the windows repeat rows and pad with holds: within their range)
    lo = policy.stats["action"].denormalize(-1.0)  # q01
    assert np.all(lo >= rows.min(0) - 1e-6)
    assert np.isfinite(
        policy.sample(policy.preprocess([demos[0].chunks[0].observation]), [CANON]).actions
    ).all()


def test_an_actor_device_that_is_not_there_stops_the_loop_at_start_up(tmp_path, capsys):
    from learner.loop.service import main as loop_main

    argv = ["--actor-device", "cuda:99", "--database-url", f"sqlite:///{tmp_path}/pde.db"]
    assert loop_main([*argv, "--data-dir", str(tmp_path)]) == 2
    assert "PDE_LEARNER_ACTOR_DEVICE=cuda:99 but torch sees" in capsys.readouterr().err
