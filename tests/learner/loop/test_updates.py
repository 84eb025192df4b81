"""The update scheduler on its own: no store, no trainer."""

from __future__ import annotations

import math
from dataclasses import dataclass

from learner.loop.mixture_book import Metric
from learner.loop.training import UpdateResult
from learner.loop.updates import UpdateScheduler


@dataclass(frozen=True)
class Row:  # the fields of an episode row the scheduler reads
    id: int
    stage: str = "rl"
    task: str = "t"


def test_a_batch_is_due_at_batch_size_rl_labels_of_the_loops_tasks() -> None:
    updates = UpdateScheduler(batch_size=3, tasks=["t"], trained_through=10)
    assert updates.labels_until_update == 3
    # bootstrap episodes and another loop's task never count
    waiting = [Row(11), Row(12, stage="bootstrap"), Row(13, task="other"), Row(14)]
    assert updates.due(waiting) is None
    assert (updates.rl_labels_ready, updates.labels_until_update, updates.trained_through) == (2, 1, 10)
    batch = updates.due([*waiting, Row(15), Row(16)])
    assert batch == [Row(11), Row(14), Row(15)]
    # the next batch starts after the newest episode taken; one label already waits for it
    assert (updates.trained_through, updates.rl_labels_ready, updates.labels_until_update) == (15, 1, 2)


def test_a_successful_update_becomes_the_version_in_use_with_its_finite_stats() -> None:
    updates = UpdateScheduler(batch_size=2, tasks=["t"], policy_version=4)
    assert updates.next_version == 5
    policy = object()
    result = UpdateResult(5, policy, {"pg_loss": 0.5, "explained_variance": math.nan}, [1, 2], duration_s=3.0)
    swap = updates.swap(result)
    assert (swap.version, swap.policy, swap.error) == (5, policy, "")
    assert swap.metrics == (Metric("ppo/pg_loss", 0.5, 5), Metric("ppo/update_wall_s", 3.0, 5))
    assert updates.policy_version == 5 and updates.next_version == 6


def test_a_failed_update_keeps_the_version_and_says_why() -> None:
    updates = UpdateScheduler(batch_size=2, tasks=["t"], policy_version=4)
    swap = updates.swap(UpdateResult(5, None, error="RuntimeError: CUDA out of memory"))
    assert swap.policy is None and swap.metrics == ()
    assert swap.error == "PPO update to version 5 failed: RuntimeError: CUDA out of memory"
    assert updates.policy_version == 4 and updates.next_version == 5
