"""Versioned policy checkpoints: ``<dir>/policy-<version:06d>.pt``, written atomically (temp file,
fsync, rename) so a crash never leaves a truncated checkpoint under a final name. ``latest()``
returns the highest version that loads.

A file holds the policy and, optionally, the trainer's (Adam) state, which only resuming needs:
``learner.checkpoint_files.Retention`` says which versions keep it and which files stay at all
(the loop applies it after each save, learner/loop/retention.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from learner.checkpoint_files import checkpoint_files, checkpoint_path
from learner.policies import policy_from_checkpoint_state
from learner.policies.base import Policy
from pde_contract.files import atomic_path

log = logging.getLogger(__name__)


# Before the resume point was a field of its own, the loop kept it among a checkpoint's metrics.
_OLD_TRAINED_THROUGH_KEY = "trained_through_episode_id"


@dataclass
class LoadedCheckpoint:
    version: int
    path: Path
    policy: Policy
    metrics: dict[str, float]
    trainer_state: dict[str, Any] | None
    trained_through_episode_id: int | None = None
    """the newest episode a PPO update to this version trained on (where the loop resumes); None:
    none did (an SFT policy)"""


class CheckpointStore:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path_for(self, version: int) -> Path:
        return checkpoint_path(self.directory, version)

    def save(
        self,
        policy: Policy,
        version: int,
        metrics: dict[str, float] | None = None,
        trainer_state: dict[str, Any] | None = None,
        trained_through_episode_id: int | None = None,
    ) -> Path:
        path = self.path_for(version)  # refuses a negative version
        payload = {
            "version": version,
            "policy": policy.checkpoint_state(),
            "metrics": dict(metrics or {}),
            "trainer_state": trainer_state,
            "trained_through_episode_id": trained_through_episode_id,
        }
        with atomic_path(path) as tmp:
            torch.save(payload, tmp)
        return path

    def versions(self) -> list[int]:
        return list(checkpoint_files(self.directory))

    def strip_trainer_state(self, version: int) -> int:
        """Rewrite ``version``'s file without its trainer state (atomically: a crash leaves the old
        file); the bytes freed, 0 when it held none. The file is memory-mapped: the Adam state is
        never read and the weights pass through the page cache, not the process's own memory (a
        1.2 GB file, 0.4 GB of it weights: +0.39 GB peak RSS, all file pages, against +1.17 GB
        with a plain load)."""
        path = self.path_for(version)
        before = path.stat().st_size
        payload = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        if payload.get("trainer_state") is None:
            return 0
        payload["trainer_state"] = None
        with atomic_path(path) as tmp:
            torch.save(payload, tmp)
        return before - path.stat().st_size

    def remove(self, version: int) -> int:
        """Delete ``version``'s file; the bytes freed (0 when it was not there)."""
        path = self.path_for(version)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    @staticmethod
    def load(path: str | Path, device: torch.device | str = "cpu") -> LoadedCheckpoint:
        """The checkpoint with its policy on ``device``. Everything is read onto the CPU first
        (``map_location``): a file written on a GPU machine loads on any other; the trainer state
        follows the parameters' device when the optimiser loads it."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint at {path}; train one with `pde learner sft` first")
        payload = torch.load(path, map_location="cpu", weights_only=False)
        policy = policy_from_checkpoint_state(payload["policy"])
        policy.to(device)
        policy.eval()
        policy.version = int(payload["version"])
        metrics = dict(payload.get("metrics", {}))
        through = payload.get("trained_through_episode_id")
        old = metrics.pop(_OLD_TRAINED_THROUGH_KEY, None)  # a file from before: read it there
        if through is None and old is not None:
            through = old
        return LoadedCheckpoint(
            version=int(payload["version"]),
            path=path,
            policy=policy,
            metrics=metrics,
            trainer_state=payload.get("trainer_state"),
            trained_through_episode_id=None if through is None else int(through),
        )

    def renumbered(
        self, loaded: LoadedCheckpoint, newest_known: int, device: torch.device | str = "cpu"
    ) -> LoadedCheckpoint:
        """``loaded`` itself when no version above it is known; else (``latest()`` skipped damaged
        newer files, or the database knows newer versions) a copy of it saved as ``newest_known + 1``.
        Versions stay unique: the next update would otherwise write the number of a damaged
        version whose database row and episodes already exist."""
        if loaded.version >= newest_known:
            return loaded
        version = newest_known + 1
        log.warning(
            "resuming from version %d although version %d is known (its file is missing or does not "
            "load); it continues as version %d",
            loaded.version,
            newest_known,
            version,
        )
        metrics = {**loaded.metrics, "resumed_from_version": float(loaded.version)}
        through = loaded.trained_through_episode_id
        path = self.save(
            loaded.policy, version, metrics, loaded.trainer_state, trained_through_episode_id=through
        )
        return self.load(path, device)

    def latest(self, device: torch.device | str = "cpu") -> LoadedCheckpoint | None:
        """The newest checkpoint that loads; unreadable ones are skipped with a warning."""
        for version in reversed(self.versions()):
            try:
                return self.load(self.path_for(version), device)
            except Exception as e:  # a damaged file must not block resuming from an older one
                log.warning("checkpoint %s unreadable (%s); trying an older one", self.path_for(version), e)
        return None
