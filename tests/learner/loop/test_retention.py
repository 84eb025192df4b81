"""The loop's checkpoint retention (learner/loop/retention.py) on real files and a real store:
what stays after N saves, with and without the trainer state; resuming from the newest; versions
in use and version 0 kept; nothing pruned when a save fails."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from learner.checkpoint_files import Retention
from learner.checkpoints import CheckpointStore
from learner.loop.retention import CheckpointKeeper
from learner.loop.service import parse_args
from learner.loop.settings import LoopSettings
from learner.policies.vla import SmallVLAPolicy, make_test_policy
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_episode
from learner.trainer import Trainer
from pde_storage import Store

TASK = "put_green_container_in_bowl"
CANON = "put the green container in the bowl"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{tmp_path}/pde.db", tmp_path / "media") as s:
        yield s


@pytest.fixture
def trained() -> tuple[SmallVLAPolicy, Trainer]:
    """A tiny policy after one real PPO update: its trainer state holds Adam's moments."""
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    trainer = Trainer(policy, PPOConfig(minibatch_size=4))
    rng = np.random.default_rng(0)
    eps = [synthetic_episode(policy, rng, 2, CANON, CANON, bool(i % 2), size_px=20) for i in range(2)]
    trainer.update([(ep, float(i % 2)) for i, ep in enumerate(eps)])
    return policy, trainer


def _start(tmp_path: Path, store: Store, policy: SmallVLAPolicy) -> CheckpointStore:
    """Version 0 (the SFT policy, no trainer state), registered as the loop does at start-up."""
    checkpoints = CheckpointStore(tmp_path / "checkpoints")
    store.add_checkpoint(0, checkpoints.save(policy, 0, {"sft_loss": 1.0}), {"sft_loss": 1.0})
    return checkpoints


def _with_state(checkpoints: CheckpointStore) -> set[int]:
    return {v for v in checkpoints.versions() if checkpoints.load(checkpoints.path_for(v)).trainer_state}


def _pruned_rows(store: Store) -> set[int]:
    return {c.version for c in store.checkpoints() if c.pruned_at is not None}


@pytest.mark.parametrize(
    ("keep_state", "keep_versions", "files", "with_state"),
    [
        (1, 0, {0, 1, 2, 3, 4, 5}, {5}),  # the defaults: every version, Adam state in the newest only
        (2, 3, {0, 3, 4, 5}, {4, 5}),
        (0, 2, {0, 4, 5}, {4, 5}),  # 0: every kept version keeps its trainer state
        (0, 0, {0, 1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}),  # prune nothing
    ],
)
def test_after_n_saves_exactly_the_expected_files_and_trainer_states_remain(
    tmp_path: Path,
    store: Store,
    trained: tuple[SmallVLAPolicy, Trainer],
    keep_state: int,
    keep_versions: int,
    files: set[int],
    with_state: set[int],
) -> None:
    policy, trainer = trained
    checkpoints = _start(tmp_path, store, policy)
    keeper = CheckpointKeeper(checkpoints, store, Retention(keep_state, keep_versions))
    for version in range(1, 6):
        keeper.save(policy, version, {"v": float(version)}, trainer.state_dict(), in_use={version - 1})
    assert set(checkpoints.versions()) == files
    assert _with_state(checkpoints) == with_state
    # every version keeps its row and metrics; the removed ones say so
    assert [c.version for c in store.checkpoints()] == [0, 1, 2, 3, 4, 5]
    assert _pruned_rows(store) == {0, 1, 2, 3, 4, 5} - files
    assert not list(checkpoints.directory.glob("*.tmp"))


def test_resume_from_the_newest_loads_its_trainer_state_and_older_weights_are_intact(
    tmp_path: Path, store: Store, trained: tuple[SmallVLAPolicy, Trainer], caplog: pytest.LogCaptureFixture
) -> None:
    policy, trainer = trained
    checkpoints = _start(tmp_path, store, policy)
    keeper = CheckpointKeeper(checkpoints, store, Retention(keep_trainer_state=1))
    keeper.save(policy, 1, {}, trainer.state_dict(), in_use={0})
    size_with_state = checkpoints.path_for(1).stat().st_size
    weights_v1 = {k: v.clone() for k, v in policy.state_dict().items()}
    rng = np.random.default_rng(1)
    trainer.update([(synthetic_episode(policy, rng, 2, CANON, CANON, True, size_px=20), 1.0)])
    with caplog.at_level(logging.INFO, logger="learner.loop.retention"):
        keeper.save(policy, 2, {}, trainer.state_dict(), in_use={1})
    freed = size_with_state - checkpoints.path_for(1).stat().st_size
    assert freed > 0
    assert f"trainer state dropped from v1, files removed none: {freed / 1e6:.1f} MB freed" in caplog.text

    older = checkpoints.load(checkpoints.path_for(1))
    assert older.trainer_state is None
    for k, v in older.policy.state_dict().items():
        assert torch.equal(v, weights_v1[k]), k

    latest = checkpoints.latest()
    assert latest is not None and latest.version == 2 and latest.trainer_state is not None
    assert latest.trainer_state["n_updates"] == 2
    resumed = Trainer(latest.policy, PPOConfig(minibatch_size=4))
    resumed.load_state_dict(latest.trainer_state)
    adam, before = resumed.optimizer.state_dict()["state"], trainer.optimizer.state_dict()["state"]
    assert adam and adam.keys() == before.keys()
    for i, s in adam.items():
        assert torch.equal(s["step"], before[i]["step"]) and torch.equal(s["exp_avg"], before[i]["exp_avg"])
    resumed.update([(synthetic_episode(latest.policy, rng, 2, CANON, CANON, False, size_px=20), 0.0)])
    assert resumed.n_updates == 3


