"""The update scheduler: when a PPO update is due, which labelled episodes make its batch, and the
policy version the loop runs as updates finish.

Pure bookkeeping (no store, no trainer, no torch): the loop hands it the labelled episodes and the
finished update's result, and does what it returns (load the batch's files, start the trainer,
swap the actor's weights, write the metrics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from learner.loop.mixture_book import Metric
from learner.loop.training import UpdateResult
from pde_contract.records import Stage
from pde_contract.run_metrics import PPO_UPDATE_WALL_S, ppo_metric


class LabelledEpisode(Protocol):
    """The part of a stored episode row the scheduler reads."""

    @property
    def id(self) -> int: ...
    @property
    def stage(self) -> str: ...
    @property
    def task(self) -> str: ...


E = TypeVar("E", bound=LabelledEpisode)


@dataclass(frozen=True)
class Swap:
    """What a finished update means for the actor: new weights, or an error to show."""

    version: int
    policy: Any | None  # None: the update failed, the actor keeps its weights
    error: str = ""  # shown on the page until an update succeeds
    metrics: tuple[Metric, ...] = ()


@dataclass
class UpdateScheduler:
    batch_size: int
    """RL-stage labelled episodes per PPO update."""
    tasks: Sequence[str]
    """The loop's tasks: episodes of other tasks in the store never enter a batch."""
    policy_version: int = 0
    """The version of the weights the actor runs (and the next update starts from)."""
    trained_through: int = 0
    """Newest episode id an update has used: batches take episodes after it, oldest first."""
    rl_labels_ready: int = field(default=0, init=False)
    """Labelled RL episodes waiting for the next batch (as of the last ``due``)."""

    @property
    def labels_until_update(self) -> int:
        return max(0, self.batch_size - self.rl_labels_ready)

    def due(self, labelled_since: Sequence[E]) -> list[E] | None:
        """The next batch's episodes, or None while fewer than ``batch_size`` wait.
        ``labelled_since`` is every episode labelled after ``trained_through``, oldest first; the
        batch is its first ``batch_size`` RL-stage episodes of the loop's tasks. Taking the batch
        moves ``trained_through`` past it: call this only when the update will start."""
        ready = [e for e in labelled_since if e.stage == Stage.RL and e.task in self.tasks]
        self.rl_labels_ready = len(ready)
        if len(ready) < self.batch_size:
            return None
        chosen = ready[: self.batch_size]
        self.trained_through = chosen[-1].id
        self.rl_labels_ready = len(ready) - len(chosen)
        return chosen

    @property
    def next_version(self) -> int:
        """The version the next update trains (it starts from ``policy_version``)."""
        return self.policy_version + 1

    def swap(self, result: UpdateResult) -> Swap:
        """A finished update: on success its version is the one in use from now on; its finite
        PPO statistics and its duration become metrics at that version."""
        if result.policy is None:
            error = f"PPO update to version {result.version} failed: {result.error}"
            return Swap(result.version, None, error)
        self.policy_version = result.version
        metrics = [
            Metric(ppo_metric(k), float(v), result.version)
            for k, v in result.stats.items()
            if math.isfinite(float(v))
        ]
        metrics.append(Metric(PPO_UPDATE_WALL_S, result.duration_s, result.version))
        return Swap(result.version, result.policy, metrics=tuple(metrics))
