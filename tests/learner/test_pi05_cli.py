"""``--policy pi05 --init DIR`` through ``pde learner sft|eval|run`` with a tiny random-weight π0.5."""

import numpy as np
import pytest
import torch

from learner.checkpoints import CheckpointStore
from learner.loop.service import parse_args
from learner.main import main
from learner.policies.pi05 import Pi05Policy, load_pi05
from learner.policies.pi05_checkpoint import STATS_FILE
from learner.synthetic import synthetic_episode
from pde_contract.episodes import read_episode, write_episode
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


def test_the_loop_takes_the_policy_flags_apart_from_its_settings(tmp_path):
    args, overrides = parse_args(
        ["--policy", "pi05", "--init", str(tmp_path), "--bf16", "--max-episodes", "3"]
    )
    assert args.policy == "pi05" and args.bf16 is True
    assert overrides == {"max_episodes": 3}
    with pytest.raises(SystemExit):
        parse_args(["--policy", "pi05"])


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
    lo = policy.action_offset - policy.action_scale
    assert np.all(lo.numpy() >= rows.min(0) - 1e-6)
    assert np.isfinite(
        policy.sample(policy.preprocess([demos[0].chunks[0].observation]), [CANON]).actions
    ).all()


def test_an_actor_device_that_is_not_there_stops_the_loop_at_start_up(tmp_path, capsys):
    from learner.loop.service import main as loop_main

    argv = ["--actor-device", "cuda:99", "--database-url", f"sqlite:///{tmp_path}/pde.db"]
    assert loop_main([*argv, "--data-dir", str(tmp_path)]) == 2
    assert "PDE_LEARNER_ACTOR_DEVICE=cuda:99 but torch sees" in capsys.readouterr().err