def test_version_0_the_actors_version_and_versions_of_episodes_in_play_are_kept(
    tmp_path: Path, store: Store, trained: tuple[SmallVLAPolicy, Trainer]
) -> None:
    policy, trainer = trained
    checkpoints = _start(tmp_path, store, policy)
    keeper = CheckpointKeeper(checkpoints, store, Retention(keep_trainer_state=1, keep_versions=1))
    store.ensure_task(TASK, CANON)
    pid = store.prompts(TASK, "canonical")[0].id
    for version in range(1, 4):
        keeper.save(policy, version, {}, trainer.state_dict(), in_use={version - 1})
    assert checkpoints.versions() == [0, 2, 3]  # 2: the actor's while 3 was saved
    awaiting = store.create_episode(TASK, pid, policy_version=3, stage="rl")  # collected by v3
    for version in (4, 5):
        keeper.save(policy, version, {}, trainer.state_dict(), in_use={version - 1})
    assert checkpoints.versions() == [0, 3, 4, 5]  # 3: its episode still runs
    store.abort_episode(awaiting.id, "operator")
    keeper.save(policy, 6, {}, trainer.state_dict(), in_use={5})
    assert checkpoints.versions() == [0, 5, 6]
    assert _pruned_rows(store) == {1, 2, 3, 4}
    assert _with_state(checkpoints) == {6}


class _Unsaveable(SmallVLAPolicy):
    def checkpoint_state(self) -> dict[str, Any]:
        raise RuntimeError("disk full")


def test_a_failed_save_prunes_nothing_and_a_failed_prune_keeps_the_save(
    tmp_path: Path,
    store: Store,
    trained: tuple[SmallVLAPolicy, Trainer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy, trainer = trained
    checkpoints = _start(tmp_path, store, policy)
    keeper = CheckpointKeeper(checkpoints, store, Retention(keep_trainer_state=1, keep_versions=1))
    for version in (1, 2):
        keeper.save(policy, version, {}, trainer.state_dict(), in_use={version - 1})
    assert checkpoints.versions() == [0, 1, 2] and _with_state(checkpoints) == {2}

    broken = _Unsaveable(policy.config)
    with pytest.raises(RuntimeError, match="disk full"):
        keeper.save(broken, 3, {}, trainer.state_dict(), in_use={2})
    assert checkpoints.versions() == [0, 1, 2] and _with_state(checkpoints) == {2}
    assert [c.version for c in store.checkpoints()] == [0, 1, 2] and _pruned_rows(store) == set()

    def no_removing(version: int) -> int:
        raise PermissionError(f"cannot remove version {version}")

    monkeypatch.setattr(checkpoints, "remove", no_removing)
    with caplog.at_level(logging.INFO, logger="learner.loop.retention"):
        path = keeper.save(policy, 3, {}, trainer.state_dict(), in_use={2})
    assert path.is_file() and store.latest_checkpoint() is not None
    assert "retention failed after saving version 3" in caplog.text
    assert "trainer state dropped from v2, files removed none" in caplog.text  # what it did do
    # the row was marked before the file was to go: the next pass removes the file
    assert _pruned_rows(store) == {1} and checkpoints.versions() == [0, 1, 2, 3]
    monkeypatch.undo()
    keeper.save(policy, 4, {}, trainer.state_dict(), in_use={3})
    assert checkpoints.versions() == [0, 3, 4] and _pruned_rows(store) == {1, 2}


def test_the_settings_have_one_home_env_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LoopSettings.model_validate({}).checkpoint_retention() == Retention()
    monkeypatch.setenv("PDE_LOOP_CHECKPOINT_KEEP_VERSIONS", "5")
    assert LoopSettings.model_validate({}).checkpoint_retention() == Retention(1, keep_versions=5)
    _, overrides = parse_args(["--checkpoint-keep-trainer-state", "2", "--checkpoint-keep-versions", "3"])
    assert LoopSettings(**overrides).checkpoint_retention() == Retention(2, 3)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        LoopSettings.model_validate({"checkpoint_keep_versions": -1})
    with pytest.raises(ValueError, match=r"keep_versions must be >= 0 \(0 = keep all\), got -1"):
        Retention(keep_versions=-1)
