"""The loop's checkpoints: each PPO version is saved, registered in the store, then older versions
are pruned by ``learner.checkpoint_files.Retention`` (settings ``checkpoint_keep_trainer_state`` and
``checkpoint_keep_versions``).

Never pruned: version 0 (the start), the newest version, the version the actor runs, and any
version an episode still in play was collected with (``Store.policy_versions_in_use``). A removed
version's row stays in the store, marked (``pruned_at``), so no row points to a missing file
without saying so; it is marked before its file goes, so a crash in between leaves a marked row
and a file the next pass removes, never an unmarked row without its file."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learner.checkpoint_files import Retention
from learner.checkpoints import CheckpointStore
from learner.policies.base import Policy
from pde_storage.protocols import CheckpointRetentionStore

log = logging.getLogger(__name__)


@dataclass
class PruneReport:
    stripped: list[int] = field(default_factory=list)  # versions whose trainer state was dropped
    removed: list[int] = field(default_factory=list)  # versions whose file was deleted
    bytes_freed: int = 0


class CheckpointKeeper:
    def __init__(
        self, checkpoints: CheckpointStore, store: CheckpointRetentionStore, retention: Retention
    ) -> None:
        self.checkpoints, self.store, self.retention = checkpoints, store, retention
        # Versions known to hold no trainer state: each file is opened once per process, not at
        # every save.
        self._stateless: set[int] = set()

    def save(
        self,
        policy: Policy,
        version: int,
        metrics: dict[str, float],
        trainer_state: dict[str, Any] | None,
        in_use: Collection[int] = (),
        trained_through_episode_id: int | None = None,
    ) -> Path:
        """Save and register ``version``, then prune; ``in_use``: versions to keep besides the
        store's (the actor's). A failed save raises before anything is pruned; a failed prune is
        logged and leaves the new version saved and registered."""
        through = trained_through_episode_id
        path = self.checkpoints.save(
            policy, version, metrics, trainer_state, trained_through_episode_id=through
        )
        self.store.add_checkpoint(version, path, metrics, trained_through_episode_id=through)
        try:
            self.prune(in_use)
        except Exception:  # pruning only frees disk: the update itself succeeded
            log.exception("checkpoint retention failed after saving version %d; older files kept", version)
        return path

    def prune(self, in_use: Collection[int] = ()) -> PruneReport:
        """Apply the retention to the files there now; what was done is logged even when a step
        fails (and raises)."""
        protected = {*in_use, *self.store.policy_versions_in_use()}
        stripped, removed = self.retention.plan(self.checkpoints.versions(), protected)
        report = PruneReport()
        try:
            for version in stripped:
                if version in self._stateless:
                    continue
                freed = self.checkpoints.strip_trainer_state(version)
                self._stateless.add(version)
                if freed:
                    report.stripped.append(version)
                    report.bytes_freed += freed
            rows = {row.version: row for row in self.store.checkpoints()} if removed else {}
            for version in removed:
                row = rows.get(version)
                if row is not None and row.pruned_at is None:
                    self.store.mark_checkpoint_pruned(version)
                report.bytes_freed += self.checkpoints.remove(version)
                report.removed.append(version)
        finally:
            if report.stripped or report.removed:
                log.info(
                    "checkpoints: trainer state dropped from %s, files removed %s: %s freed "
                    "(keeping trainer state in the newest %s, files of the newest %s, version 0 "
                    "and versions in use %s)",
                    _versions(report.stripped),
                    _versions(report.removed),
                    _size(report.bytes_freed),
                    self.retention.keep_trainer_state or "all",
                    self.retention.keep_versions or "all",
                    sorted(protected) or "none",
                )
        return report


def _versions(versions: list[int]) -> str:
    return "v" + ", v".join(map(str, versions)) if versions else "none"


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.2f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.1f} MB"
