"""Where policy checkpoints live: ``<dir>/policy-<version:06d>.pt``, and which of them stay
(``Retention``). One home for the name and the retention rule, importable without torch (``pde
demo`` reads the folder and the loop's settings hold the retention's defaults;
``learner.checkpoints`` writes the files)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"^policy-(\d{6,})\.pt$")


def checkpoint_path(directory: str | Path, version: int) -> Path:
    """The file of policy ``version`` in ``directory`` (version 0: the SFT policy)."""
    if version < 0:
        raise ValueError(f"checkpoint version must be >= 0, got {version}")
    return Path(directory) / f"policy-{version:06d}.pt"


def checkpoint_files(directory: str | Path) -> dict[int, Path]:
    """version -> file of every checkpoint in ``directory``, in version order (empty when the
    folder does not exist). Other files, e.g. a write's temporary file, are not checkpoints."""
    folder = Path(directory)
    if not folder.is_dir():
        return {}
    found = {int(m.group(1)): p for p in folder.iterdir() if (m := _NAME.match(p.name))}
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class Retention:
    """Which older checkpoints keep what. Version 0 (the SFT or ``--init`` start), the newest
    version and the protected ones (in use) always keep their file."""

    keep_trainer_state: int = 1
    """The newest this many versions keep the trainer's state (resuming needs only the newest's);
    older files are rewritten without it. 0: every version keeps it (nothing is stripped)."""
    keep_versions: int = 0
    """The newest this many versions keep their file; older ones are removed. 0: every version."""

    def __post_init__(self) -> None:
        for name in ("keep_trainer_state", "keep_versions"):
            if getattr(self, name) < 0:
                raise ValueError(f"Retention.{name} must be >= 0 (0 = keep all), got {getattr(self, name)}")

    def plan(self, versions: Sequence[int], protected: Collection[int] = ()) -> tuple[list[int], list[int]]:
        """(versions whose trainer state goes, versions whose file goes), for the files
        ``versions``; a removed file is not stripped first."""
        ordered = sorted(set(versions))
        if not ordered:
            return [], []
        removed: list[int] = []
        if self.keep_versions:
            kept = {0, ordered[-1], *ordered[-self.keep_versions :], *protected}
            removed = [v for v in ordered if v not in kept]
        stripped: list[int] = []
        if self.keep_trainer_state:
            keep_state = set(ordered[-self.keep_trainer_state :])
            stripped = [v for v in ordered if v not in keep_state and v not in removed]
        return stripped, removed
