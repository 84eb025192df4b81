"""Where policy checkpoints live: ``<dir>/policy-<version:06d>.pt``. One home for the name, and
importable without torch (``pde demo`` reads the folder; ``learner.checkpoints`` writes it)."""

from __future__ import annotations

import re
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
