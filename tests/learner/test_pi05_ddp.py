"""One PPO update under DDP or FSDP with 2 CPU processes (torchrun, gloo) equals the single-process
update, for the tiny π0.5 and the small policy; a checkpoint written under FSDP holds the whole
weights and Adam state, loads and resumes in one process, and resumes under FSDP alike."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from learner.checkpoints import CheckpointStore
from learner.policies.base import Policy
from learner.policies.pi05_options import Pi05Options
from learner.policies.vla import make_test_policy
from learner.synthetic import synthetic_episode
from learner.trainer import Trainer
from pde_contract.episodes import write_episode
from tests.learner.pi05_ddp_worker import CONFIG, OPTIONS, load_policy, read_batch, run_ranks
from tests.learner.pi05_tiny import make_tiny_checkpoint

CANON = "put the green container in the bowl"
OTHER = "put the green container in front of the camera carefully"


def _write_batch(policy: Policy, tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    listing = []
    for i in range(4):  # 8 chunks: minibatches of 3, 3 and 2 rows
        ep = synthetic_episode(policy, rng, 2, OTHER if i % 2 else CANON, CANON, i < 2, 24, f"e{i}")
        write_episode(tmp_path / f"e{i}.msgpack", ep)
        listing.append([str(tmp_path / f"e{i}.msgpack"), float(i < 2)])
    (tmp_path / "batch.json").write_text(json.dumps(listing))
    return tmp_path / "batch.json"


def _assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, atol=2e-6, rtol=1e-4, msg=name)


def _assert_same_optimizer(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Single-process ``optimizer.state_dict()`` format: same groups, same Adam moments and steps."""
    assert got["param_groups"] == want["param_groups"]
    assert set(got["state"]) == set(want["state"]) and want["state"]
    for i, state in want["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(got["state"][i][key], value, atol=1e-7, rtol=1e-4, msg=f"{i}.{key}")


def _moved(after: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> int:
    return sum(not torch.equal(v, before[k]) for k, v in after.items())


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        ("ddp", OPTIONS),
        ("fsdp", OPTIONS),
        ("fsdp", Pi05Options(flow_steps=2, gradient_checkpointing=True, trainable="lora", lora_rank=2)),
        ("fsdp", Pi05Options(flow_steps=2, gradient_checkpointing=True, trainable="expert")),
    ],
    ids=["ddp", "fsdp", "fsdp-lora-checkpointing", "fsdp-expert-checkpointing"],
)
def test_pi05_update_on_two_processes_equals_the_single_process_update(tmp_path, engine, options):
    init = make_tiny_checkpoint(tmp_path / "pi05")
    listing = _write_batch(load_policy(init, options), tmp_path)

    single = load_policy(init, options)
    trainer = Trainer(single, CONFIG)
    stats = trainer.update(read_batch(listing))

    out = tmp_path / f"{engine}.pt"
    run_ranks(init, listing, out, engine, options=options)
    ranks = torch.load(out, weights_only=False)

    assert ranks["stats"]["minibatch_steps"] == stats["minibatch_steps"] >= 3
    assert abs(ranks["stats"]["pg_loss"] - stats["pg_loss"]) < 1e-5
    _assert_same_weights(ranks["state_dict"], single.state_dict())
    # the update changed the network (π0.5's SigLIP block and 4 Gemma blocks are FSDP units), alike in both
    moved = _moved(single.state_dict(), load_policy(init, options).state_dict())
    assert moved > (50 if options.trainable == "all" else 10)

    # The checkpoint rank 0 wrote is a single-process one: whole weights, Adam state by index.
    ckpt = CheckpointStore.load(out.with_suffix(".ckpt"))
    _assert_same_weights(ckpt.policy.state_dict(), single.state_dict())
    assert ckpt.trainer_state is not None
    _assert_same_optimizer(ckpt.trainer_state["optimizer"], trainer.state_dict()["optimizer"])


def test_small_policy_under_fsdp_and_a_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    init = CheckpointStore(tmp_path / "init").save(make_test_policy("flow"), 0)
    listing = _write_batch(CheckpointStore.load(init).policy, tmp_path)
    batch = read_batch(listing)

    single = Trainer(CheckpointStore.load(init).policy, CONFIG)
    single.update(batch)
    run_ranks(init, listing, tmp_path / "first.pt", "fsdp")  # the policy is one FSDP unit
    first = torch.load(tmp_path / "first.pt", weights_only=False)
    _assert_same_weights(first["state_dict"], single.policy.state_dict())
    assert _moved(single.policy.state_dict(), CheckpointStore.load(init).policy.state_dict()) > 10

    # Round trip: the checkpoint written under FSDP resumes in one process and under FSDP (its Adam
    # state loaded into the ranks' shards); the second updates agree.
    written = CheckpointStore.load(tmp_path / "first.ckpt")
    assert written.trainer_state is not None
    _assert_same_optimizer(written.trainer_state["optimizer"], single.state_dict()["optimizer"])
    resumed = Trainer(written.policy, CONFIG)
    resumed.load_state_dict(written.trainer_state)
    resumed.update(batch)
    run_ranks(init, listing, tmp_path / "second.pt", "fsdp", tmp_path / "first.ckpt")
    second = torch.load(tmp_path / "second.pt", weights_only=False)
    _assert_same_weights(second["state_dict"], resumed.policy.state_dict())
    again = CheckpointStore.load(tmp_path / "second.ckpt").trainer_state
    assert again is not None and again["n_updates"] == resumed.n_updates == 2
    _assert_same_optimizer(again["optimizer"], resumed.state_dict()["optimizer"])
    # Adam's moments came through: a fresh optimiser would have stepped elsewhere.
    fresh = Trainer(CheckpointStore.load(tmp_path / "first.ckpt").policy, CONFIG)
    fresh.update(batch)
    fresh_weights = fresh.policy.state_dict()
    assert any(not torch.allclose(fresh_weights[k], v, atol=1e-5) for k, v in second["state_dict"].items())
