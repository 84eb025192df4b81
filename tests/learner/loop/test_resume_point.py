"""The loop's resume point and its plan, typed end to end (issue 37 item 2): the newest episode a
PPO update trained on is a field of the checkpoint file and of the store's checkpoint row (older
files and rows, which kept it among the metrics, read the same), and a plan becomes the loop's
published state without a dict."""

from __future__ import annotations

from pathlib import Path

import torch

from learner.checkpoints import CheckpointStore
from learner.loop.schedule import Plan
from learner.policies.vla import make_test_policy
from pde_contract.records import Stage
from pde_contract.service_state import LoopPhase, LoopState
from pde_storage import Store


def test_a_checkpoint_file_keeps_the_resume_point_as_a_field_and_reads_an_old_one(tmp_path: Path) -> None:
    checkpoints = CheckpointStore(tmp_path)
    policy = make_test_policy("flow")
    new = checkpoints.load(checkpoints.save(policy, 2, {"pg_loss": 0.5}, trained_through_episode_id=41))
    assert new.trained_through_episode_id == 41 and new.metrics == {"pg_loss": 0.5}
    # a file from before: the resume point a float among the metrics
    old_path = checkpoints.save(policy, 3, {"pg_loss": 0.25, "trained_through_episode_id": 57.0})
    payload = torch.load(old_path, weights_only=False)
    del payload["trained_through_episode_id"]
    torch.save(payload, old_path)
    old = checkpoints.load(old_path)
    assert old.trained_through_episode_id == 57 and old.metrics == {"pg_loss": 0.25}
    # renumbered (a damaged newer version): the copy keeps it
    assert checkpoints.renumbered(old, 5).trained_through_episode_id == 57
    assert checkpoints.load(checkpoints.save(policy, 0, {})).trained_through_episode_id is None  # SFT


def test_a_checkpoint_row_keeps_the_resume_point_as_a_field_and_reads_an_old_one(
    store: Store, tmp_path: Path
) -> None:
    store.add_checkpoint(1, tmp_path / "v1.pt", {"pg_loss": 0.5}, trained_through_episode_id=12)
    store.add_checkpoint(2, tmp_path / "v2.pt", {"pg_loss": 0.4, "trained_through_episode_id": 20.0})  # old
    store.add_checkpoint(3, tmp_path / "v3.pt", {"init_from_dir": 1.0})
    rows = store.checkpoints()
    assert [c.trained_through_episode_id for c in rows] == [12, 20, None]
    assert [c.metrics for c in rows] == [{"pg_loss": 0.5}, {"pg_loss": 0.4}, {"init_from_dir": 1.0}]


def test_a_plan_is_the_loop_s_state_of_the_episode_in_hand() -> None:
    plan = Plan("t", 4, "drop the box", "put the box", Stage.RL, "mixture draw").with_seed(9)
    state = plan.shown_in(LoopState(phase=LoopPhase.RESETTING, episode_id=7))
    assert (state.phase, state.episode_id, state.task, state.prompt, state.prompt_id) == (
        LoopPhase.RESETTING, 7, "t", "drop the box", 4,
    )  # fmt: skip
    assert (state.canonical_prompt, state.stage, state.why, state.seed, state.practice) == (
        "put the box", "rl", "mixture draw", 9, False,
    )  # fmt: skip
    practice = Plan("t", 1, "put the box", "put the box", Stage.RL, "practice", 3, practice=True)
    shown = practice.shown_in(LoopState(phase=LoopPhase.RUNNING))
    assert shown.stage == "practice" and shown.practice
