"""The actor's next policy where the actor runs (learner/loop/service.py: ``SnapshotsOn`` and
``trainer_for_actor``), with a real Trainer and the small policy on the CPU. The 'meta' device
stands in for the actor's GPU: a move there is a real move, which cpu -> cpu is not."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch

from learner.loop.service import SnapshotsOn, trainer_for_actor
from learner.loop.training import BackgroundTrainer, TrainedVersion
from learner.policies.vla import make_test_policy
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_episode
from learner.trainer import Batch, Trainer

CANON = "put the green container in the bowl"
CPU, ACTOR = torch.device("cpu"), torch.device("meta")


@pytest.fixture
def trainer_and_batch() -> tuple[Trainer, Batch]:
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    rng = np.random.default_rng(0)
    eps = [synthetic_episode(policy, rng, 2, CANON, CANON, bool(i % 2), size_px=16) for i in range(2)]
    return Trainer(policy, PPOConfig(minibatch_size=4)), [(ep, float(i % 2)) for i, ep in enumerate(eps)]


def _weights(policy: Any) -> dict[str, torch.Tensor]:
    return {k: v for k, v in policy.state_dict().items() if isinstance(v, torch.Tensor)}


def test_updates_pass_through_and_snapshots_are_copies_on_the_given_device(
    trainer_and_batch: tuple[Trainer, Batch],
) -> None:
    trainer, batch = trainer_and_batch
    twin = Trainer(copy.deepcopy(trainer.policy), PPOConfig(minibatch_size=4))
    wrapped = SnapshotsOn(trainer, CPU)
    stats, twin_stats = wrapped.update(batch), twin.update(batch)
    stats.pop("update_s"), twin_stats.pop("update_s")  # wall time
    assert stats == twin_stats  # the same update as the bare trainer's
    assert trainer.n_updates == 1 and trainer.state_dict()["n_updates"] == 1

    snap = wrapped.policy_snapshot()
    assert snap is not trainer.policy and not snap.training
    live = _weights(trainer.policy)  # the trainer's parameters themselves
    trained = {k: v.clone() for k, v in live.items()}
    assert all(torch.equal(_weights(twin.policy)[k], v) for k, v in trained.items())
    for k, v in _weights(snap).items():
        assert v.device == CPU and torch.equal(v, trained[k]), k
        assert v.data_ptr() != live[k].data_ptr(), f"{k} shares the trainer's storage"
    # The trainer trains on; the actor's snapshot keeps the weights it was taken with.
    wrapped.update(batch)
    assert any(not torch.equal(v, trained[k]) for k, v in _weights(trainer.policy).items())
    assert all(torch.equal(v, trained[k]) for k, v in _weights(snap).items())


def test_snapshots_move_to_the_actors_device_and_the_trainer_stays(
    trainer_and_batch: tuple[Trainer, Batch],
) -> None:
    trainer, _ = trainer_and_batch
    snap = SnapshotsOn(trainer, ACTOR).policy_snapshot()
    assert {v.device for v in _weights(snap).values()} == {ACTOR}
    assert {v.device for v in _weights(trainer.policy).values()} == {CPU}
    assert set(_weights(snap)) == set(_weights(trainer.policy))


def test_the_loops_background_update_hands_the_actor_a_policy_on_its_device(
    trainer_and_batch: tuple[Trainer, Batch],
) -> None:
    trainer, batch = trainer_and_batch
    assert trainer_for_actor(trainer, CPU, CPU) is trainer  # one device: no wrapper, no move
    saved: list[Any] = []

    def save(new: TrainedVersion) -> str:
        saved.append(new.policy)
        return f"policy-{new.version}.pt"

    background = BackgroundTrainer(trainer_for_actor(trainer, CPU, ACTOR), save)
    background.start(batch, episode_ids=[1, 2], new_version=1)
    background.join(timeout_s=60)
    result = background.poll()
    assert result is not None and not result.error and result.policy is not None
    assert result.policy.version == 1 and saved == [result.policy]
    assert {v.device for v in _weights(result.policy).values()} == {ACTOR}
    assert {v.device for v in _weights(trainer.policy).values()} == {CPU}
