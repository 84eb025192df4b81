"""PPO in a background thread: the robot keeps collecting episodes while an update runs, and the
new weights are swapped into the actor between episodes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pde_contract.episodes import EpisodeFile

log = logging.getLogger(__name__)

Batch = Sequence[tuple[EpisodeFile, float]]


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


# (policy, version, metrics) -> checkpoint path; called in the training thread.
SaveCheckpoint = Callable[[Any, int, dict[str, float]], str]


class BackgroundTrainer:
    def __init__(self, trainer: TrainerLike, save_checkpoint: SaveCheckpoint) -> None:
        self.trainer = trainer
        self._save = save_checkpoint
        self._thread: threading.Thread | None = None
        self._result: UpdateResult | None = None
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, batch: Batch, episode_ids: list[int], new_version: int) -> None:
        if self.busy:
            raise RuntimeError("a PPO update is already running; wait for poll() to return its result")

        def run() -> None:
            t0 = time.perf_counter()
            try:
                stats = self.trainer.update(batch)
                policy = self.trainer.policy_snapshot()
                if hasattr(policy, "version"):
                    policy.version = new_version  # recorded in each episode file's source
                metrics = {**stats, "trained_through_episode_id": float(max(episode_ids))}
                self._save(policy, new_version, metrics)
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
