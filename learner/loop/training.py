"""PPO in a background thread: the robot keeps collecting episodes while an update runs, and the
new weights are swapped into the actor between episodes.

So a batch can hold episodes of older policy versions (off-policy by a version or more: the ones
collected while the previous update ran). ``staleness_stats`` says by how much, per update; the
stats go with the update's PPO stats into the checkpoint's metrics and the store's metrics
(``ppo/stale_lag_max`` etc., served at /api/metrics/ppo/stale_lag_max)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from learner.rewards import Batch
from pde_contract.episodes import EpisodeFile

log = logging.getLogger(__name__)


class TrainerLike(Protocol):
    """The part of learner.trainer.Trainer the loop uses."""

    def update(self, batch: Batch) -> dict[str, float]: ...
    def policy_snapshot(self) -> Any: ...


@dataclass
class UpdateResult:
    version: int
    policy: Any | None  # None when the update failed
    stats: dict[str, float] = field(default_factory=dict)
    episode_ids: list[int] = field(default_factory=list)
    error: str = ""
    duration_s: float = 0.0


def episode_policy_version(episode: EpisodeFile, fallback: int) -> int:
    """The policy version an episode was collected with, from its ``source`` ("policy:<version>");
    ``fallback`` (e.g. the stored row's version) when the source does not say."""
    kind, _, version = episode.source.partition(":")
    if kind == "policy" and version.strip().isdigit():
        return int(version)
    return fallback


def staleness_stats(versions: Sequence[int], trained_version: int) -> dict[str, float]:
    """How stale a batch is: lag = trained_version (the weights the update starts from) minus the
    version each episode was collected with, in versions. 0 everywhere = on-policy."""
    if not versions:
        return {}
    lags = [max(0, trained_version - v) for v in versions]
    return {
        "stale_lag_max": float(max(lags)),
        "stale_lag_mean": sum(lags) / len(lags),
        "stale_share": sum(lag > 0 for lag in lags) / len(lags),
        "stale_oldest_version": float(min(versions)),
    }


@dataclass(frozen=True)
class TrainedVersion:
    """A PPO update's new version, as its checkpoint keeps it."""

    policy: Any
    version: int
    metrics: dict[str, float]  # the update's diagnostics (the page's curves)
    trained_through_episode_id: int  # the newest episode of its batch: where a restart resumes


# the new version -> its checkpoint's path; called in the training thread.
SaveCheckpoint = Callable[[TrainedVersion], str]


class BackgroundTrainer:
    def __init__(self, trainer: TrainerLike, save_checkpoint: SaveCheckpoint) -> None:
        self.trainer = trainer
        self._save = save_checkpoint
        self._thread: threading.Thread | None = None
        self._result: UpdateResult | None = None
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        """An update runs, or its result waits for poll(): the next update must start from the
        version that result swaps in (starting earlier labelled two updates with one version)."""
        with self._lock:
            pending = self._result is not None
        return pending or (self._thread is not None and self._thread.is_alive())

    def start(
        self,
        batch: Batch,
        episode_ids: list[int],
        new_version: int,
        batch_stats: dict[str, float] | None = None,
    ) -> None:
        """Train ``new_version`` on ``batch``; ``batch_stats`` (e.g. staleness) join the
        trainer's stats in the result and the checkpoint's metrics."""
        if self.busy:
            raise RuntimeError("a PPO update is already running; wait for poll() to return its result")

        def run() -> None:
            t0 = time.perf_counter()
            try:
                stats = {**self.trainer.update(batch), **(batch_stats or {})}
                policy = self.trainer.policy_snapshot()
                if hasattr(policy, "version"):
                    policy.version = new_version  # recorded in each episode file's source
                self._save(TrainedVersion(policy, new_version, stats, max(episode_ids)))
                result = UpdateResult(
                    new_version, policy, stats, episode_ids, duration_s=time.perf_counter() - t0
                )
            except Exception as e:  # reported to the loop; the robot keeps running on the old weights
                log.exception("PPO update to version %d failed", new_version)
                result = UpdateResult(
                    new_version,
                    None,
                    {},
                    episode_ids,
                    error=f"{type(e).__name__}: {e}",
                    duration_s=time.perf_counter() - t0,
                )
            with self._lock:
                self._result = result

        self._thread = threading.Thread(target=run, name=f"ppo-update-{new_version}", daemon=True)
        self._thread.start()

    def poll(self) -> UpdateResult | None:
        """The finished update's result, once; None while running or idle."""
        with self._lock:
            result, self._result = self._result, None
        return result

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
